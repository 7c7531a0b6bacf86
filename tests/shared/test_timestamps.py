"""shared.timestamps.rfc3339: the one text format of every time agentmesh answers (the
gateway's JSON, webhook bodies): UTC, "Z", exactly six fractional digits, so that the strings
sort as the times do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from shared.timestamps import rfc3339


def test_six_digits_whatever_the_microseconds() -> None:
    assert rfc3339(datetime(2026, 12, 1, 21, 4, 5, tzinfo=UTC)) == "2026-12-01T21:04:05.000000Z"
    assert rfc3339(datetime(2026, 12, 1, 21, 4, 5, 123, tzinfo=UTC)) == (
        "2026-12-01T21:04:05.000123Z"
    )


def test_another_zone_is_converted_and_a_naive_time_is_utc() -> None:
    tokyo = timezone(timedelta(hours=9))
    assert rfc3339(datetime(2026, 12, 2, 6, 4, 5, tzinfo=tokyo)) == "2026-12-01T21:04:05.000000Z"
    assert rfc3339(datetime(2026, 12, 1, 21, 4, 5)) == "2026-12-01T21:04:05.000000Z"


def test_the_strings_sort_as_the_times_do() -> None:
    base = datetime(2026, 12, 1, 21, 4, 5, tzinfo=UTC)
    times = [base + timedelta(microseconds=m) for m in (0, 1, 10, 100_000, 999_999, 1_000_000)]
    assert sorted(rfc3339(t) for t in reversed(times)) == [rfc3339(t) for t in times]
