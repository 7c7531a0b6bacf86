"""SchedulerService: proto in, rules of core.py, one transaction per call, proto out."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime
from typing import Any

import grpc
from agentmesh.scheduler.v1 import scheduler_service_pb2 as pb
from agentmesh.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.scheduler import core, store, tables
from services.scheduler import schedule as sched
from services.scheduler.convert import job_to_pb, run_to_pb, spec_from_pb
from services.scheduler.core import Job, JobRun, JobStatus, RunState, RunTrigger
from services.scheduler.dispatch import Dispatcher, Order
from services.scheduler.owner_data import REGISTRY
from services.scheduler.settings import SchedulerSettings
from shared import outbox, owner_data
from shared.errors import Aborted, FailedPrecondition, InvalidArgument, NotFound
from shared.identity import owner_id
from shared.ids import check_identifier
from shared.pagination import (
    PageTokens,
    page_size,
    position_list,
    position_str,
    position_time,
)
from shared.settings import Settings
from shared.tools import BUILTIN_KNOWN, KnownTools

_MAX_REQUEST_ID = 128


def _job_id(value: str, field: str = "job_id") -> str:
    return check_identifier(value, field)


def _position(position: Any) -> tuple[datetime, str] | None:
    if position is None:
        return None
    when, item_id = position_list(position, 2)
    return position_time(when), position_str(item_id)


class SchedulerServicer(pb_grpc.SchedulerServiceServicer):
    def __init__(
        self,
        engine: AsyncEngine,
        dispatcher: Dispatcher,
        cfg: SchedulerSettings,
        tokens: PageTokens | None = None,
        known: KnownTools = BUILTIN_KNOWN,
    ) -> None:
        # The deployment's tools a job may name (AGENTMESH_TOOLS_FILE).
        self._known = known
        self._engine = engine
        self._dispatcher = dispatcher
        self._cfg = cfg
        self._tokens = tokens or PageTokens(Settings().page_token_secret)

    async def _job(self, conn: AsyncConnection, owner: str, job_id: str) -> Job:
        job = await store.get_job(conn, owner, _job_id(job_id))
        if job is None:
            # Another owner's job is reported exactly like a missing one.
            raise NotFound("job not found")
        return job

    async def _create(
        self,
        conn: AsyncConnection,
        owner: str,
        spec: core.JobSpec,
        *,
        request_id: str | None = None,
        default_key: str | None = None,
    ) -> Job | None:
        now = await store.db_now(conn)
        job_id = core.new_id()
        nxt = core.next_run(job_id, spec, now, None)
        job = Job(
            id=job_id,
            owner_id=owner,
            spec=spec,
            status=nxt.status,
            version=1,
            create_time=now,
            update_time=now,
            next_slot=nxt.slot,
            next_run_at=nxt.run_at,
            default_key=default_key,
        )
        return job if await store.insert_job(conn, job, request_id=request_id) else None

    async def CreateJob(
        self, request: pb.CreateJobRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CreateJobResponse:
        owner = owner_id(context)
        if len(request.request_id) > _MAX_REQUEST_ID:
            raise InvalidArgument("request_id", f"must be at most {_MAX_REQUEST_ID} characters")
        spec = core.validate_spec(spec_from_pb(request.job), self._known)
        request_id = request.request_id or None
        async with self._engine.begin() as conn:
            job = await self._create(conn, owner, spec, request_id=request_id)
            if job is None and request_id is not None:
                # Same request id: the job the first request created (AIP-155).
                job = await store.find_job(conn, owner, request_id=request_id)
            if job is None:
                raise Aborted("the job could not be created; try again")
        return pb.CreateJobResponse(job=job_to_pb(job))

    async def GetJob(
        self, request: pb.GetJobRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetJobResponse:
        owner = owner_id(context)
        async with self._engine.connect() as conn:
            job = await self._job(conn, owner, request.job_id)
        return pb.GetJobResponse(job=job_to_pb(job))

    async def ListJobs(
        self, request: pb.ListJobsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListJobsResponse:
        owner = owner_id(context)
        size = page_size(request.page_size)
        scope = {"list": "jobs", "owner": owner}
        after = _position(self._tokens.decode(request.page_token, scope))
        async with self._engine.connect() as conn:
            found = await store.list_jobs(conn, owner, after, size + 1)
        token = ""
        if len(found) > size:
            last = found[size - 1]
            token = self._tokens.encode([last.create_time.isoformat(), last.id], scope)
        return pb.ListJobsResponse(jobs=[job_to_pb(j) for j in found[:size]], next_page_token=token)

    async def UpdateJob(
        self, request: pb.UpdateJobRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.UpdateJobResponse:
        owner = owner_id(context)
        job_id = _job_id(request.job.id, "job.id")
        if request.job.version <= 0:
            raise InvalidArgument(
                "job.version", "is required (the version this update is based on)"
            )
        spec = core.validate_spec(spec_from_pb(request.job), self._known)
        async with self._engine.begin() as conn:
            current = await self._job(conn, owner, job_id)
            if current.version != request.job.version:
                raise Aborted("the job changed since it was read; get it again and retry")
            now = await store.db_now(conn)
            updated = replace(current, spec=spec, version=current.version + 1, update_time=now)
            if current.status is JobStatus.ACTIVE or (
                current.status is JobStatus.COMPLETED and spec.schedule != current.spec.schedule
            ):
                # A new schedule (or zone, jitter) gives a new next run, never one at or
                # before the high-water mark.
                nxt = core.next_run(current.id, spec, now, current.last_slot)
                updated = replace(
                    updated, next_slot=nxt.slot, next_run_at=nxt.run_at, status=nxt.status
                )
            if not await store.replace_job(conn, updated, expected_version=current.version):
                raise Aborted("the job changed since it was read; get it again and retry")
        return pb.UpdateJobResponse(job=job_to_pb(updated))

    async def DeleteJob(
        self, request: pb.DeleteJobRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteJobResponse:
        owner = owner_id(context)
        async with self._engine.begin() as conn:
            if not await store.delete_job(conn, owner, _job_id(request.job_id)):
                raise NotFound("job not found")
        return pb.DeleteJobResponse()

    async def DeleteOwnerData(
        self, request: pb.DeleteOwnerDataRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteOwnerDataResponse:
        """Deprecated twin of agentmesh.platform.v1's, over the same registry."""
        counts = await owner_data.delete_owner(self._engine, REGISTRY, owner_id(context))
        return pb.DeleteOwnerDataResponse(deleted_counts=counts)

    # --- webhook outbox (shared/outbox.py; the gateway's deliverer, admin scope) ----------

    async def ListWebhookEvents(
        self,
        request: pb.ListWebhookEventsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.ListWebhookEventsResponse:
        events = await outbox.serve_list(
            context, self._engine.connect(), tables.webhook_outbox, request.page_size
        )
        return pb.ListWebhookEventsResponse(events=events)

    async def AcknowledgeWebhookEvents(
        self,
        request: pb.AcknowledgeWebhookEventsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.AcknowledgeWebhookEventsResponse:
        count = await outbox.serve_acknowledge(
            context, self._engine.begin(), tables.webhook_outbox, request.event_ids
        )
        return pb.AcknowledgeWebhookEventsResponse(acknowledged_count=count)

    async def _set_status(self, owner: str, job_id: str, status: JobStatus) -> Job:
        async with self._engine.begin() as conn:
            current = await self._job(conn, owner, job_id)
            if current.status is status:
                return current
            if current.status not in (JobStatus.ACTIVE, JobStatus.PAUSED):
                raise FailedPrecondition(
                    f"a {current.status.value} job cannot be paused or resumed"
                )
            now = await store.db_now(conn)
            updated = replace(current, status=status, version=current.version + 1, update_time=now)
            if status is JobStatus.PAUSED:
                updated = replace(updated, next_slot=None, next_run_at=None)
            else:
                # Resume starts from now: slots that passed while paused are not caught up.
                nxt = core.next_run(current.id, current.spec, now, current.last_slot)
                updated = replace(
                    updated, next_slot=nxt.slot, next_run_at=nxt.run_at, status=nxt.status
                )
            if not await store.replace_job(conn, updated, expected_version=current.version):
                raise Aborted("the job changed concurrently; retry")
        return updated

    async def PauseJob(
        self, request: pb.PauseJobRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.PauseJobResponse:
        job = await self._set_status(owner_id(context), request.job_id, JobStatus.PAUSED)
        return pb.PauseJobResponse(job=job_to_pb(job))

    async def ResumeJob(
        self, request: pb.ResumeJobRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ResumeJobResponse:
        job = await self._set_status(owner_id(context), request.job_id, JobStatus.ACTIVE)
        return pb.ResumeJobResponse(job=job_to_pb(job))

    async def TriggerJob(
        self, request: pb.TriggerJobRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.TriggerJobResponse:
        owner = owner_id(context)
        granted = time.monotonic()
        async with self._engine.begin() as conn:
            job = await self._job(conn, owner, request.job_id)
            now = await store.db_now(conn)
            run = JobRun(
                id=core.new_id(),
                job_id=job.id,
                owner_id=owner,
                scheduled_slot=now,
                trigger=RunTrigger.MANUAL,
                state=RunState.DISPATCHING,
                attempt=1,
                create_time=now,
                lease_owner=self._dispatcher.lease_owner,
                lease_expires_at=store.lease_until(now, self._cfg.lease_seconds),
            )
            if not await store.insert_runs(conn, [run]):
                raise Aborted("a run of this job was recorded for this very instant; retry")
            await store.mark_ran(conn, owner, job.id, now)
        # Dispatched after the commit, like a scheduled slot; the caller follows it with
        # ListJobRuns (a run can take minutes).
        self._dispatcher.submit([Order(run, job)], granted_at=granted)
        return pb.TriggerJobResponse(job_run=run_to_pb(run))

    async def ListJobRuns(
        self, request: pb.ListJobRunsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListJobRunsResponse:
        owner = owner_id(context)
        size = page_size(request.page_size)
        scope = {"list": "job_runs", "owner": owner, "job": request.job_id}
        after = _position(self._tokens.decode(request.page_token, scope))
        async with self._engine.connect() as conn:
            await self._job(conn, owner, request.job_id)
            found = await store.list_runs(conn, owner, request.job_id, after, size + 1)
        token = ""
        if len(found) > size:
            last = found[size - 1]
            token = self._tokens.encode([last.scheduled_slot.isoformat(), last.id], scope)
        return pb.ListJobRunsResponse(
            job_runs=[run_to_pb(r) for r in found[:size]], next_page_token=token
        )

    async def EnsureDefaultJobs(
        self, request: pb.EnsureDefaultJobsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.EnsureDefaultJobsResponse:
        owner = owner_id(context)
        try:
            sched.zone(request.timezone or sched.DEFAULT_TIMEZONE)
        except sched.ScheduleError as err:
            raise InvalidArgument("timezone", err.description) from None
        spec = core.default_memory_job(request.timezone)
        async with self._engine.begin() as conn:
            # UNIQUE(owner_id, default_key): concurrent calls insert one row, the others find it.
            job = await self._create(conn, owner, spec, default_key=core.DEFAULT_MEMORY_JOB_KEY)
            if job is None:
                job = await store.find_job(conn, owner, default_key=core.DEFAULT_MEMORY_JOB_KEY)
            if job is None:
                raise Aborted("the default job could not be created; try again")
        return pb.EnsureDefaultJobsResponse(jobs=[job_to_pb(job)])
