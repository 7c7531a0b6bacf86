"""The scheduler's rules, without I/O: job validation, what a claim does with a due job
(catch-up policy, high-water mark, next run), retry backoff and the default job."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from services.scheduler import schedule as sched
from services.scheduler.schedule import Schedule, ScheduleError, ScheduleType
from shared.domain import automation_thread_id
from shared.errors import InvalidArgument
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, ExecutionProfile
from shared.tools import REGISTERED_TOOLS

# The tools a job may declare in config.tools; the executor registers the same names.

MAX_PROMPT_CHARS = 2000
MAX_TITLE_CHARS = 200
MAX_JITTER_SECONDS = 86_400
DEFAULT_MEMORY_JOB_KEY = "daily_memory"
DEFAULT_MEMORY_LOCAL_TIME = "10:00"

# The built-in memory extraction prompt of the default job. The scripted model and real
# models both get it; it asks for memories in the user's own language.
DEFAULT_MEMORY_PROMPT = (
    "Review the user's conversations from today and yesterday. Extract stable, long-lived "
    "facts about the user (preferences, background, ongoing plans, people they mention) and "
    "save each one with memory_write. When the user corrected something or asked you to "
    "forget it, remove the old memory with memory_forget. Ignore small talk and one-off "
    "requests. Keep every memory short and in the language the user used.\n"
    "请回顾用户今天和昨天的对话，提取关于用户的稳定、长期的信息（偏好、背景、进行中的计划、"
    "提到的人），每条用 memory_write 保存；用户更正过或要求忘记的内容，用 memory_forget "
    "删除旧记忆。忽略闲聊和一次性请求。每条记忆保持简短，并使用用户所用的语言。"
)


class JobStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"


class CatchUpPolicy(StrEnum):
    LATEST = "latest"
    SKIP = "skip"
    ALL = "all"


class RunState(StrEnum):
    PENDING = "pending"
    DISPATCHING = "dispatching"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    MISSED = "missed"


class RunTrigger(StrEnum):
    SCHEDULE = "schedule"
    MANUAL = "manual"


@dataclass(frozen=True)
class JobConfig:
    prompt: str
    tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobSpec:
    """What an owner chooses about a job (create and update)."""

    title: str
    schedule: Schedule
    timezone: str
    config: JobConfig
    profile: ExecutionProfile
    catch_up_policy: CatchUpPolicy = CatchUpPolicy.LATEST
    jitter_seconds: int = 0


@dataclass(frozen=True)
class Job:
    id: str
    owner_id: str
    spec: JobSpec
    status: JobStatus
    version: int
    create_time: datetime
    update_time: datetime
    # The nominal slot of the next run and when it fires (slot + jitter); None when done.
    next_slot: datetime | None = None
    next_run_at: datetime | None = None
    last_run_at: datetime | None = None
    # High-water mark: no slot at or before it is ever recorded again.
    last_slot: datetime | None = None
    default_key: str | None = None


@dataclass(frozen=True)
class RunError:
    attempt: int
    error: str
    at: datetime


@dataclass(frozen=True)
class JobRun:
    id: str
    job_id: str
    owner_id: str
    scheduled_slot: datetime
    trigger: RunTrigger
    state: RunState
    attempt: int
    create_time: datetime
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    next_attempt_at: datetime | None = None
    dispatched_at: datetime | None = None
    finish_time: datetime | None = None
    orchestrator_run_id: str | None = None
    errors: tuple[RunError, ...] = ()


def new_id() -> str:
    return uuid.uuid4().hex


_RUN_ID_NAMESPACE = uuid.UUID("6b0f3c1e-5d55-4a55-9d0e-5c4f1a7e2b10")


def orchestrator_run_id(job_run_id: str, attempt: int) -> str:
    """The orchestrator run id of one attempt: the same (job run, attempt) always gives the
    same id, so a replica that takes over an attempt can ask the orchestrator about it."""
    return uuid.uuid5(_RUN_ID_NAMESPACE, f"{job_run_id}:{attempt}").hex


def thread_id(job_id: str) -> str:
    return automation_thread_id(job_id)


# --- validation -------------------------------------------------------------------------


def validate_config(prompt: str, tools: Sequence[str], prefix: str = "job.config") -> JobConfig:
    if not prompt.strip():
        raise InvalidArgument(f"{prefix}.prompt", "is required and must not be blank")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InvalidArgument(f"{prefix}.prompt", f"must be at most {MAX_PROMPT_CHARS} characters")
    unknown = [t for t in tools if t not in REGISTERED_TOOLS]
    if unknown:
        raise InvalidArgument(
            f"{prefix}.tools",
            f"unknown tools: {', '.join(unknown)} (registered: {', '.join(REGISTERED_TOOLS)})",
        )
    if len(set(tools)) != len(tools):
        raise InvalidArgument(f"{prefix}.tools", "must not repeat a tool")
    return JobConfig(prompt=prompt, tools=tuple(tools))


def validate_profile(profile: ExecutionProfile, prefix: str = "job.execution_profile") -> ExecutionProfile:
    unknown = [t for t in profile.tool_policy.allowlist if t not in REGISTERED_TOOLS]
    if unknown:
        raise InvalidArgument(f"{prefix}.tool_policy.allowlist", f"unknown tools: {', '.join(unknown)}")
    return profile


def validate_spec(spec: JobSpec) -> JobSpec:
    """The spec with every field checked; INVALID_ARGUMENT naming the first bad field."""
    title = spec.title.strip()
    if not title:
        raise InvalidArgument("job.title", "is required")
    if len(title) > MAX_TITLE_CHARS:
        raise InvalidArgument("job.title", f"must be at most {MAX_TITLE_CHARS} characters")
    if not 0 <= spec.jitter_seconds <= MAX_JITTER_SECONDS:
        raise InvalidArgument("job.jitter_seconds", f"must be between 0 and {MAX_JITTER_SECONDS}")
    timezone = spec.timezone or sched.DEFAULT_TIMEZONE
    try:
        sched.zone(timezone)
        schedule = sched.validate(spec.schedule)
    except ScheduleError as err:
        raise InvalidArgument(f"job.{err.field}", err.description) from None
    config = validate_config(spec.config.prompt, spec.config.tools)
    profile = validate_profile(spec.profile)
    return replace(spec, title=title, timezone=timezone, schedule=schedule, config=config, profile=profile)


# --- next runs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class NextRun:
    slot: datetime | None
    run_at: datetime | None
    status: JobStatus


def next_run(job_id: str, spec: JobSpec, after: datetime, last_slot: datetime | None) -> NextRun:
    """The first slot after both `after` and the high-water mark, and when it fires.

    A once job that never ran fires even when its instant is already past (run it now).
    """
    tz = sched.zone(spec.timezone)
    if spec.schedule.type is ScheduleType.ONCE and last_slot is None:
        assert spec.schedule.run_at is not None
        slot: datetime | None = spec.schedule.run_at
    else:
        base = after if last_slot is None else max(after, last_slot)
        slot = sched.next_slot(spec.schedule, tz, base)
    if slot is None:
        return NextRun(None, None, JobStatus.COMPLETED)
    return NextRun(slot, sched.fire_time(job_id, slot, spec.jitter_seconds, spec.schedule, tz), JobStatus.ACTIVE)


@dataclass(frozen=True)
class ClaimPlan:
    """What one claim does with one due job."""

    # Slots to run now (oldest first) and slots recorded as MISSED.
    run: tuple[datetime, ...]
    missed: tuple[datetime, ...]
    # Due slots too old to be recorded row by row (an outage longer than the record limit).
    unrecorded: int
    next: NextRun
    last_slot: datetime | None


@dataclass(frozen=True)
class Position:
    """Everything a claim's plan depends on except the job's identity. Jobs at the same
    position (every owner's daily 10:00 in one zone, due at the same slot) share one plan,
    so a claim computes slots once per position, not once per job; only jitter, which is
    derived from the job id, is computed per job."""

    schedule: Schedule
    timezone: str
    catch_up_policy: CatchUpPolicy
    jitter_seconds: int
    next_slot: datetime | None
    last_slot: datetime | None


@dataclass(frozen=True)
class PositionPlan:
    """The part of a claim's plan shared by every job at one position."""

    # Due slots after the high-water mark, oldest first.
    slots: tuple[datetime, ...]
    unrecorded: int
    last_slot: datetime | None
    # The next slot (None: the schedule has no more, or the row was inconsistent).
    next_slot: datetime | None
    # The slots to run; None when that depends on the job (policy skip with jitter).
    run: tuple[datetime, ...] | None
    # The plan of every job at this position when it does not depend on the job (no jitter).
    common: ClaimPlan | None


def plan_position(
    position: Position,
    now: datetime,
    *,
    catch_up_max: int,
    missed_record_limit: int,
    misfire_grace: timedelta,
) -> PositionPlan:
    """Apply the catch-up policy to the position's due slots and find the next slot.

    latest: the newest due slot runs, the older ones are MISSED. skip: only a slot whose fire
    time is within the misfire grace runs (a normal, on-time tick); the others are MISSED.
    all: the newest `catch_up_max` run, the older ones are MISSED. Slots at or before the
    high-water mark are never recorded again (a clock that moved back, a stale next_run_at).
    """
    tz = sched.zone(position.timezone)
    slots: tuple[datetime, ...] = ()
    unrecorded = 0
    if position.next_slot is not None:
        due = sched.due_slots(position.schedule, tz, position.next_slot, now, limit=missed_record_limit)
        slots = tuple(s for s in due.slots if position.last_slot is None or s > position.last_slot)
        unrecorded = due.older
    candidates = [s for s in (position.last_slot, *slots) if s is not None]
    last_slot = max(candidates) if candidates else None
    next_slot: datetime | None = None
    if last_slot is not None:  # else nothing was ever due: an inconsistent row; stop rather than loop
        next_slot = sched.next_slot(position.schedule, tz, max(now, last_slot))
    run: tuple[datetime, ...] | None
    if not slots:
        run = ()
    elif position.catch_up_policy is CatchUpPolicy.LATEST:
        run = slots[-1:]
    elif position.catch_up_policy is CatchUpPolicy.ALL:
        run = slots[-catch_up_max:]
    elif position.jitter_seconds <= 0:
        run = (slots[-1],) if now - slots[-1] <= misfire_grace else ()
    else:
        run = None
    plan = PositionPlan(slots, unrecorded, last_slot, next_slot, run, None)
    if position.jitter_seconds <= 0:
        plan = replace(plan, common=plan_job("", position, plan, now, misfire_grace=misfire_grace))
    return plan


def plan_job(
    job_id: str, position: Position, shared: PositionPlan, now: datetime, *, misfire_grace: timedelta
) -> ClaimPlan:
    """The claim's plan of one job at `position` (its jitter decides when a slot fires)."""
    if shared.common is not None:
        return shared.common
    tz = sched.zone(position.timezone)
    slots = shared.slots
    run = shared.run
    if run is None:  # skip: the newest slot runs if its jittered fire time is within the grace
        fires = sched.fire_time(job_id, slots[-1], position.jitter_seconds, position.schedule, tz)
        run = (slots[-1],) if now - fires <= misfire_grace else ()
    missed = tuple(s for s in slots if s not in run)
    if shared.next_slot is None:
        nxt = NextRun(None, None, JobStatus.COMPLETED)
    else:
        fire = sched.fire_time(job_id, shared.next_slot, position.jitter_seconds, position.schedule, tz)
        nxt = NextRun(shared.next_slot, fire, JobStatus.ACTIVE)
    return ClaimPlan(run=run, missed=missed, unrecorded=shared.unrecorded, next=nxt, last_slot=shared.last_slot)


def retry_delay(attempt: int, initial: float, maximum: float) -> timedelta:
    """Exponential backoff after failed attempt number `attempt` (1-based)."""
    return timedelta(seconds=min(initial * (2 ** max(attempt - 1, 0)), maximum))


def default_memory_job(timezone: str) -> JobSpec:
    """The daily 10:00-local memory job every owner has (seed 001 §10)."""
    return validate_spec(
        JobSpec(
            title="Daily memory",
            schedule=Schedule(ScheduleType.DAILY, local_time=DEFAULT_MEMORY_LOCAL_TIME),
            timezone=timezone or sched.DEFAULT_TIMEZONE,
            config=JobConfig(prompt=DEFAULT_MEMORY_PROMPT, tools=("memory_write", "memory_forget")),
            profile=AUTOMATION_MEMORY_DEFAULT,
        )
    )
