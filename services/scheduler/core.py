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
from shared.domain import ExecutorKind, automation_thread_id
from shared.errors import InvalidArgument
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, ExecutionProfile
from shared.text import check_storable
from shared.tools import BUILTIN_KNOWN, KnownTools, effective_tools

# The tools a job may declare in config.tools; the executor registers the same names.

MAX_PROMPT_CHARS = 2000
MAX_TITLE_CHARS = 200
MAX_JITTER_SECONDS = 86_400
# Names in config.tools and in a profile's allowlist (each a registered tool, once).
MAX_TOOLS = 32
_SHOWN_UNKNOWN = 5
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


def orchestrator_run_id(job_run_id: str, n: int) -> str:
    """The n-th run id of a slot (1-based): the same (job run, n) always gives the same id.

    A job run is one slot of one job (job_runs is unique on (job_id, scheduled_slot)), so
    this is derived from the job and the slot; every replica computes the same ids without
    reading anything. A 32-character hex string: within the shared id rule (shared/ids.py).
    """
    return uuid.uuid5(_RUN_ID_NAMESPACE, f"{job_run_id}:{n}").hex


def slot_run_ids(job_run_id: str, attempt: int) -> tuple[str, ...]:
    """The run ids attempt `attempt` of a job run may find or start, in order (see
    `after_run`). Each attempt starts at most one new run, so before attempt k at most
    k - 1 ids were used and one of the first k is still unused or not ended in failure."""
    return tuple(orchestrator_run_id(job_run_id, n) for n in range(1, max(attempt, 1) + 1))


class RunEnd(StrEnum):
    """How one orchestrator run of a slot ended, as history's run record says."""

    SUCCEEDED = "succeeded"  # also INTERRUPTED: the run ended, waiting on a client's tool
    CANCELLED = "cancelled"
    FAILED = "failed"
    # History has no record of it: never started, or it ended before history admitted it.
    ABSENT = "absent"
    # Not known: still queued or running when the dispatcher stopped waiting (its run
    # deadline), or history could not be asked.
    UNKNOWN = "unknown"


class Next(StrEnum):
    """What a dispatch attempt does once it knows how one run id of its slot ended."""

    DONE = "done"  # the slot ran: record the job run succeeded
    GIVE_UP = "give_up"  # record the job run failed, no retry
    RETRY = "retry"  # record this attempt failed; a later attempt goes on (with backoff)
    NEXT_ID = "next_id"  # the run is spent and did nothing durable: try the next id now


def after_run(end: RunEnd, *, found_ended: bool) -> Next:
    """The one rule for "did this slot run" (what the dispatcher does with a run's end).

    History's run record decides, never the event stream: a stream that is lost is no
    answer, and the dispatcher asks history until the record ends (or its deadline). A run
    id moves on to the next one only when the run it names is over without success: FAILED
    in history or ABSENT after its event log ended. An attempt that saw the run end itself
    (it started it, or followed it while it ran) records that as its own failure, with
    backoff; a run already over when the attempt found it is skipped at once. A run that
    was never started (StartRun refused, nothing in history) keeps its id: the retry starts
    the same id again, so a start that did get through after all is found, not doubled.
    """
    if end is RunEnd.SUCCEEDED:
        return Next.DONE
    if end is RunEnd.CANCELLED:
        return Next.GIVE_UP  # someone stopped it on purpose: running it again is not wanted
    if end is RunEnd.UNKNOWN:
        return Next.RETRY  # the next attempt asks history again before it starts anything
    return Next.NEXT_ID if found_ended else Next.RETRY


def thread_id(job_id: str) -> str:
    return automation_thread_id(job_id)


# --- validation -------------------------------------------------------------------------


def _storable(field: str, text: str) -> None:
    check_storable(text, field)


def _tool_names(field: str, tools: Sequence[str], known: KnownTools, *, once: bool) -> None:
    """At most MAX_TOOLS names or patterns, each naming a tool of the deployment (and none
    twice when `once`). The error lists a few unknown names, shortened: it travels in gRPC
    trailers, which are small."""
    if len(tools) > MAX_TOOLS:
        raise InvalidArgument(field, f"must list at most {MAX_TOOLS} tools")
    unknown = [t for t in tools if not known.knows(t)]
    if unknown:
        shown = ", ".join(t[:40] for t in unknown[:_SHOWN_UNKNOWN])
        more = f" and {len(unknown) - _SHOWN_UNKNOWN} more" if len(unknown) > _SHOWN_UNKNOWN else ""
        listing = known.listing()
        listing = listing if len(listing) <= 300 else listing[:300] + "..."
        raise InvalidArgument(field, f"unknown tools: {shown}{more} (registered: {listing})")
    if once and len(set(tools)) != len(tools):
        raise InvalidArgument(field, "must not repeat a tool")


