"""Context windows, the character budget and the paging of a cut context, as pure functions
with a given clock."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from services.history import context
from services.history.context import (
    ContextKey,
    ContextOptions,
    Snapshot,
    Window,
    plan_context_page,
)
from services.history.core import Message
from shared.domain import MessageKind, RuntimeMode
from shared.errors import InvalidArgument

NY = ZoneInfo("America/New_York")
SH = ZoneInfo("Asia/Shanghai")


def msg(
    pos: int,
    *,
    text: str = "",
    calls: tuple[str, ...] = (),
    results: tuple[str, ...] = (),
    at: datetime | None = None,
    thread: str = "t",
) -> Message:
    content = [{"text": {"text": text}}] if text else []
    content += [{"tool_call": {"id": c, "name": "f", "input": ""}} for c in calls]
    content += [{"tool_result": {"id": r, "name": "", "text": ""}} for r in results]
    return Message(
        owner_id="o",
        id=f"{thread}-m{pos}",
        thread_id=thread,
        position=pos,
        run_id="",
        role="user",
        kind=MessageKind.USER_MESSAGE,
        visibility_mask=3,
        name="",
        content=tuple(content),
        hidden_from_user=False,
        origin=RuntimeMode.CHAT,
        executor=None,
        execution_profile_name="",
        extra={},
        input_tokens=0,
        output_tokens=0,
        finished_reason="",
        created_at=at or datetime(2025, 1, 1, tzinfo=UTC),
    )


def positions(messages: list[Message]) -> list[int]:
    return [m.position for m in messages]


# --- windows ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "window"),
    [
        ("", Window("all")),
        ("all", Window("all")),
        ("today_yesterday", Window("today_yesterday")),
        ("last_n:5", Window("last_n", 5)),
    ],
)
def test_parse_window_accepts_the_three_forms(text: str, window: Window) -> None:
    assert context.parse_window(text) == window


@pytest.mark.parametrize("text", ["last_n:0", "last_n:x", "yesterday", "last_n:-1", "ALL"])
def test_parse_window_rejects_other_text_naming_the_field(text: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        context.parse_window(text)
    assert err.value.violations[0][0] == "context.window"


def test_parse_zone_defaults_to_shanghai_and_rejects_unknown_zones() -> None:
    assert context.parse_zone("").key == "Asia/Shanghai"
    with pytest.raises(InvalidArgument) as err:
        context.parse_zone("Mars/Olympus")
    assert err.value.violations[0][0] == "context.time_zone"


@pytest.mark.parametrize(
    ("now", "zone", "expected"),
    [
        # Shanghai (UTC+8, no DST): 2025-06-10 09:30 local -> since 2025-06-09 00:00 local.
        (datetime(2025, 6, 10, 1, 30, tzinfo=UTC), SH, datetime(2025, 6, 8, 16, 0, tzinfo=UTC)),
        # Just after local midnight in Shanghai (UTC date still the day before).
        (datetime(2025, 6, 9, 16, 5, tzinfo=UTC), SH, datetime(2025, 6, 8, 16, 0, tzinfo=UTC)),
        # New York spring forward: Mon 2024-03-11 10:00 EDT; yesterday began 00:00 EST (-5).
        (datetime(2024, 3, 11, 14, 0, tzinfo=UTC), NY, datetime(2024, 3, 10, 5, 0, tzinfo=UTC)),
        # The day after: yesterday (03-11) began 00:00 EDT (-4).
        (datetime(2024, 3, 12, 14, 0, tzinfo=UTC), NY, datetime(2024, 3, 11, 4, 0, tzinfo=UTC)),
        # Fall back: Mon 2024-11-04 10:00 EST; yesterday (11-03) began 00:00 EDT (-4).
        (datetime(2024, 11, 4, 15, 0, tzinfo=UTC), NY, datetime(2024, 11, 3, 4, 0, tzinfo=UTC)),
    ],
)
def test_yesterday_start_is_local_midnight_in_utc(
    now: datetime, zone: ZoneInfo, expected: datetime
) -> None:
    got = context.yesterday_start(now, zone)
    assert got == expected
    assert got.tzinfo is UTC


def test_today_yesterday_window_keeps_messages_since_local_midnight_of_yesterday() -> None:
    # 2024-03-11 10:00 EDT; the 23-hour day 03-10 began at 05:00 UTC.
    now = datetime(2024, 3, 11, 14, 0, tzinfo=UTC)
    msgs = [
        msg(1, at=datetime(2024, 3, 10, 4, 59, tzinfo=UTC)),  # 03-09 23:59 EST
        msg(2, at=datetime(2024, 3, 10, 5, 0, tzinfo=UTC)),  # 03-10 00:00 EST
        msg(3, at=datetime(2024, 3, 11, 3, 59, tzinfo=UTC)),  # 03-10 23:59 EDT
        msg(4, at=datetime(2024, 3, 11, 13, 0, tzinfo=UTC)),
    ]
    kept = context.apply_window(msgs, Window("today_yesterday"), now, NY)
    assert positions(kept) == [2, 3, 4]


def test_today_yesterday_in_shanghai_drops_the_day_before_yesterday() -> None:
    now = datetime(2025, 6, 10, 1, 30, tzinfo=UTC)  # 06-10 09:30 local
    msgs = [
        msg(1, at=datetime(2025, 6, 8, 15, 59, tzinfo=UTC)),  # 06-08 23:59 local
        msg(2, at=datetime(2025, 6, 8, 16, 0, tzinfo=UTC)),  # 06-09 00:00 local
        msg(3, at=datetime(2025, 6, 10, 1, 0, tzinfo=UTC)),
    ]
    assert positions(context.apply_window(msgs, Window("today_yesterday"), now, SH)) == [2, 3]


def test_last_n_keeps_the_newest_n() -> None:
    msgs = [msg(i) for i in range(1, 8)]
    now = datetime(2025, 1, 2, tzinfo=UTC)
    assert positions(context.apply_window(msgs, Window("last_n", 3), now, SH)) == [5, 6, 7]
    assert positions(context.apply_window(msgs, Window("last_n", 30), now, SH)) == list(range(1, 8))


# --- tool groups and budget -----------------------------------------------------------------


def test_message_chars_counts_text_and_tool_fields() -> None:
    assert context.message_chars(msg(1, text="hello")) == 5
    assert context.message_chars(msg(1, calls=("c",))) == 1  # the name "f"


def test_budget_zero_means_no_budget() -> None:
    msgs = [msg(i, text="x" * 100) for i in range(1, 4)]
    assert context.apply_budget(msgs, 0) == msgs


def test_budget_drops_oldest_first_until_it_fits() -> None:
    msgs = [msg(i, text="x" * 10) for i in range(1, 6)]
    assert positions(context.apply_budget(msgs, 30)) == [3, 4, 5]
    assert positions(context.apply_budget(msgs, 29)) == [4, 5]
    assert context.apply_budget(msgs, 5) == []


def test_budget_never_splits_a_tool_call_from_its_results() -> None:
    msgs = [
        msg(1, text="x" * 10),
        msg(2, calls=("a",)),  # 1 char
        msg(3, results=("a",), text="y" * 10),
        msg(4, results=("a",), text="z" * 10),
        msg(5, text="w" * 5),
    ]
    # 26 fits 2..5 (1 + 10 + 10 + 5); 25 cannot keep the group, so only 5 remains.
    assert positions(context.apply_budget(msgs, 26)) == [2, 3, 4, 5]
    assert positions(context.apply_budget(msgs, 25)) == [5]


def test_budget_with_interleaved_tool_groups_drops_whole_groups_oldest_first() -> None:
    msgs = [
        msg(1, calls=("a",), text="x" * 9),  # group a: 10 + 10
        msg(2, calls=("b",), text="x" * 9),  # group b: 10 + 10
        msg(3, results=("a",), text="x" * 10),
        msg(4, results=("b",), text="x" * 10),
    ]
    assert positions(context.apply_budget(msgs, 39)) == [2, 4]
    for limit in range(0, 45):
        kept = context.apply_budget(msgs, limit)
        calls = {c for m in kept for c in context.tool_call_ids(m)}
        results = {r for m in kept for r in context.tool_result_ids(m)}
        assert calls == results
        assert sum(context.message_chars(m) for m in kept) <= limit or limit == 0


def test_a_window_never_leaves_a_result_without_its_call() -> None:
    msgs = [msg(1, calls=("a",)), msg(2, results=("a",)), msg(3, text="hi")]
    now = datetime(2025, 1, 2, tzinfo=UTC)
    kept = context.assemble_context(msgs, Window("last_n", 2), now, SH, 0)
    assert positions(kept) == [3]


# --- paging a cut context -------------------------------------------------------------------

NOW = datetime(2025, 1, 2, tzinfo=UTC)


def budget(max_chars: int) -> ContextOptions:
    return ContextOptions(context.ALL, SH, max_chars)


def test_only_a_window_or_a_budget_cuts_a_context() -> None:
    assert not ContextOptions(context.ALL, SH, 0).cuts
    assert ContextOptions(Window("last_n", 5), SH, 0).cuts
    assert ContextOptions(Window("today_yesterday"), SH, 0).cuts
    assert budget(1).cuts


def test_a_cut_context_pages_what_the_rules_keep_and_ends_its_page_at_the_last_kept() -> None:
    found = [msg(i, text="x" * 10) for i in range(1, 6)]
    snapshot = Snapshot(NOW, upto=5)
    page = plan_context_page(found, budget(40), snapshot, 2, across=False)
    assert positions(page.messages) == [2, 3]
    assert page.next == Snapshot(NOW, upto=5, after=ContextKey.of(found[2]))


def test_the_next_page_is_cut_as_the_first_was_and_the_last_page_has_no_next() -> None:
    found = [msg(i, text="x" * 10) for i in range(1, 6)]
    first = plan_context_page(found, budget(40), Snapshot(NOW, upto=5), 2, across=False)
    assert first.next is not None
    last = plan_context_page(found, budget(40), first.next, 2, across=False)
    assert positions(last.messages) == [4, 5]
    assert last.next is None


def test_a_page_that_holds_all_that_is_left_has_no_next() -> None:
    found = [msg(i) for i in range(1, 4)]
    page = plan_context_page(found, budget(0), Snapshot(NOW), 3, across=False)
    assert positions(page.messages) == [1, 2, 3]
    assert page.next is None


def test_across_threads_a_page_ends_by_time_then_thread_then_position() -> None:
    at = datetime(2025, 1, 1, tzinfo=UTC)
    found = [msg(1, thread="a", at=at), msg(1, thread="b", at=at), msg(2, thread="a", at=NOW)]
    options = ContextOptions(Window("last_n", 3), SH, 0)
    first = plan_context_page(found, options, Snapshot(NOW), 1, across=True)
    assert first.next is not None and first.next.after == ContextKey(at, "a", 1)
    # Position 1 of thread b follows position 1 of thread a, though its position is not larger.
    second = plan_context_page(found, options, first.next, 1, across=True)
    assert [(m.thread_id, m.position) for m in second.messages] == [("b", 1)]


def test_later_pages_read_up_to_the_first_pages_end_of_the_thread_or_its_time() -> None:
    assert context.context_bound("t", Snapshot(NOW, upto=7)) == 7
    assert context.context_bound(None, Snapshot(NOW, upto=0)) == NOW


def test_a_snapshot_survives_its_token() -> None:
    snapshot = Snapshot(NOW, upto=7, after=ContextKey(NOW, "t", 3))
    assert Snapshot.from_token(snapshot.to_token()) == snapshot


@pytest.mark.parametrize(
    "raw", [None, [], {"n": NOW.isoformat(), "u": 0}, {"n": 1, "u": 0, "a": []}]
)
def test_a_token_of_another_shape_is_refused_as_a_page_token(raw: object) -> None:
    with pytest.raises(InvalidArgument) as err:
        Snapshot.from_token(raw)
    assert err.value.violations[0][0] == "page_token"
