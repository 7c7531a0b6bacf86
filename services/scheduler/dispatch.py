"""The claim loop and the dispatcher: the scheduler's background work.

One claim is one transaction: lock due jobs, record their job runs (the slots to run leased
to this replica at attempt 1, the missed ones as MISSED), advance each job, commit. Only
then are the leased runs dispatched to the orchestrator. A lease is renewed while this
replica holds the run; one that expires (the replica died or stalled) is taken by any
replica with attempt + 1, and every completion write is fenced on the attempt, so a stale
replica's late write changes nothing.

Taking over an attempt whose outcome is unknown first asks the orchestrator for that
attempt's run (StreamRun): a run the orchestrator already has is followed to its end
instead of being started a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as orch_pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2_grpc as orch_grpc
from agentmesh.type.v1 import content_pb2, message_pb2, run_event_pb2
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.scheduler import core, store
from services.scheduler.core import Job, JobRun, RunError, RunState
from services.scheduler.schedule import ScheduleType
from services.scheduler.settings import SchedulerSettings
from shared import metrics
from shared.identity import call_metadata
from shared.profiles import profile_to_pb
from shared.settings import Settings

log = logging.getLogger("agentmesh.scheduler")

# Orchestrator answers that retrying the same request cannot fix.
_PERMANENT_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
# RUN_ERROR codes that the same attempt would meet again: the job's run fails for good.
# RUNTIME_MODE_MISMATCH: the job's thread holds chat messages (it was taken by a chat run
# before automation thread ids were reserved); no retry can store automation messages there.
_PERMANENT_RUN_ERRORS = frozenset({"RUNTIME_MODE_MISMATCH"})
_MAX_ERROR_CHARS = 2000


def replica_id() -> str:
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def kill_point(cfg: SchedulerSettings, point: str) -> None:
    """Test-only hook: die here exactly as `kill -9` would (no cleanup, no flush)."""
    if cfg.test_kill_at == point:
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class Order:
    """A leased run to dispatch, with the job it belongs to."""

    run: JobRun
    job: Job
    # The previous attempt's outcome is unknown (its holder died or stalled mid-dispatch).
    resume: bool = False


class AttemptFailed(Exception):
    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.message = message[:_MAX_ERROR_CHARS]
        self.retryable = retryable


def input_message(job: Job, run_id: str) -> message_pb2.Message:
    return message_pb2.Message(
        id=uuid.uuid5(uuid.NAMESPACE_URL, f"agentmesh:{run_id}:input").hex,
        role=message_pb2.ROLE_USER,
        kind=message_pb2.MESSAGE_KIND_USER_MESSAGE,
        content=[content_pb2.ContentBlock(text=content_pb2.TextBlock(text=job.spec.config.prompt))],
    )


def start_request(job: Job, run_id: str) -> orch_pb.StartRunRequest:
    return orch_pb.StartRunRequest(
        thread_id=core.thread_id(job.id),
        run_id=run_id,
        messages=[input_message(job, run_id)],
        origin=message_pb2.RUNTIME_MODE_AUTOMATION,
        profile=profile_to_pb(job.spec.profile),
        time_zone=job.spec.timezone,
        declared_tools=list(job.spec.config.tools),
    )


@dataclass
class _Outcome:
    """One attempt's result, waiting for the batched, fenced write."""

    order: Order
    dispatched_at: datetime
    orchestrator_run_id: str
    error: AttemptFailed | None
    written: asyncio.Future[bool]


