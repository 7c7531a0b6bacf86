"""A context, without I/O: the window (all, last n, today and yesterday in a time zone), the
tool groups a window or budget never splits, the character budget, and the paging of a
context the rules cut (`plan_context_page`): later pages read at the first page's snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, time, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

from services.history.core import JsonBlock, Message
from shared.errors import InvalidArgument
from shared.ids import check_time_zone
from shared.pagination import (
    position_dict,
    position_int,
    position_list,
    position_str,
    position_time,
)
from shared.profiles import WINDOW_RE

DEFAULT_TIME_ZONE = "Asia/Shanghai"


# --- context windows ------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    kind: Literal["all", "last_n", "today_yesterday"]
    n: int = 0


ALL = Window("all")


def parse_window(text: str, field: str = "context.window") -> Window:
    if not text or text == "all":
        return ALL
    if not WINDOW_RE.match(text):
        raise InvalidArgument(
            field, "must be all, today_yesterday or last_n:<N> (N from 1 to 999999)"
        )
    if text == "today_yesterday":
        return Window("today_yesterday")
    return Window("last_n", int(text.split(":", 1)[1]))


def parse_zone(name: str, field: str = "context.time_zone") -> ZoneInfo:
    return check_time_zone(name or DEFAULT_TIME_ZONE, field)


def yesterday_start(now: datetime, zone: ZoneInfo) -> datetime:
    """Local midnight at the start of yesterday, as a UTC instant.

    The local date is taken first and midnight built from it, so a DST change between
    then and now (a 23- or 25-hour day) does not shift the boundary.
    """
    local_yesterday = now.astimezone(zone).date() - timedelta(days=1)
    return datetime.combine(local_yesterday, time(0), tzinfo=zone).astimezone(UTC)


def window_since(window: Window, now: datetime, zone: ZoneInfo) -> datetime | None:
    return yesterday_start(now, zone) if window.kind == "today_yesterday" else None


def window_limit(window: Window) -> int | None:
    return window.n if window.kind == "last_n" else None


def apply_window(
    messages: Sequence[Message], window: Window, now: datetime, zone: ZoneInfo
) -> list[Message]:
    """The window's part of a chronological list."""
    if window.kind == "last_n":
        return list(messages[-window.n :])
    if window.kind == "today_yesterday":
        since = yesterday_start(now, zone)
        return [m for m in messages if m.created_at >= since]
    return list(messages)


# --- tool groups and the character budget ------------------------------------------------


def _text_chars(block: JsonBlock) -> int:
    if "text" in block:
        return len(block["text"].get("text", ""))
    if "thinking" in block:
        return len(block["thinking"].get("thinking", ""))
    if "hint" in block:
        return len(block["hint"].get("hint", ""))
    if "tool_call" in block:
        call = block["tool_call"]
        return len(call.get("name", "")) + len(call.get("input", ""))
    if "tool_result" in block:
        result = block["tool_result"]
        nested = result.get("blocks", {}).get("blocks", [])
        return len(result.get("text", "")) + sum(_text_chars(b) for b in nested)
    if "data" in block:
        # Media counts by what the model reads about it, not by its bytes.
        return len(block["data"].get("url", ""))
    return 0


def message_chars(message: Message) -> int:
    """Characters the model reads of a message (what a budget counts)."""
    return sum(_text_chars(b) for b in message.content)


def tool_call_ids(message: Message) -> list[str]:
    return [b["tool_call"].get("id", "") for b in message.content if "tool_call" in b]


def tool_result_ids(message: Message) -> list[str]:
    return [b["tool_result"].get("id", "") for b in message.content if "tool_result" in b]


