"""Tolerating what a newer peer may send.

Unknown fields are kept by protobuf and ignored. An enum value this build does not know
(a newer peer added it) is read as UNSPECIFIED (0) with a log line, never a crash: the
server interceptor applies `unknown_enums_to_unspecified` to every request before the
servicer sees it, so each service handles the value as it handles an unset field.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor


_PLANS: dict[str, tuple[tuple[FieldDescriptor, bool], ...]] = {}


def _plan(descriptor: Descriptor, visiting: frozenset[str] = frozenset()) -> tuple[tuple[FieldDescriptor, bool], ...]:
    """The fields worth visiting: enums, and messages that contain enums somewhere.

    Message types can be recursive (a tool result holds content blocks): a type already
    being planned is visited, since it may hold enums."""
    name = descriptor.full_name
    if name in _PLANS:
        return _PLANS[name]
    out: list[tuple[FieldDescriptor, bool]] = []
    for fd in descriptor.fields:
        if fd.type == FieldDescriptor.TYPE_ENUM:
            out.append((fd, True))
        elif fd.type == FieldDescriptor.TYPE_MESSAGE and not fd.message_type.GetOptions().map_entry:
            sub = fd.message_type
            if sub.full_name in visiting or sub.full_name == name or _plan(sub, visiting | {name}):
                out.append((fd, False))
    plan = tuple(out)
    if not visiting:
        _PLANS[name] = plan
    return plan


def unknown_enums_to_unspecified(message: Any, prefix: str = "") -> list[str]:
    """Reset every enum value `message` does not know to 0; returns the fields reset."""
    reset: list[str] = []
    for fd, is_enum in _plan(message.DESCRIPTOR):
        name = f"{prefix}{fd.name}"
        if is_enum:
            known = fd.enum_type.values_by_number
            if fd.is_repeated:
                values = getattr(message, fd.name)
                for i, value in enumerate(values):
                    if value not in known:
                        values[i] = 0
                        reset.append(f"{name}[{i}]")
            elif getattr(message, fd.name) not in known:
                setattr(message, fd.name, 0)
                reset.append(name)
        elif fd.is_repeated:
            for i, item in enumerate(getattr(message, fd.name)):
                reset.extend(unknown_enums_to_unspecified(item, f"{name}[{i}]."))
        elif message.HasField(fd.name):
            reset.extend(unknown_enums_to_unspecified(getattr(message, fd.name), f"{name}."))
    return reset
