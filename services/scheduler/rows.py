"""The scheduler's rows and its domain types, both ways: a job or a run as the values of its
table's columns, and back from a row or from the columns and arrays the claim statements
return (services/scheduler/queries.py).

What many rows share is built once: jobs share a handful of schedules, positions, specs and
profile snapshots, so those builders are cached by their column values (validating each
row's profile again would be most of a claim's CPU time).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from services.scheduler.core import (
    CatchUpPolicy,
    Job,
    JobConfig,
    JobRun,
    JobSpec,
    JobStatus,
    Position,
    RunError,
    RunState,
    RunTrigger,
)
from services.scheduler.schedule import Schedule, ScheduleType
from shared.profiles import ExecutionProfile, parse_profile

JOB_STATUS = {s.value: s for s in JobStatus}


def utc(value: datetime | None) -> datetime | None:
    """A timestamp of a raw (untyped) result column as an aware UTC datetime."""
    return None if value is None else value.astimezone(UTC)


# --- jobs -------------------------------------------------------------------------------


def job_values(job: Job) -> dict[str, Any]:
    """automation_jobs' columns of `job` (all but request_id, which only an insert sets)."""
    spec = job.spec
    return {
        "id": job.id,
        "owner_id": job.owner_id,
        "title": spec.title,
        "schedule_type": spec.schedule.type.value,
        "run_at": spec.schedule.run_at,
        "local_time": spec.schedule.local_time or None,
        "weekday": spec.schedule.weekday or None,
        "cron": spec.schedule.cron or None,
        "timezone": spec.timezone,
        "status": job.status.value,
        "config": {"prompt": spec.config.prompt, "tools": list(spec.config.tools)},
        "execution_profile": spec.profile.model_dump(mode="json"),
        "catch_up_policy": spec.catch_up_policy.value,
        "jitter_seconds": spec.jitter_seconds,
        "next_slot": job.next_slot,
        "next_run_at": job.next_run_at,
        "last_run_at": job.last_run_at,
        "last_slot": job.last_slot,
        "version": job.version,
        "default_key": job.default_key,
        "create_time": job.create_time,
        "update_time": job.update_time,
    }


def _schedule(
    schedule_type: str,
    run_at: datetime | None,
    local_time: str | None,
    weekday: int | None,
    cron: str | None,
) -> Schedule:
    return Schedule(
        ScheduleType(schedule_type),
        run_at=run_at,
        local_time=local_time or "",
        weekday=weekday or 0,
        cron=cron or "",
    )


def _config(data: dict[str, Any]) -> JobConfig:
    return JobConfig(prompt=data["prompt"], tools=tuple(data.get("tools", ())))


@functools.lru_cache(maxsize=1024)
def _profile_from_json(text: str) -> ExecutionProfile:
    return parse_profile(json.loads(text))


def _profile(data: dict[str, Any]) -> ExecutionProfile:
    return _profile_from_json(json.dumps(data, sort_keys=True))


def job_from_row(row: Any) -> Job:
    """A Job from a row of automation_jobs (every column)."""
    m = row._mapping
    spec = JobSpec(
        title=m["title"],
        schedule=_schedule(
            m["schedule_type"], m["run_at"], m["local_time"], m["weekday"], m["cron"]
        ),
        timezone=m["timezone"],
        config=_config(m["config"]),
        profile=_profile(m["execution_profile"]),
        catch_up_policy=CatchUpPolicy(m["catch_up_policy"]),
        jitter_seconds=m["jitter_seconds"],
    )
    return Job(
        id=m["id"],
        owner_id=m["owner_id"],
        spec=spec,
        status=JobStatus(m["status"]),
        version=m["version"],
        create_time=m["create_time"],
        update_time=m["update_time"],
        next_slot=m["next_slot"],
        next_run_at=m["next_run_at"],
        last_run_at=m["last_run_at"],
        last_slot=m["last_slot"],
        default_key=m["default_key"],
    )


@functools.lru_cache(maxsize=4096)
def position(
    schedule_type: str,
    run_at: datetime | None,
    local_time: str | None,
    weekday: int | None,
    cron: str | None,
    timezone: str,
    catch_up_policy: str,
    jitter_seconds: int,
    next_slot: datetime | None,
    last_slot: datetime | None,
) -> Position:
    """A claim position from its columns (as the lock-due statements return them)."""
    schedule = _schedule(schedule_type, run_at, local_time, weekday, cron)
    return Position(
        schedule, timezone, CatchUpPolicy(catch_up_policy), jitter_seconds, next_slot, last_slot
    )


