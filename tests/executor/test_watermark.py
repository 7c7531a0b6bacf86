"""Which messages a memory run reads (services.executor.core.unread): those after its
watermark in the owner's commit sequence, up to the context's horizon; the watermark then
moves to the horizon, so a message that commits late is read by a later run, never skipped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.executor import core
from shared.messages import Msg, user

T0 = datetime(2025, 6, 10, 4, 0, tzinfo=UTC)


def msg(mid: str, sequence: int, minutes: int) -> Msg:
    return user(mid, id=mid, sequence=sequence, created_at=T0 + timedelta(minutes=minutes))


def ids(messages: list[Msg]) -> list[str]:
    return [m.id for m in messages]


def test_a_message_that_commits_late_is_read_by_the_next_run() -> None:
    # "late" was created first but committed after "on-time": a higher number.
    first = core.unread([msg("on-time", 1, 2)], None, horizon=1)
    assert (ids(first.messages), first.upto) == (["on-time"], 1)
    second = core.unread([msg("on-time", 1, 2), msg("late", 2, 1)], first.upto, horizon=2)
    assert (ids(second.messages), second.upto) == (["late"], 2)


def test_a_message_above_the_horizon_waits_for_the_next_run() -> None:
    context = [msg("a", 4, 1), msg("b", 6, 2), msg("c", 7, 3)]
    reading = core.unread(context, 3, horizon=6)
    assert (ids(reading.messages), reading.upto) == (["a", "b"], 6)
    assert ids(core.unread(context, reading.upto, horizon=7).messages) == ["c"]


def test_messages_come_in_commit_order() -> None:
    context = [msg("b", 3, 0), msg("a", 2, 5)]
    assert ids(core.unread(context, None, horizon=3).messages) == ["a", "b"]


def test_nothing_new_keeps_the_watermark() -> None:
    reading = core.unread([msg("a", 2, 0)], 2, horizon=2)
    assert (reading.messages, reading.upto) == ([], 2)


def test_messages_from_before_sequences_are_read_by_a_first_run_only() -> None:
    old = [msg("old", 0, 0)]
    first = core.unread(old, None, horizon=0)
    assert (ids(first.messages), first.upto) == (["old"], 0)
    assert core.unread(old, first.upto, horizon=0).messages == []


def test_without_a_horizon_the_watermark_moves_to_the_newest_read() -> None:
    reading = core.unread([msg("a", 4, 0), msg("b", 5, 1)], 3, horizon=0)
    assert (ids(reading.messages), reading.upto) == (["a", "b"], 5)


def test_positions_round_trip_and_old_or_bad_ones_read_as_never_advanced() -> None:
    assert core.watermark_sequence(core.watermark_position(7, "m-7")) == 7
    assert core.watermark_sequence("") is None
    old = '{"message_time":"2025-01-01T00:00:00+00:00","thread_id":"t","position":1}'
    assert core.watermark_sequence(old) is None
    assert core.watermark_sequence("not json") is None
    assert core.watermark_sequence('{"sequence": true}') is None
