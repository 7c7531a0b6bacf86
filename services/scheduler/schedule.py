"""All schedule arithmetic of the scheduler, in one pure module (no I/O, no clock).

A job's schedule is written in local wall time of its IANA zone; every instant it produces
is an aware UTC datetime. A *slot* is the nominal local time of a run converted to UTC: it is
the run's identity (UNIQUE(job_id, scheduled_slot)), so it never includes jitter.

Daylight-saving rules (tested in tests/scheduler/test_schedule.py):
- A local time that does not exist (spring forward, e.g. 02:30 in New York on 2024-03-10)
  runs at the first valid instant after it: the end of the gap (03:00 local).
- A local time that occurs twice (fall back, e.g. 01:30 in New York on 2024-11-03) runs
  once, at its first occurrence, for daily and weekly jobs.
- Cron expressions are evaluated on local wall times, and each wall time is mapped by the
  same two rules, so a cron slot inside a gap moves to the gap's end (several collapse into
  one) and the repeated hour of a fall-back night is not run twice.
- Naive datetimes are rejected everywhere: arithmetic happens on aware instants only.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterError, croniter

from shared.ids import MAX_TIME_ZONE_CHARS, time_zone

DEFAULT_TIMEZONE = "Asia/Shanghai"

# Matched with fullmatch: a `$` would let "03:00\n" through.
_LOCAL_TIME_RE = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
# The stored column's width; a longer expression is refused before croniter reads it.
MAX_CRON_CHARS = 200
# Enough to find the next slot of any valid five-field expression (croniter gives up on
# expressions that never match, e.g. 30 February, by raising).
_CRON_MAX_STEPS = 2_000


class ScheduleType(StrEnum):
    ONCE = "once"
    DAILY = "daily"
    WEEKLY = "weekly"
    CRON = "cron"


class ScheduleError(ValueError):
    """A schedule, zone or instant that the arithmetic cannot use; `field` names the input."""

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}")
        self.field = field
        self.description = description


@dataclass(frozen=True)
class Schedule:
    type: ScheduleType
    # once: the instant (aware).
    run_at: datetime | None = None
    # daily and weekly: local wall time "HH:MM".
    local_time: str = ""
    # weekly: ISO weekday 1 (Monday) .. 7 (Sunday).
    weekday: int = 0
    # cron: five fields, evaluated on local wall time.
    cron: str = ""


def zone(name: str) -> ZoneInfo:
    """The IANA zone `name`; ScheduleError for anything else (empty, unknown, a path)."""
    tz = time_zone(name)
    if tz is None:
        raise ScheduleError("timezone", f"{name[:MAX_TIME_ZONE_CHARS]!r} is not an IANA time zone")
    return tz


def require_aware(value: datetime, field: str = "datetime") -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ScheduleError(field, "naive datetimes are not accepted (give a time zone)")
    return value.astimezone(UTC)


def validate(schedule: Schedule) -> Schedule:
    """The schedule with its fields checked; ScheduleError naming the bad field otherwise."""
    if schedule.type is ScheduleType.ONCE:
        if schedule.run_at is None:
            raise ScheduleError("schedule.run_at", "is required for a once schedule")
        return Schedule(ScheduleType.ONCE, run_at=require_aware(schedule.run_at, "schedule.run_at"))
    if schedule.type in (ScheduleType.DAILY, ScheduleType.WEEKLY):
        _parse_local_time(schedule.local_time)
        if schedule.type is ScheduleType.WEEKLY:
            if not 1 <= schedule.weekday <= 7:
                raise ScheduleError("schedule.weekday", "must be 1 (Monday) to 7 (Sunday)")
            return Schedule(
                ScheduleType.WEEKLY, local_time=schedule.local_time, weekday=schedule.weekday
            )
        return Schedule(ScheduleType.DAILY, local_time=schedule.local_time)
    if len(schedule.cron) > MAX_CRON_CHARS:
        raise ScheduleError("schedule.cron", f"must be at most {MAX_CRON_CHARS} characters")
    expr = " ".join(schedule.cron.split())
    if len(expr.split(" ")) != 5 or not croniter.is_valid(expr):
        raise ScheduleError("schedule.cron", "must be a valid five-field cron expression")
    try:
        croniter(expr, datetime(2000, 1, 1)).get_next(datetime)
    except (CroniterBadDateError, CroniterBadCronError, CroniterError):
        raise ScheduleError("schedule.cron", "never matches a date") from None
    return Schedule(ScheduleType.CRON, cron=expr)


def _parse_local_time(value: str) -> time:
    match = _LOCAL_TIME_RE.fullmatch(value)
    if not match:
        raise ScheduleError("schedule.local_time", "must be a local wall time HH:MM (00:00-23:59)")
    return time(int(match.group(1)), int(match.group(2)))


def resolve_local(wall: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant of the naive local wall time `wall` in `tz`, by the DST rules above."""
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if first.astimezone(tz).replace(tzinfo=None) == wall:
        return first  # exists; fold=0 is the first occurrence of an ambiguous time
    # In a gap: fold=1 maps it with the offset after the transition (an instant before the
    # gap), fold=0 with the one before (an instant after it). The first valid instant
    # after `wall` is the transition itself: the first second whose wall time is >= wall.
    lo = int(wall.replace(tzinfo=tz, fold=1).timestamp())
    hi = int(first.timestamp())
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).replace(tzinfo=None) >= wall:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)


