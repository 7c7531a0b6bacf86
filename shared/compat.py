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


# One field of a message type that `check_enums` looks at: its name, whether it is
# repeated, and for an enum the numbers it knows (None for a message field that can hold one).
_Checked = tuple[str, bool, frozenset[int] | None]
_PLANS: dict[str, tuple[bool, tuple[_Checked, ...]]] = {}


def _plan(descriptor: Descriptor) -> tuple[bool, tuple[_Checked, ...]]:
    """Whether a message type is data, and the fields of it that can hold an enum, in field
    number order (the order ListFields reports), maps left out: worked out once per type,
    so a request costs a getattr per such field instead of a walk over every set field."""
    name = descriptor.full_name
    plan = _PLANS.get(name)
    if plan is not None:
        return plan
    checked: list[_Checked] = []
    for fd in sorted(descriptor.fields, key=lambda f: f.number):
        repeated = fd.is_repeated
        if fd.type == _ENUM and fd.enum_type is not None:
            checked.append((fd.name, repeated, frozenset(fd.enum_type.values_by_number)))
        elif fd.type == _MESSAGE and (inner := fd.message_type) is not None:
            if _has_enums(inner) and not (repeated and inner.GetOptions().map_entry):
                checked.append((fd.name, repeated, None))
    plan = _PLANS[name] = (name in DATA_TYPES, tuple(checked))
    return plan


def check_enums(message: Any, prefix: str = "", *, data: bool = False) -> EnumCheck:
    """Find every enum value `message` does not know: reset those in data to 0, list the
    others as refused.

    Looks only at the fields that can hold an enum (`_plan`) and into the messages set there,
    so a request without enums below costs next to nothing."""
    out = EnumCheck()
    _check(message, prefix, data, out)
    return out


def _check(message: Any, prefix: str, data: bool, out: EnumCheck) -> None:
    is_data, checked = _plan(message.DESCRIPTOR)
    data = data or is_data
    for name, repeated, known in checked:
        if known is not None:
            value = getattr(message, name)
            if not repeated:
                if value not in known:
                    if data:
                        setattr(message, name, 0)
                        out.reset.append(f"{prefix}{name}")
                    else:
                        out.refused.append((f"{prefix}{name}", value))
                continue
            for i, item in enumerate(value):
                if item not in known:
                    if data:
                        value[i] = 0
                        out.reset.append(f"{prefix}{name}[{i}]")
                    else:
                        out.refused.append((f"{prefix}{name}[{i}]", item))
        elif repeated:
            for i, item in enumerate(getattr(message, name)):
                _check(item, f"{prefix}{name}[{i}].", data, out)
        elif message.HasField(name):
            _check(getattr(message, name), f"{prefix}{name}.", data, out)