@functools.lru_cache(maxsize=1024)
def spec(
    title: str,
    schedule_type: str,
    run_at: datetime | None,
    local_time: str | None,
    weekday: int | None,
    cron: str | None,
    timezone: str,
    config_json: str,
    profile_json: str,
    catch_up_policy: str,
    jitter_seconds: int,
) -> JobSpec:
    """A job's spec from its columns, config and profile as JSON text (as PG_RECORD_CLAIM
    returns them)."""
    return JobSpec(
        title=title,
        schedule=_schedule(schedule_type, run_at, local_time, weekday, cron),
        timezone=timezone,
        config=_config(json.loads(config_json)),
        profile=_profile_from_json(profile_json),
        catch_up_policy=CatchUpPolicy(catch_up_policy),
        jitter_seconds=jitter_seconds,
    )


def leased_runs(
    group: Sequence[Any], now: datetime, lease_owner: str, lease_expires_at: datetime
) -> list[tuple[JobRun, Job]]:
    """The runs PG_RECORD_CLAIM leased to this replica, with their jobs, from one of its
    result rows past the two counts: a spec's 11 columns, then 13 arrays (one entry a run)."""
    job_spec = spec(group[0], group[1], utc(group[2]), *group[3:11])
    schedule, dispatching = RunTrigger.SCHEDULE, RunState.DISPATCHING
    leased: list[tuple[JobRun, Job]] = []
    for (
        run_id,
        slot,
        job_id,
        owner,
        status,
        version,
        created,
        updated,
        next_slot,
        next_run_at,
        last_run_at,
        last_slot,
        key,
    ) in zip(*group[11:], strict=True):
        job = Job(
            id=job_id,
            owner_id=owner,
            spec=job_spec,
            status=JOB_STATUS[status],
            version=version,
            create_time=created,
            update_time=updated,
            next_slot=next_slot,
            next_run_at=next_run_at,
            last_run_at=last_run_at,
            last_slot=last_slot,
            default_key=key,
        )
        run = JobRun(
            id=run_id,
            job_id=job_id,
            owner_id=owner,
            scheduled_slot=slot,
            trigger=schedule,
            state=dispatching,
            attempt=1,
            create_time=now,
            lease_owner=lease_owner,
            lease_expires_at=lease_expires_at,
        )
        leased.append((run, job))
    return leased


# --- runs -------------------------------------------------------------------------------


def error_json(e: RunError) -> dict[str, Any]:
    """One entry of job_runs.errors."""
    return {"attempt": e.attempt, "error": e.error, "at": e.at.isoformat()}


def run_values(run: JobRun) -> dict[str, Any]:
    """job_runs' columns of `run`."""
    return {
        "id": run.id,
        "job_id": run.job_id,
        "owner_id": run.owner_id,
        "scheduled_slot": run.scheduled_slot,
        "trigger": run.trigger.value,
        "state": run.state.value,
        "attempt": run.attempt,
        "lease_owner": run.lease_owner,
        "lease_expires_at": run.lease_expires_at,
        "next_attempt_at": run.next_attempt_at,
        "dispatched_at": run.dispatched_at,
        "finish_time": run.finish_time,
        "orchestrator_run_id": run.orchestrator_run_id,
        "errors": [error_json(e) for e in run.errors],
        "create_time": run.create_time,
    }


def run_from_row(row: Any) -> JobRun:
    """A JobRun from a row of job_runs (every column)."""
    m = row._mapping
    return JobRun(
        id=m["id"],
        job_id=m["job_id"],
        owner_id=m["owner_id"],
        scheduled_slot=m["scheduled_slot"],
        trigger=RunTrigger(m["trigger"]),
        state=RunState(m["state"]),
        attempt=m["attempt"],
        create_time=m["create_time"],
        lease_owner=m["lease_owner"],
        lease_expires_at=m["lease_expires_at"],
        next_attempt_at=m["next_attempt_at"],
        dispatched_at=m["dispatched_at"],
        finish_time=m["finish_time"],
        orchestrator_run_id=m["orchestrator_run_id"],
        errors=tuple(
            RunError(e["attempt"], e["error"], datetime.fromisoformat(e["at"]))
            for e in m["errors"] or ()
        ),
    )
