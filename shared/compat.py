"""Tolerating what a newer peer may send.

Unknown fields are kept by protobuf and ignored. An enum value this build does not know
(a newer peer added it) is read as UNSPECIFIED (0) with a log line, never a crash: the
server interceptor applies `unknown_enums_to_unspecified` to every request before the
servicer sees it, so each service handles the value as it handles an unset field.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

_ENUM = FieldDescriptor.TYPE_ENUM
_MESSAGE = FieldDescriptor.TYPE_MESSAGE
_HAS_ENUMS: dict[str, bool] = {}


def _has_enums(descriptor: Descriptor, visiting: frozenset[str] = frozenset()) -> bool:
    """Whether a message type holds an enum field anywhere below it (recursive types allowed)."""
    name = descriptor.full_name
    known = _HAS_ENUMS.get(name)
    if known is not None:
        return known
    if name in visiting:
        return False  # the cycle adds nothing the other paths do not find
    inner = visiting | {name}
    found = any(
        fd.type == _ENUM
        or (fd.type == _MESSAGE and _has_enums(fd.message_type, inner))
        for fd in descriptor.fields
    )
    if found or not visiting:
        _HAS_ENUMS[name] = found
    return found


def unknown_enums_to_unspecified(message: Any, prefix: str = "") -> list[str]:
    """Reset every enum value `message` does not know to 0; returns the fields reset.

    Walks only the fields that are set (ListFields, in C) and only into message types that
    can hold an enum, so a request without enums below costs next to nothing."""
    reset: list[str] = []
    for fd, value in message.ListFields():
        kind = fd.type
        if kind == _ENUM:
            known = fd.enum_type.values_by_number
            if fd.is_repeated:
                for i, item in enumerate(value):
                    if item not in known:
                        value[i] = 0
                        reset.append(f"{prefix}{fd.name}[{i}]")
            elif value not in known:
                setattr(message, fd.name, 0)
                reset.append(f"{prefix}{fd.name}")
        elif kind == _MESSAGE and _has_enums(fd.message_type):
            if fd.is_repeated:
                if fd.message_type.GetOptions().map_entry:
                    continue
                for i, item in enumerate(value):
                    reset.extend(unknown_enums_to_unspecified(item, f"{prefix}{fd.name}[{i}]."))
            else:
                reset.extend(unknown_enums_to_unspecified(value, f"{prefix}{fd.name}."))
    return reset