class Dispatcher:
    """Dispatches leased runs with bounded concurrency.

    Database use per replica stays small and constant: one task renews every held lease
    in one statement, one task writes outcomes in batches (fenced on the attempt), so
    thousands of runs in flight need a handful of connections, not one each.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        channel: grpc.aio.Channel,
        settings: Settings,
        cfg: SchedulerSettings,
        lease_owner: str,
    ) -> None:
        self._engine = engine
        self._stub = orch_grpc.OrchestratorServiceStub(channel)
        self._settings = settings
        self._cfg = cfg
        self.lease_owner = lease_owner
        # Held runs: id -> (attempt, monotonic time until which the lease surely holds).
        self._held: dict[str, tuple[int, float]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(cfg.dispatch_concurrency)
        self._outcomes: asyncio.Queue[_Outcome] = asyncio.Queue()
        self._helpers: list[asyncio.Task[None]] = []

    @property
    def backlog(self) -> int:
        return len(self._held)

    def _ensure_helpers(self) -> None:
        if not self._helpers:
            self._helpers = [
                asyncio.create_task(self._renew_forever()),
                asyncio.create_task(self._write_forever()),
            ]

    def submit(self, orders: Iterable[Order], granted_at: float | None = None) -> None:
        """Dispatch `orders` in the background. `granted_at` (monotonic) is when their leases
        were granted, at the latest; the lease is trusted from then on for lease_seconds."""
        granted = time.monotonic() if granted_at is None else granted_at
        for order in orders:
            self._held[order.run.id] = (order.run.attempt, granted + self._cfg.lease_seconds)
            task = asyncio.create_task(self._run(order))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._ensure_helpers()

    async def idle(self) -> None:
        """Wait until every submitted run is finished and written (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self, grace: float) -> None:
        """Let runs in flight finish for `grace` seconds; give the rest up at once."""
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for task in self._helpers:
            task.cancel()
        await asyncio.gather(*self._helpers, return_exceptions=True)
        self._helpers = []
        if self._held:
            with contextlib.suppress(Exception):
                async with self._engine.begin() as conn:
                    now = await store.db_now(conn)
                    held = [(run_id, attempt) for run_id, (attempt, _) in self._held.items()]
                    await store.release_leases(conn, self.lease_owner, held, now)
            self._held.clear()

    def _lease_valid(self, run: JobRun) -> bool:
        held = self._held.get(run.id)
        # A margin for the clocks of this process and the database to disagree a little.
        return held is not None and held[0] == run.attempt and time.monotonic() < held[1] - 1.0

    async def _renew_forever(self) -> None:
        period = self._cfg.lease_seconds / 3
        while True:
            await asyncio.sleep(period)
            if not self._held:
                continue
            started = time.monotonic()
            held = [(run_id, attempt) for run_id, (attempt, _) in self._held.items()]
            try:
                async with self._engine.begin() as conn:
                    now = await store.db_now(conn)
                    until = store.lease_until(now, self._cfg.lease_seconds)
                    renewed = await store.renew_leases(conn, self.lease_owner, held, until)
            except Exception:
                log.exception("lease renewal failed")
                continue
            for run_id, attempt in renewed:
                if self._held.get(run_id, (None,))[0] == attempt:
                    self._held[run_id] = (attempt, started + self._cfg.lease_seconds)

    async def _run(self, order: Order) -> None:
        try:
            async with self._slots:
                await self.dispatch(order)
        except Exception:
            log.exception("dispatch of job run %s failed unexpectedly", order.run.id)
        finally:
            if self._held.get(order.run.id, (None,))[0] == order.run.attempt:
                del self._held[order.run.id]

    async def dispatch(self, order: Order) -> bool:
        """Dispatch one leased run and record the outcome; False when the lease was lost."""
        run, job = order.run, order.job
        if run.id not in self._held:
            self._held[run.id] = (run.attempt, time.monotonic() + self._cfg.lease_seconds)
        if not self._lease_valid(run):
            # Waited too long for a dispatch slot without a renewal: another replica may
            # own the run by now, so starting it here could run it twice.
            log.warning("job run %s attempt %d: lease not certain, left to its next holder", run.id, run.attempt)
            return False
        run_id = core.orchestrator_run_id(run.id, run.attempt)
        started = datetime.now(UTC)
        metrics.observe_dispatch_lag((started - run.scheduled_slot).total_seconds())
        error: AttemptFailed | None = None
        done_as = run_id
        try:
            followed: str | None = None
            if order.resume and run.attempt > 1:
                followed = await self._follow(job, core.orchestrator_run_id(run.id, run.attempt - 1))
            done_as = followed or await self._start(job, run_id)
        except AttemptFailed as err:
            error = err
        self._ensure_helpers()
        outcome = _Outcome(order, started, done_as, error, asyncio.get_running_loop().create_future())
        await self._outcomes.put(outcome)
        written = await outcome.written
        if not written:
            log.warning("job run %s attempt %d lost its lease; its result is not recorded", run.id, run.attempt)
        return written

    async def _start(self, job: Job, run_id: str) -> str:
        call = self._stub.StartRun(
            start_request(job, run_id),
            metadata=call_metadata(job.owner_id),
            timeout=self._settings.run_timeout_seconds,
        )
        try:
            await self._consume(call)
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.ALREADY_EXISTS:
                # The orchestrator has this very attempt already: follow it instead.
                followed = await self._follow(job, run_id)
                if followed is not None:
                    return followed
            raise _failure(err) from None
        return run_id

    async def _follow(self, job: Job, run_id: str) -> str | None:
        """Follow an earlier run to its end; None when the orchestrator does not know it."""
        call = self._stub.StreamRun(
            orch_pb.StreamRunRequest(run_id=run_id, after_sequence=0),
            metadata=call_metadata(job.owner_id),
            timeout=self._settings.run_timeout_seconds,
        )
        try:
            await self._consume(call)
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise _failure(err) from None
        return run_id

    async def _consume(self, call: grpc.aio.UnaryStreamCall) -> None:  # type: ignore[type-arg]
        """Read the run's events to the end; AttemptFailed unless it finished successfully."""
        finished: run_event_pb2.RunFinished | None = None
        first = True
        async for response in call:
            if first:
                first = False
                kill_point(self._cfg, "during_dispatch")
            event = response.event
            kind = event.WhichOneof("payload")
            if kind == "run_error":
                code = event.run_error.code or "RUN_ERROR"
                raise AttemptFailed(
                    f"{code}: {event.run_error.message}",
                    retryable=code not in _PERMANENT_RUN_ERRORS,
                )
            if kind == "run_finished":
                finished = event.run_finished
        if finished is None:
            raise AttemptFailed("the run's event stream ended without RUN_FINISHED", retryable=True)
        if finished.outcome == run_event_pb2.RUN_OUTCOME_CANCELLED:
            raise AttemptFailed("the run was cancelled", retryable=False)

    async def _write_forever(self) -> None:
        while True:
            batch = [await self._outcomes.get()]
            while not self._outcomes.empty() and len(batch) < 1000:
                batch.append(self._outcomes.get_nowait())
            written: set[str] = set()
            for attempt in range(3):
                try:
                    written = await self._write(batch)
                    break
                except Exception:
                    log.exception("writing %d run outcomes failed (try %d)", len(batch), attempt + 1)
                    await asyncio.sleep(0.5 * (attempt + 1))
            for outcome in batch:
                if not outcome.written.done():
                    outcome.written.set_result(outcome.order.run.id in written)

    async def _write(self, batch: list[_Outcome]) -> set[str]:
        """Record outcomes in one transaction; the ids whose fenced write took effect."""
        cfg = self._cfg
        async with self._engine.begin() as conn:
            now = await store.db_now(conn)
            written = await store.finish_runs(
                conn,
                [
                    store.Finish(o.order.run.id, o.order.run.attempt, o.dispatched_at, o.orchestrator_run_id)
                    for o in batch
                    if o.error is None
                ],
                now,
            )
            for o in batch:
                if o.error is None:
                    continue
                run, job = o.order.run, o.order.job
                retry = o.error.retryable and run.attempt < cfg.max_attempts
                retry_at = (
                    now + core.retry_delay(run.attempt, cfg.backoff_initial_seconds, cfg.backoff_max_seconds)
                    if retry
                    else None
                )
                ok = await store.fail_attempt(
                    conn,
                    run,
                    RunError(run.attempt, o.error.message, now),
                    now=now,
                    dispatched_at=o.dispatched_at,
                    orchestrator_run_id=o.orchestrator_run_id,
                    retry_at=retry_at,
                )
                if ok:
                    written.add(run.id)
                    if retry_at is None and job.spec.schedule.type is ScheduleType.ONCE:
                        await store.set_once_job_failed(conn, job.id)
                log.warning(
                    "job run attempt failed",
                    extra={
                        "fields": {
                            "job_run_id": run.id,
                            "attempt": run.attempt,
                            "error": o.error.message,
                            "retry_at": retry_at.isoformat() if retry_at else None,
                            "recorded": ok,
                        }
                    },
                )
        return written


