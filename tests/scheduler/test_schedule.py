"""schedule.py: local-time schedules to UTC slots, DST rules, jitter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from services.scheduler import schedule as s
from services.scheduler.schedule import Schedule, ScheduleError, ScheduleType

NY = s.zone("America/New_York")
LONDON = s.zone("Europe/London")
LORD_HOWE = s.zone("Australia/Lord_Howe")
SHANGHAI = s.zone("Asia/Shanghai")


def daily(at: str) -> Schedule:
    return Schedule(ScheduleType.DAILY, local_time=at)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def slots(schedule: Schedule, tz: object, after: datetime, n: int) -> list[datetime]:
    out = []
    for _ in range(n):
        # Schedules given in the test's table form.
        nxt = s.next_slot(schedule, tz, after)  # type: ignore[arg-type]
        assert nxt is not None
        out.append(nxt)
        after = nxt
    return out


def test_daily_slot_is_local_wall_time_converted_to_utc_in_shanghai() -> None:
    assert slots(daily("10:00"), SHANGHAI, utc(2024, 6, 1, 0), 2) == [
        utc(2024, 6, 1, 2),
        utc(2024, 6, 2, 2),
    ]


def test_next_slot_is_strictly_after_the_given_instant() -> None:
    assert s.next_slot(daily("10:00"), SHANGHAI, utc(2024, 6, 1, 2)) == utc(2024, 6, 2, 2)


def test_new_york_nonexistent_0230_runs_at_the_end_of_the_gap() -> None:
    got = slots(daily("02:30"), NY, utc(2024, 3, 9, 12), 3)
    # 2024-03-10 02:30 does not exist; 03:00 EDT (07:00 UTC) is the first valid instant after it.
    assert got == [utc(2024, 3, 10, 7), utc(2024, 3, 11, 6, 30), utc(2024, 3, 12, 6, 30)]


def test_new_york_ambiguous_0130_runs_once_at_the_first_occurrence() -> None:
    got = slots(daily("01:30"), NY, utc(2024, 11, 2, 12), 2)
    # 01:30 EDT (05:30 UTC) runs; 01:30 EST (06:30 UTC) the same night does not.
    assert got == [utc(2024, 11, 3, 5, 30), utc(2024, 11, 4, 6, 30)]


def test_new_york_weekly_on_the_ambiguous_night_runs_once() -> None:
    weekly = Schedule(ScheduleType.WEEKLY, local_time="01:30", weekday=7)  # Sunday
    assert slots(weekly, NY, utc(2024, 10, 30), 2) == [
        utc(2024, 11, 3, 5, 30),
        utc(2024, 11, 10, 6, 30),
    ]


def test_london_spring_forward_and_fall_back() -> None:
    assert s.next_slot(daily("01:30"), LONDON, utc(2024, 3, 30, 12)) == utc(2024, 3, 31, 1)
    assert slots(daily("01:30"), LONDON, utc(2024, 10, 26, 12), 2) == [
        utc(2024, 10, 27, 0, 30),
        utc(2024, 10, 28, 1, 30),
    ]


def test_lord_howe_thirty_minute_shift() -> None:
    # 2024-10-06 02:00 -> 02:30 (+10:30 -> +11:00): 02:15 does not exist, runs at 02:30.
    got = slots(daily("02:15"), LORD_HOWE, utc(2024, 10, 5, 0), 2)
    assert got[0].astimezone(LORD_HOWE).strftime("%Y-%m-%d %H:%M %z") == "2024-10-06 02:30 +1100"
    assert got[1] == utc(2024, 10, 6, 15, 15)
    # 2025-04-06 02:00 -> 01:30: 01:45 occurs twice and runs at the first (+11:00) one.
    fold = s.next_slot(daily("01:45"), LORD_HOWE, utc(2025, 4, 5, 0))
    assert fold == utc(2025, 4, 5, 14, 45)


def test_cron_is_evaluated_on_local_wall_time() -> None:
    cron = Schedule(ScheduleType.CRON, cron="0 9 * * 1-5")
    # Friday 2024-06-07 09:00 Shanghai, then Monday.
    assert slots(cron, SHANGHAI, utc(2024, 6, 7, 0), 2) == [utc(2024, 6, 7, 1), utc(2024, 6, 10, 1)]


def test_cron_slots_in_a_gap_collapse_into_its_end() -> None:
    cron = Schedule(ScheduleType.CRON, cron="*/30 * * * *")
    got = slots(cron, NY, utc(2024, 3, 10, 6, 15), 3)  # from 01:15 EST
    assert got == [utc(2024, 3, 10, 6, 30), utc(2024, 3, 10, 7), utc(2024, 3, 10, 7, 30)]


def test_cron_does_not_repeat_the_fall_back_hour() -> None:
    cron = Schedule(ScheduleType.CRON, cron="30 * * * *")
    got = slots(cron, NY, utc(2024, 11, 3, 5), 3)  # from 01:00 EDT
    assert got == [utc(2024, 11, 3, 5, 30), utc(2024, 11, 3, 7, 30), utc(2024, 11, 3, 8, 30)]


def test_once_has_one_slot() -> None:
    once = Schedule(ScheduleType.ONCE, run_at=utc(2024, 1, 1, 12))
    assert s.next_slot(once, SHANGHAI, utc(2024, 1, 1)) == utc(2024, 1, 1, 12)
    assert s.next_slot(once, SHANGHAI, utc(2024, 1, 1, 12)) is None


def test_naive_datetimes_are_rejected() -> None:
    with pytest.raises(ScheduleError):
        s.next_slot(daily("10:00"), SHANGHAI, datetime(2024, 1, 1))
    with pytest.raises(ScheduleError) as info:
        s.validate(Schedule(ScheduleType.ONCE, run_at=datetime(2024, 1, 1)))
    assert info.value.field == "schedule.run_at"


def test_aware_non_utc_input_is_normalised() -> None:
    after = datetime(2024, 6, 1, 8, tzinfo=timezone(timedelta(hours=8)))
    assert s.next_slot(daily("10:00"), SHANGHAI, after) == utc(2024, 6, 1, 2)


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        (Schedule(ScheduleType.DAILY, local_time="24:00"), "schedule.local_time"),
        (Schedule(ScheduleType.DAILY, local_time="9:00"), "schedule.local_time"),
        (Schedule(ScheduleType.DAILY, local_time="09:00\n"), "schedule.local_time"),
        (Schedule(ScheduleType.CRON, cron="0 0 * * " + ",".join(["1"] * 100)), "schedule.cron"),
        (Schedule(ScheduleType.WEEKLY, local_time="09:00", weekday=8), "schedule.weekday"),
        (Schedule(ScheduleType.CRON, cron="0 9 * *"), "schedule.cron"),
        (Schedule(ScheduleType.CRON, cron="0 0 9 * * *"), "schedule.cron"),
        (Schedule(ScheduleType.CRON, cron="0 0 30 2 *"), "schedule.cron"),
        (Schedule(ScheduleType.ONCE), "schedule.run_at"),
    ],
)
def test_invalid_schedules_name_their_field(schedule: Schedule, field: str) -> None:
    with pytest.raises(ScheduleError) as info:
        s.validate(schedule)
    assert info.value.field == field


@pytest.mark.parametrize("name", ["", "Mars/Olympus", "../etc/passwd", "/etc/localtime"])
def test_unknown_time_zones_are_rejected(name: str) -> None:
    with pytest.raises(ScheduleError):
        s.zone(name)


def test_due_slots_lists_the_newest_within_the_limit_and_counts_the_rest() -> None:
    due = s.due_slots(daily("10:00"), SHANGHAI, utc(2024, 6, 1, 2), utc(2024, 6, 10, 3), limit=3)
    assert due.slots == (utc(2024, 6, 8, 2), utc(2024, 6, 9, 2), utc(2024, 6, 10, 2))
    assert due.older == 7
    assert due.following == utc(2024, 6, 11, 2)


def test_jitter_is_deterministic_and_below_the_interval() -> None:
    slot = utc(2024, 6, 1, 2)
    hourly = Schedule(ScheduleType.CRON, cron="0 * * * *")
    first = s.fire_time("job-1", slot, 7200, hourly, SHANGHAI)
    assert first == s.fire_time("job-1", slot, 7200, hourly, SHANGHAI)
    offsets = {
        s.jitter_offset(f"job-{i}", slot, 7200, slot + timedelta(hours=1)) for i in range(200)
    }
    assert all(timedelta(0) <= o < timedelta(hours=1) for o in offsets)
    assert len(offsets) > 150  # spread, not one value


def test_no_jitter_fires_at_the_slot() -> None:
    slot = utc(2024, 6, 1, 2)
    assert s.fire_time("job-1", slot, 0, daily("10:00"), SHANGHAI) == slot
