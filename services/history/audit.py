"""The audit listing, without I/O: an owner's messages (hidden ones included) and refused
tool calls, matched by one filter and paged side by side, each stream with its own key."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from services.history.context import ContextKey
from services.history.core import Message, ToolDenial
from shared.domain import ExecutorKind, RuntimeMode
from shared.pagination import bad_token, position_dict, position_list, position_str, position_time


@dataclass(frozen=True)
class AuditFilter:
    origin: RuntimeMode | None = None
    executor: ExecutorKind | None = None
    execution_profile_name: str = ""
    thread_id: str = ""
    start_time: datetime | None = None
    end_time: datetime | None = None


@dataclass(frozen=True)
class DenialKey:
    """Where a refused tool call sits in the audit: by time, run and call."""

    created_at: datetime
    run_id: str
    tool_call_id: str

    @classmethod
    def of(cls, d: ToolDenial) -> DenialKey:
        return cls(d.created_at, d.run_id, d.tool_call_id)


@dataclass(frozen=True)
class AuditCursor:
    """Where an audit listing stands in each of its two streams (messages, denials)."""

    message: ContextKey | None = None
    messages_done: bool = False
    denial: DenialKey | None = None
    denials_done: bool = False

    def to_token(self) -> dict[str, Any]:
        return {
            "m": self.message.to_token() if self.message else None,
            "md": self.messages_done,
            "d": [self.denial.created_at.isoformat(), self.denial.run_id, self.denial.tool_call_id]
            if self.denial
            else None,
            "dd": self.denials_done,
        }

    @classmethod
    def from_token(cls, raw: Any) -> AuditCursor:
        if raw is None:
            return cls()
        raw = position_dict(raw, ("m", "md", "d", "dd"))
        if not isinstance(raw["md"], bool) or not isinstance(raw["dd"], bool):
            raise bad_token()
        denial = None
        if raw["d"] is not None:
            created, run_id, call_id = position_list(raw["d"], 3)
            denial = DenialKey(position_time(created), position_str(run_id), position_str(call_id))
        return cls(
            message=ContextKey.from_token(raw["m"]) if raw["m"] is not None else None,
            messages_done=raw["md"],
            denial=denial,
            denials_done=raw["dd"],
        )


@dataclass(frozen=True)
class AuditPage:
    """A page of the audit, and where the next one starts (None: this is the last)."""

    messages: list[Message]
    denials: list[ToolDenial]
    next: AuditCursor | None


def plan_audit_page(
    messages: Sequence[Message], denials: Sequence[ToolDenial], size: int
) -> AuditPage:
    """A page of each stream from up to `size + 1` of each read after the cursor: a stream
    with more than `size` goes on from its page's last item, the other is done."""
    more_messages, more_denials = len(messages) > size, len(denials) > size
    page = AuditPage(list(messages[:size]), list(denials[:size]), None)
    if not (more_messages or more_denials):
        return page
    cursor = AuditCursor(
        message=ContextKey.of(messages[size - 1]) if more_messages else None,
        messages_done=not more_messages,
        denial=DenialKey.of(denials[size - 1]) if more_denials else None,
        denials_done=not more_denials,
    )
    return AuditPage(page.messages, page.denials, cursor)