def validate_config(
    prompt: str, tools: Sequence[str], prefix: str = "job.config", known: KnownTools = BUILTIN_KNOWN
) -> JobConfig:
    if not prompt.strip():
        raise InvalidArgument(f"{prefix}.prompt", "is required and must not be blank")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InvalidArgument(f"{prefix}.prompt", f"must be at most {MAX_PROMPT_CHARS} characters")
    _storable(f"{prefix}.prompt", prompt)
    _tool_names(f"{prefix}.tools", tools, known, once=True)
    return JobConfig(prompt=prompt, tools=tuple(tools))


def validate_profile(
    profile: ExecutionProfile,
    prefix: str = "job.execution_profile",
    known: KnownTools = BUILTIN_KNOWN,
) -> ExecutionProfile:
    _storable(f"{prefix}.name", profile.name)
    _tool_names(f"{prefix}.tool_policy.allowlist", profile.tool_policy.allowlist, known, once=False)
    return profile


# The tools a memory job's agent acts with: a memory job that may call neither can only fail
# (its reply is not a memory change), every attempt, every day.
MEMORY_AGENT_TOOLS = ("memory_write", "memory_forget")


def memory_job_config(config: JobConfig, profile: ExecutionProfile) -> JobConfig:
    """A memory job's tools: none declared means the memory tools its profile allows; a
    declaration that leaves it neither memory_write nor memory_forget is refused."""
    if profile.executor is not ExecutorKind.MEMORY:
        return config
    allowed = effective_tools(MEMORY_AGENT_TOOLS, profile, MEMORY_AGENT_TOOLS)
    if not allowed:
        raise InvalidArgument(
            "job.execution_profile.tool_policy.allowlist",
            "a memory job's profile must allow memory_write or memory_forget",
        )
    if not config.tools:
        return replace(config, tools=allowed)
    if not effective_tools(config.tools, profile, MEMORY_AGENT_TOOLS):
        raise InvalidArgument(
            "job.config.tools",
            f"a memory job needs {' or '.join(allowed)} among its tools: it can do nothing else",
        )
    return config


def validate_spec(spec: JobSpec, known: KnownTools = BUILTIN_KNOWN) -> JobSpec:
    """The spec with every field checked; INVALID_ARGUMENT naming the first bad field.
    `known`: the deployment's tools (AGENTMESH_TOOLS_FILE)."""
    title = spec.title.strip()
    if not title:
        raise InvalidArgument("job.title", "is required")
    if len(title) > MAX_TITLE_CHARS:
        raise InvalidArgument("job.title", f"must be at most {MAX_TITLE_CHARS} characters")
    _storable("job.title", title)
    if not 0 <= spec.jitter_seconds <= MAX_JITTER_SECONDS:
        raise InvalidArgument("job.jitter_seconds", f"must be between 0 and {MAX_JITTER_SECONDS}")
    timezone = spec.timezone or sched.DEFAULT_TIMEZONE
    try:
        sched.zone(timezone)
        schedule = sched.validate(spec.schedule)
    except ScheduleError as err:
        raise InvalidArgument(f"job.{err.field}", err.description) from None
    config = validate_config(spec.config.prompt, spec.config.tools, known=known)
    profile = validate_profile(spec.profile, known=known)
    config = memory_job_config(config, profile)
    return replace(
        spec, title=title, timezone=timezone, schedule=schedule, config=config, profile=profile
    )


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
    return NextRun(
        slot,
        sched.fire_time(job_id, slot, spec.jitter_seconds, spec.schedule, tz),
        JobStatus.ACTIVE,
    )


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
        due = sched.due_slots(
            position.schedule, tz, position.next_slot, now, limit=missed_record_limit
        )
        slots = tuple(s for s in due.slots if position.last_slot is None or s > position.last_slot)
        unrecorded = due.older
    candidates = [s for s in (position.last_slot, *slots) if s is not None]
    last_slot = max(candidates) if candidates else None
    next_slot: datetime | None = None
    if (
        last_slot is not None
    ):  # else nothing was ever due: an inconsistent row; stop rather than loop
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
    job_id: str,
    position: Position,
    shared: PositionPlan,
    now: datetime,
    *,
    misfire_grace: timedelta,
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
        fire = sched.fire_time(
            job_id, shared.next_slot, position.jitter_seconds, position.schedule, tz
        )
        nxt = NextRun(shared.next_slot, fire, JobStatus.ACTIVE)
    return ClaimPlan(
        run=run, missed=missed, unrecorded=shared.unrecorded, next=nxt, last_slot=shared.last_slot
    )


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
