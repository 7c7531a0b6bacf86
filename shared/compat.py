"""Tolerating what a newer peer may send, and refusing what cannot be honoured.

Unknown fields are kept by protobuf and ignored. An enum value this build does not know
(a newer peer added it, or a caller sent a stray number) is handled by where it sits:

- in the data a request carries (a Message and its content blocks, which a service stores
  or relays), it is read as UNSPECIFIED (0) with a log line, never a crash, so an older
  service keeps storing what a newer one writes;
- anywhere else it is a choice the caller made (a direction, a strategy, a policy, a
  filter), and reading it as UNSPECIFIED would silently do what the caller did not ask
  for (the default): it is refused, INVALID_ARGUMENT naming the field.

The server interceptor applies `check_enums` to every request before the servicer sees it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

_ENUM = FieldDescriptor.TYPE_ENUM
_MESSAGE = FieldDescriptor.TYPE_MESSAGE
_HAS_ENUMS: dict[str, bool] = {}
# Message types that are stored or relayed data: an unknown enum below them reads as unset.
DATA_TYPES = frozenset({"agentmesh.type.v1.Message"})


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
        or (
            fd.type == _MESSAGE
            and fd.message_type is not None
            and _has_enums(fd.message_type, inner)
        )
        for fd in descriptor.fields
    )
    if found or not visiting:
        _HAS_ENUMS[name] = found
    return found


@dataclass
class EnumCheck:
    """What `check_enums` found: values refused (field, number) and data fields reset."""

    refused: list[tuple[str, int]] = field(default_factory=list)
    reset: list[str] = field(default_factory=list)


def is_known(fd: FieldDescriptor, value: int) -> bool:
    """Whether `value` is a number of the enum of field `fd`."""
    return fd.enum_type is not None and value in fd.enum_type.values_by_number


def check_enums(message: Any, prefix: str = "", *, data: bool = False) -> EnumCheck:
    """Find every enum value `message` does not know: reset those in data to 0, list the
    others as refused.

    Walks only the fields that are set (ListFields, in C) and only into message types that
    can hold an enum, so a request without enums below costs next to nothing."""
    out = EnumCheck()
    data = data or message.DESCRIPTOR.full_name in DATA_TYPES
    for fd, value in message.ListFields():
        kind = fd.type
        if kind == _ENUM:
            items = list(enumerate(value)) if fd.is_repeated else [(None, value)]
            for i, item in items:
                if is_known(fd, item):
                    continue
                name = f"{prefix}{fd.name}" + ("" if i is None else f"[{i}]")
                if not data:
                    out.refused.append((name, item))
                elif i is None:
                    setattr(message, fd.name, 0)
                    out.reset.append(name)
                else:
                    value[i] = 0
                    out.reset.append(name)
        elif kind == _MESSAGE and _has_enums(fd.message_type):
            if fd.is_repeated:
                if fd.message_type.GetOptions().map_entry:
                    continue
                inner = [(f"{prefix}{fd.name}[{i}].", item) for i, item in enumerate(value)]
            else:
                inner = [(f"{prefix}{fd.name}.", value)]
            for path, item in inner:
                found = check_enums(item, path, data=data)
                out.refused.extend(found.refused)
                out.reset.extend(found.reset)
    return out