def _failure(err: grpc.aio.AioRpcError) -> AttemptFailed:
    return AttemptFailed(
        f"{err.code().name}: {err.details() or ''}".strip(), retryable=err.code() not in _PERMANENT_CODES
    )


@dataclass(frozen=True)
class ClaimResult:
    jobs: int
    orders: tuple[Order, ...]
    missed: int


class ClaimLoop:
    """Claims due jobs and takes over waiting or orphaned runs, forever."""

    def __init__(
        self,
        engine: AsyncEngine,
        dispatcher: Dispatcher,
        cfg: SchedulerSettings,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._engine = engine
        self._dispatcher = dispatcher
        self._cfg = cfg
        # Tests move the clock; production uses the database's.
        self._clock = clock

    async def run_forever(self) -> None:
        while True:
            busy = False
            try:
                busy = await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("claim pass failed")
            if not busy:
                await asyncio.sleep(self._cfg.claim_interval_seconds)
            else:
                await asyncio.sleep(0)

    async def tick(self) -> bool:
        """One pass: claim due jobs, take over runs; True when there may be more to do now."""
        if self._dispatcher.backlog >= self._cfg.batch_size:
            await asyncio.sleep(0.05)  # dispatch is behind: let it catch up before claiming more
            return True
        granted = time.monotonic()
        claimed = await self.claim_due()
        recovered = await self.take_over()
        self._dispatcher.submit([*claimed.orders, *recovered], granted_at=granted)
        metrics.set_due_backlog(self._dispatcher.backlog)
        return claimed.jobs >= self._cfg.batch_size or len(recovered) >= self._cfg.batch_size

    async def _now(self, conn: AsyncConnection) -> datetime:
        return self._clock() if self._clock is not None else await store.db_now(conn)

    async def claim_due(self) -> ClaimResult:
        cfg = self._cfg
        async with self._engine.begin() as conn:
            now, due = await store.lock_due(conn, self._clock() if self._clock else None, cfg.batch_size)
            if not due or now is None:
                return ClaimResult(0, (), 0)
            grace = timedelta(seconds=cfg.misfire_grace_seconds)
            writes = store.ClaimWrites()
            for group in due:
                shared = core.plan_position(
                    group.position,
                    now,
                    catch_up_max=cfg.catch_up_max,
                    missed_record_limit=cfg.missed_record_limit,
                    misfire_grace=grace,
                )
                if shared.unrecorded:
                    log.warning(
                        "missed slots older than the record limit",
                        extra={"fields": {"job_ids": list(group.ids), "unrecorded": shared.unrecorded}},
                    )
                if shared.common is not None:  # no jitter: one plan for the whole group
                    writes.add(group, shared.common)
                    continue
                for i, job_id in enumerate(group.ids):
                    writes.add(group, core.plan_job(job_id, group.position, shared, now, misfire_grace=grace), only=i)
            recorded = await store.record_claim(
                conn, now, writes, self._dispatcher.lease_owner, store.lease_until(now, cfg.lease_seconds)
            )
            kill_point(cfg, "before_commit")
        kill_point(cfg, "after_commit")
        orders = tuple(Order(run, job) for run, job in recorded.to_dispatch)
        return ClaimResult(recorded.advanced, orders, recorded.missed)

    async def take_over(self) -> list[Order]:
        """Lease runs waiting for a retry and runs whose holder's lease expired."""
        async with self._engine.begin() as conn:
            now = await self._now(conn)
            taken = await store.take_runs(
                conn,
                now,
                self._cfg.batch_size,
                self._dispatcher.lease_owner,
                store.lease_until(now, self._cfg.lease_seconds),
            )
            if not taken:
                return []
            jobs = await store.jobs_by_id(conn, (run.job_id for run, _ in taken))
        return [
            Order(run, jobs[run.job_id], resume=previous is RunState.DISPATCHING)
            for run, previous in taken
            if run.job_id in jobs
        ]