def _tool_groups(messages: Sequence[Message]) -> list[int]:
    """For each message, the index of its group: a tool call and its results share one."""
    parent = list(range(len(messages)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    caller: dict[str, int] = {}
    for i, message in enumerate(messages):
        for call_id in tool_call_ids(message):
            caller.setdefault(call_id, i)
    for i, message in enumerate(messages):
        for result_id in tool_result_ids(message):
            j = caller.get(result_id)
            if j is not None:
                a, b = root(i), root(j)
                parent[max(a, b)] = min(a, b)
    return [root(i) for i in range(len(messages))]


def drop_orphan_results(messages: Sequence[Message]) -> list[Message]:
    """Tool results whose call lies outside the list (cut off by the window) go too."""
    calls = {call_id for m in messages for call_id in tool_call_ids(m)}
    return [m for m in messages if all(r in calls for r in tool_result_ids(m))]


def apply_budget(messages: Sequence[Message], max_chars: int) -> list[Message]:
    """Drop the oldest messages until the rest fits in `max_chars` (0: no budget).

    A tool call and its results are one group, kept or dropped together; groups go in the
    order of their oldest member.
    """
    if max_chars <= 0:
        return list(messages)
    groups = _tool_groups(messages)
    size: dict[int, int] = {}
    for message, group in zip(messages, groups, strict=True):
        size[group] = size.get(group, 0) + message_chars(message)
    total = sum(size.values())
    dropped: set[int] = set()
    # A group's id is the index of its oldest member, so sorting ids is oldest first.
    for group in sorted(size):
        if total <= max_chars:
            break
        dropped.add(group)
        total -= size[group]
    return [m for m, g in zip(messages, groups, strict=True) if g not in dropped]


def assemble_context(
    messages: Sequence[Message],
    window: Window,
    now: datetime,
    zone: ZoneInfo,
    max_chars: int,
) -> list[Message]:
    """The context of a chronological list of context-visible messages."""
    return apply_budget(drop_orphan_results(apply_window(messages, window, now, zone)), max_chars)


# --- options, keys and pages ------------------------------------------------------------


@dataclass(frozen=True)
class ContextOptions:
    """How a context is cut: its window (in a time zone) and its character budget (0: none)."""

    window: Window
    zone: ZoneInfo
    max_chars: int

    @property
    def cuts(self) -> bool:
        """Whether the rules can leave a message out (any window but all, or a budget)."""
        return self.window != ALL or self.max_chars != 0


@dataclass(frozen=True)
class ContextKey:
    """Where a message sits in a context: by position within a thread, by time across."""

    created_at: datetime
    thread_id: str
    position: int

    @classmethod
    def of(cls, m: Message) -> ContextKey:
        return cls(m.created_at, m.thread_id, m.position)

    def to_token(self) -> list[Any]:
        return [self.created_at.isoformat(), self.thread_id, self.position]

    @classmethod
    def from_token(cls, raw: Any) -> ContextKey:
        created, thread_id, position = position_list(raw, 3)
        return cls(position_time(created), position_str(thread_id), position_int(position))


def is_after(m: Message, after: ContextKey, *, across: bool) -> bool:
    """Whether `m` comes after `after`: by position in one thread, by key across threads."""
    if not across:
        return m.position > after.position
    key = ContextKey.of(m)
    return (key.created_at, key.thread_id, key.position) > (
        after.created_at,
        after.thread_id,
        after.position,
    )


@dataclass(frozen=True)
class Snapshot:
    """What the pages of one paged context share: the first page's time, and (one thread,
    cut by the rules) the thread's last position then; and where the previous page ended."""

    now: datetime
    upto: int | None = None
    after: ContextKey | None = None

    def to_token(self) -> dict[str, Any]:
        assert self.after is not None  # a token is for the page after one
        return {"a": self.after.to_token(), "u": self.upto or 0, "n": self.now.isoformat()}

    @classmethod
    def from_token(cls, raw: Any) -> Snapshot:
        token = position_dict(raw, ("n", "u", "a"))
        return cls(
            now=position_time(token["n"]),
            upto=position_int(token["u"]),
            after=ContextKey.from_token(token["a"]),
        )


@dataclass(frozen=True)
class ContextPage:
    """A page of a context, and the snapshot of the next page (None: this is the last)."""

    messages: list[Message]
    next: Snapshot | None


def context_bound(thread_id: str | None, snapshot: Snapshot) -> int | datetime:
    """What a read of a cut context stops at: the thread's last position at the first page
    (one thread), else the first page's time."""
    if thread_id is not None and snapshot.upto is not None:
        return snapshot.upto
    return snapshot.now


def plan_context_page(
    found: Sequence[Message],
    options: ContextOptions,
    snapshot: Snapshot,
    size: int,
    *,
    across: bool,
) -> ContextPage:
    """A page of a context the rules cut. The rules see all of `found` (every message up to
    the snapshot's bound, chronological), so each page is cut as the first was; the page is
    then what follows the previous page's last message."""
    kept = assemble_context(found, options.window, snapshot.now, options.zone, options.max_chars)
    if snapshot.after is not None:
        after = snapshot.after
        kept = [m for m in kept if is_after(m, after, across=across)]
    if len(kept) <= size:
        return ContextPage(kept, None)
    return ContextPage(kept[:size], replace(snapshot, after=ContextKey.of(kept[size - 1])))
