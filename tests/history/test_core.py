"""Context windows and the character budget, as pure functions with a given clock."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from services.history import core
from services.history.core import Message, Window
from shared.domain import MessageKind, RuntimeMode
from shared.errors import FailedPrecondition, InvalidArgument

NY = ZoneInfo("America/New_York")
SH = ZoneInfo("Asia/Shanghai")


def msg(
    pos: int,
    *,
    text: str = "",
    calls: tuple[str, ...] = (),
    results: tuple[str, ...] = (),
    at: datetime | None = None,
) -> Message:
    content = [{"text": {"text": text}}] if text else []
    content += [{"tool_call": {"id": c, "name": "f", "input": ""}} for c in calls]
    content += [{"tool_result": {"id": r, "name": "", "text": ""}} for r in results]
    return Message(
        owner_id="o",
        id=f"m{pos}",
        thread_id="t",
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
    assert core.parse_window(text) == window


@pytest.mark.parametrize("text", ["last_n:0", "last_n:x", "yesterday", "last_n:-1", "ALL"])
def test_parse_window_rejects_other_text_naming_the_field(text: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        core.parse_window(text)
    assert err.value.violations[0][0] == "context.window"


def test_parse_zone_defaults_to_shanghai_and_rejects_unknown_zones() -> None:
    assert core.parse_zone("").key == "Asia/Shanghai"
    with pytest.raises(InvalidArgument) as err:
        core.parse_zone("Mars/Olympus")
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
    got = core.yesterday_start(now, zone)
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
    kept = core.apply_window(msgs, Window("today_yesterday"), now, NY)
    assert positions(kept) == [2, 3, 4]


def test_today_yesterday_in_shanghai_drops_the_day_before_yesterday() -> None:
    now = datetime(2025, 6, 10, 1, 30, tzinfo=UTC)  # 06-10 09:30 local
    msgs = [
        msg(1, at=datetime(2025, 6, 8, 15, 59, tzinfo=UTC)),  # 06-08 23:59 local
        msg(2, at=datetime(2025, 6, 8, 16, 0, tzinfo=UTC)),  # 06-09 00:00 local
        msg(3, at=datetime(2025, 6, 10, 1, 0, tzinfo=UTC)),
    ]
    assert positions(core.apply_window(msgs, Window("today_yesterday"), now, SH)) == [2, 3]


def test_last_n_keeps_the_newest_n() -> None:
    msgs = [msg(i) for i in range(1, 8)]
    now = datetime(2025, 1, 2, tzinfo=UTC)
    assert positions(core.apply_window(msgs, Window("last_n", 3), now, SH)) == [5, 6, 7]
    assert positions(core.apply_window(msgs, Window("last_n", 30), now, SH)) == list(range(1, 8))


# --- tool groups and budget -----------------------------------------------------------------


def test_message_chars_counts_text_and_tool_fields() -> None:
    assert core.message_chars(msg(1, text="hello")) == 5
    assert core.message_chars(msg(1, calls=("c",))) == 1  # the name "f"


def test_budget_zero_means_no_budget() -> None:
    msgs = [msg(i, text="x" * 100) for i in range(1, 4)]
    assert core.apply_budget(msgs, 0) == msgs


def test_budget_drops_oldest_first_until_it_fits() -> None:
    msgs = [msg(i, text="x" * 10) for i in range(1, 6)]
    assert positions(core.apply_budget(msgs, 30)) == [3, 4, 5]
    assert positions(core.apply_budget(msgs, 29)) == [4, 5]
    assert core.apply_budget(msgs, 5) == []


def test_budget_never_splits_a_tool_call_from_its_results() -> None:
    msgs = [
        msg(1, text="x" * 10),
        msg(2, calls=("a",)),  # 1 char
        msg(3, results=("a",), text="y" * 10),
        msg(4, results=("a",), text="z" * 10),
        msg(5, text="w" * 5),
    ]
    # 26 fits 2..5 (1 + 10 + 10 + 5); 25 cannot keep the group, so only 5 remains.
    assert positions(core.apply_budget(msgs, 26)) == [2, 3, 4, 5]
    assert positions(core.apply_budget(msgs, 25)) == [5]


def test_budget_with_interleaved_tool_groups_drops_whole_groups_oldest_first() -> None:
    msgs = [
        msg(1, calls=("a",), text="x" * 9),  # group a: 10 + 10
        msg(2, calls=("b",), text="x" * 9),  # group b: 10 + 10
        msg(3, results=("a",), text="x" * 10),
        msg(4, results=("b",), text="x" * 10),
    ]
    assert positions(core.apply_budget(msgs, 39)) == [2, 4]
    for limit in range(0, 45):
        kept = core.apply_budget(msgs, limit)
        calls = {c for m in kept for c in core.tool_call_ids(m)}
        results = {r for m in kept for r in core.tool_result_ids(m)}
        assert calls == results
        assert sum(core.message_chars(m) for m in kept) <= limit or limit == 0


def test_a_window_never_leaves_a_result_without_its_call() -> None:
    msgs = [msg(1, calls=("a",)), msg(2, results=("a",)), msg(3, text="hi")]
    now = datetime(2025, 1, 2, tzinfo=UTC)
    kept = core.assemble_context(msgs, Window("last_n", 2), now, SH, 0)
    assert positions(kept) == [3]


# --- writing rules ----------------------------------------------------------------------------


def test_finishing_twice_with_the_same_state_is_a_noop_and_with_another_a_conflict() -> None:
    assert core.finish_is_noop(core.RunState.RUNNING, core.RunState.SUCCEEDED) is False
    assert core.finish_is_noop(core.RunState.FAILED, core.RunState.FAILED) is True
    with pytest.raises(FailedPrecondition):
        core.finish_is_noop(core.RunState.FAILED, core.RunState.SUCCEEDED)


def test_stamp_takes_the_mask_from_mode_and_kind_only() -> None:
    new = core.NewMessage(id="m", role="user", kind=MessageKind.USER_MESSAGE, content=())
    at = datetime(2025, 1, 1, tzinfo=UTC)
    auto = core.stamp(
        new, owner_id="o", thread_id="t", mode=RuntimeMode.AUTOMATION, position=1, created_at=at
    )
    assert (auto.visibility_mask, auto.hidden_from_user, auto.origin) == (
        0,
        True,
        RuntimeMode.AUTOMATION,
    )
    chat = core.stamp(
        new, owner_id="o", thread_id="t", mode=RuntimeMode.CHAT, position=1, created_at=at
    )
    assert (chat.visibility_mask, chat.hidden_from_user) == (3, False)