def _daily_slot(day: date, at: time, tz: ZoneInfo) -> datetime:
    return resolve_local(datetime.combine(day, at), tz)


def next_slot(schedule: Schedule, tz: ZoneInfo, after: datetime) -> datetime | None:
    """The first slot strictly after `after` (UTC), or None when the schedule has no more.

    Mapping local wall times to instants is monotonic (a gap maps to its end, a repeated
    time to its first occurrence), so the search can start at the local wall time of `after`.
    """
    return _next_slot(schedule, tz, require_aware(after, "after"))


# A pure function of hashable values, memoised: a claim batch is mostly jobs that share a
# schedule and a slot (every user's daily 10:00), so most calls are repeats.
@functools.lru_cache(maxsize=65_536)
def _next_slot(schedule: Schedule, tz: ZoneInfo, after: datetime) -> datetime | None:
    if schedule.type is ScheduleType.ONCE:
        assert schedule.run_at is not None
        return schedule.run_at if schedule.run_at > after else None
    local_after = after.astimezone(tz).replace(tzinfo=None)
    if schedule.type is ScheduleType.DAILY:
        at = _parse_local_time(schedule.local_time)
        for offset in range(3):
            slot = _daily_slot(local_after.date() + timedelta(days=offset), at, tz)
            if slot > after:
                return slot
        raise AssertionError("a daily schedule always has a slot within three days")
    if schedule.type is ScheduleType.WEEKLY:
        at = _parse_local_time(schedule.local_time)
        day = local_after.date()
        day += timedelta(days=(schedule.weekday - day.isoweekday()) % 7)
        for offset in (0, 7, 14):
            slot = _daily_slot(day + timedelta(days=offset), at, tz)
            if slot > after:
                return slot
        raise AssertionError("a weekly schedule always has a slot within three weeks")
    try:
        it = croniter(schedule.cron, local_after)
        for _ in range(_CRON_MAX_STEPS):
            slot = resolve_local(it.get_next(datetime), tz)
            if slot > after:
                return slot
    except (CroniterBadDateError, CroniterError):
        return None
    return None


@dataclass(frozen=True)
class DueSlots:
    """Slots from a job's pending slot through `now`, oldest first.

    `slots` holds at most `limit` of them, the newest; `older` counts the earlier ones that
    were due too but are not listed (an outage longer than the limit).
    """

    slots: tuple[datetime, ...]
    older: int
    # The first slot after `now` (None: the schedule has no more).
    following: datetime | None


def due_slots(
    schedule: Schedule, tz: ZoneInfo, first: datetime, now: datetime, *, limit: int
) -> DueSlots:
    """Every slot s with first <= s <= now (newest `limit` listed), and the one after now."""
    first, now = require_aware(first, "first"), require_aware(now, "now")
    listed: list[datetime] = []
    older = 0
    slot: datetime | None = first
    while slot is not None and slot <= now:
        listed.append(slot)
        if len(listed) > 2 * limit:  # keep memory bounded on a very long outage
            older += len(listed) - limit
            listed = listed[-limit:]
        slot = next_slot(schedule, tz, slot)
    if len(listed) > limit:
        older += len(listed) - limit
        listed = listed[-limit:]
    return DueSlots(tuple(listed), older, slot)


def jitter_offset(
    job_id: str, slot: datetime, jitter_seconds: int, following: datetime | None
) -> timedelta:
    """A deterministic delay in [0, jitter_seconds] for this (job, slot), kept below the
    interval to the following slot so a jittered run never passes its successor."""
    if jitter_seconds <= 0:
        return timedelta(0)
    cap_ms = jitter_seconds * 1000
    if following is not None:
        interval_ms = int((following - slot).total_seconds() * 1000)
        cap_ms = min(cap_ms, max(interval_ms - 1000, 0))
    if cap_ms <= 0:
        return timedelta(0)
    digest = hashlib.sha256(f"{job_id}|{slot.isoformat()}".encode()).digest()
    return timedelta(milliseconds=int.from_bytes(digest[:8], "big") % (cap_ms + 1))


def fire_time(
    job_id: str, slot: datetime, jitter_seconds: int, schedule: Schedule, tz: ZoneInfo
) -> datetime:
    """When the run of `slot` becomes due: the slot plus the job's jitter for it."""
    if jitter_seconds <= 0:
        return slot
    return slot + jitter_offset(job_id, slot, jitter_seconds, next_slot(schedule, tz, slot))
