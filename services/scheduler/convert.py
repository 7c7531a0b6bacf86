"""Protobuf <-> scheduler domain objects (only at the gRPC edge)."""

from __future__ import annotations

from datetime import UTC, datetime

from agentmesh.scheduler.v1 import scheduler_service_pb2 as pb
from google.protobuf import timestamp_pb2

from services.scheduler.core import (
    CatchUpPolicy,
    Job,
    JobConfig,
    JobRun,
    JobSpec,
    JobStatus,
    RunState,
    RunTrigger,
)
from services.scheduler.schedule import Schedule, ScheduleType
from shared import timestamps
from shared.errors import InvalidArgument
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, profile_from_pb, profile_to_pb

SCHEDULE_TYPE_FROM_PB = {
    pb.SCHEDULE_TYPE_ONCE: ScheduleType.ONCE,
    pb.SCHEDULE_TYPE_DAILY: ScheduleType.DAILY,
    pb.SCHEDULE_TYPE_WEEKLY: ScheduleType.WEEKLY,
    pb.SCHEDULE_TYPE_CRON: ScheduleType.CRON,
}
SCHEDULE_TYPE_TO_PB = {v: k for k, v in SCHEDULE_TYPE_FROM_PB.items()}
STATUS_TO_PB = {
    JobStatus.ACTIVE: pb.JOB_STATUS_ACTIVE,
    JobStatus.PAUSED: pb.JOB_STATUS_PAUSED,
    JobStatus.COMPLETED: pb.JOB_STATUS_COMPLETED,
    JobStatus.FAILED: pb.JOB_STATUS_FAILED,
}
CATCH_UP_FROM_PB = {
    pb.CATCH_UP_POLICY_LATEST: CatchUpPolicy.LATEST,
    pb.CATCH_UP_POLICY_SKIP: CatchUpPolicy.SKIP,
    pb.CATCH_UP_POLICY_ALL: CatchUpPolicy.ALL,
}
CATCH_UP_TO_PB = {v: k for k, v in CATCH_UP_FROM_PB.items()}
RUN_STATE_TO_PB = {
    RunState.PENDING: pb.JOB_RUN_STATE_PENDING,
    RunState.DISPATCHING: pb.JOB_RUN_STATE_DISPATCHING,
    RunState.SUCCEEDED: pb.JOB_RUN_STATE_SUCCEEDED,
    RunState.FAILED: pb.JOB_RUN_STATE_FAILED,
    RunState.MISSED: pb.JOB_RUN_STATE_MISSED,
}
TRIGGER_TO_PB = {
    RunTrigger.SCHEDULE: pb.JOB_RUN_TRIGGER_SCHEDULE,
    RunTrigger.MANUAL: pb.JOB_RUN_TRIGGER_MANUAL,
}


def ts(value: datetime | None) -> timestamp_pb2.Timestamp | None:
    if value is None:
        return None
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(value.astimezone(UTC))
    return out


def spec_from_pb(job: pb.Job) -> JobSpec:
    """The owner-chosen part of a Job message (validated later by core.validate_spec)."""
    if job.schedule.type not in SCHEDULE_TYPE_FROM_PB:
        raise InvalidArgument("job.schedule.type", "must be once, daily, weekly or cron")
    kind = SCHEDULE_TYPE_FROM_PB[job.schedule.type]
    run_at = (
        timestamps.from_pb(job.schedule.run_at, "job.schedule.run_at")
        if job.schedule.HasField("run_at")
        else None
    )
    if job.catch_up_policy == pb.CATCH_UP_POLICY_UNSPECIFIED:
        policy = CatchUpPolicy.LATEST
    elif job.catch_up_policy in CATCH_UP_FROM_PB:
        policy = CATCH_UP_FROM_PB[job.catch_up_policy]
    else:
        raise InvalidArgument("job.catch_up_policy", "must be latest, skip or all")
    # A job without a profile gets the automation default snapshot (the same value the data
    # migration gave every older job); a profile that is given must be complete.
    profile = (
        profile_from_pb(job.execution_profile, field="job.execution_profile")
        if job.HasField("execution_profile")
        else AUTOMATION_MEMORY_DEFAULT
    )
    return JobSpec(
        title=job.title,
        schedule=Schedule(
            kind,
            run_at=run_at,
            local_time=job.schedule.local_time,
            weekday=job.schedule.weekday,
            cron=job.schedule.cron,
        ),
        timezone=job.timezone,
        config=JobConfig(prompt=job.config.prompt, tools=tuple(job.config.tools)),
        profile=profile,
        catch_up_policy=policy,
        jitter_seconds=job.jitter_seconds,
    )


def job_to_pb(job: Job) -> pb.Job:
    spec = job.spec
    schedule = pb.Schedule(
        type=SCHEDULE_TYPE_TO_PB[spec.schedule.type],
        run_at=ts(spec.schedule.run_at),
        local_time=spec.schedule.local_time,
        weekday=spec.schedule.weekday,
        cron=spec.schedule.cron,
    )
    return pb.Job(
        id=job.id,
        title=spec.title,
        schedule=schedule,
        timezone=spec.timezone,
        status=STATUS_TO_PB[job.status],
        config=pb.JobConfig(prompt=spec.config.prompt, tools=list(spec.config.tools)),
        execution_profile=profile_to_pb(spec.profile),
        next_run_time=ts(job.next_run_at),
        last_run_time=ts(job.last_run_at),
        version=job.version,
        catch_up_policy=CATCH_UP_TO_PB[spec.catch_up_policy],
        jitter_seconds=spec.jitter_seconds,
        create_time=ts(job.create_time),
        update_time=ts(job.update_time),
        next_slot_time=ts(job.next_slot),
        last_slot_time=ts(job.last_slot),
        default_job=job.default_key is not None,
    )


def run_to_pb(run: JobRun) -> pb.JobRun:
    return pb.JobRun(
        id=run.id,
        job_id=run.job_id,
        scheduled_slot=ts(run.scheduled_slot),
        state=RUN_STATE_TO_PB[run.state],
        attempt=run.attempt,
        orchestrator_run_id=run.orchestrator_run_id or "",
        dispatch_time=ts(run.dispatched_at),
        errors=[
            pb.JobRunError(attempt=e.attempt, error=e.error, time=ts(e.at)) for e in run.errors
        ],
        trigger=TRIGGER_TO_PB[run.trigger],
        lease_owner=run.lease_owner or "",
        lease_expire_time=ts(run.lease_expires_at),
        next_attempt_time=ts(run.next_attempt_at),
        create_time=ts(run.create_time),
        finish_time=ts(run.finish_time),
    )
