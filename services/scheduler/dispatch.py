"""The claim loop and the dispatcher: the scheduler's background work.

One claim is one transaction: lock due jobs, record their job runs (the slots to run leased
to this replica at attempt 1, the missed ones as MISSED), advance each job, commit. Only
then are the leased runs dispatched to the orchestrator. A lease is renewed while this
replica holds the run; one that expires (the replica died or stalled) is taken by any
replica with attempt + 1, and every completion write is fenced on the attempt, so a stale
replica's late write changes nothing.

Did this slot run? One rule (core.after_run), with history's run record as the authority:

- A slot's orchestrator runs have deterministic ids, R1, R2, ... (core.orchestrator_run_id
  of the job run and n). Attempt 1, just claimed, starts R1. Any later attempt (a retry, or
  a take-over of an attempt whose holder died) first asks history about R1, R2, ... in
  order: a run still going is followed to its end (StreamRun while its event log lasts,
  then history's record), a run that succeeded is the slot's run, a run history does not
  know is started under that same id. Only a run that is over without success (failed in
  history, or its event log ended while history never admitted it) moves the slot on to
  the next id, so no second run of a slot starts while one of its runs is alive.
- A lost event stream is never a failure by itself: RUN_FINISHED is written only after
  history recorded the end, so it is the record's answer; anything else (RUN_ERROR, a
  stream that breaks, UNAVAILABLE "its result will be in the thread's history") makes the
  dispatcher read the run's record (history GetRun) until it has ended, and only a record
  that says failed, or a run that never started, is retried.
- Starting the same id again is safe: the orchestrator refuses a run id whose event log
  exists (ALREADY_EXISTS, then the run is followed) and history keeps one record, and one
  stored reply, per run id. The one instant this cannot cover: a start whose event log was
  lost before history admitted its run, retried within that same moment.
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
from typing import Any

import grpc
from agentmesh.history.v1 import history_service_pb2 as hist_pb
from agentmesh.history.v1 import history_service_pb2_grpc as hist_grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as orch_pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2_grpc as orch_grpc
from agentmesh.type.v1 import content_pb2, message_pb2, run_event_pb2
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.scheduler import core, store, tables
from services.scheduler.core import Job, JobRun, Next, RunEnd, RunError, RunState
from services.scheduler.schedule import ScheduleType
from services.scheduler.settings import SchedulerSettings
from shared import metrics, outbox
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
    # Any attempt after the first asks history about the slot's runs before starting one.
    resume: bool = False


class AttemptFailed(Exception):
    def __init__(self, message: str, *, retryable: bool, run_id: str = "") -> None:
        super().__init__(message)
        self.message = message[:_MAX_ERROR_CHARS]
        self.retryable = retryable
        # The orchestrator run the failure is about (recorded on the job run).
        self.run_id = run_id


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


# History's run states, as the ends the dispatcher tells apart.
_ENDS = {
    hist_pb.RUN_STATE_SUCCEEDED: RunEnd.SUCCEEDED,
    hist_pb.RUN_STATE_INTERRUPTED: RunEnd.SUCCEEDED,
    hist_pb.RUN_STATE_CANCELLED: RunEnd.CANCELLED,
    hist_pb.RUN_STATE_FAILED: RunEnd.FAILED,
}


@dataclass(frozen=True)
class _Seen:
    """How one run of the slot ended, as this attempt learnt it."""

    end: RunEnd
    # What went wrong, in words for the job run's errors (empty when it succeeded).
    error: str = ""
    # It was over when this attempt found it (the attempt did not start or watch it).
    found_ended: bool = False


def _seen_record(record: hist_pb.Run, *, found_ended: bool = False) -> _Seen | None:
    """The end a run record says; None while the run is queued or running."""
    end = _ENDS.get(record.state)
    if end is None:
        return None
    error = ""
    if end is RunEnd.FAILED:
        error = f"{record.error_code or 'FAILED'}: {record.error_message or 'the run failed'}"
    elif end is RunEnd.CANCELLED:
        error = "the run was cancelled"
    return _Seen(end, error, found_ended)


@dataclass(frozen=True)
class _Stream:
    """What reading a run's event stream told."""

    # The end its events told (FAILED: a RUN_ERROR, which history confirms or not).
    seen: _Seen | None
    # Whether any event came.
    streamed: bool
    # The status that ended the call early.
    error: grpc.aio.AioRpcError | None = None

    @property
    def problem(self) -> str:
        if self.seen is not None:
            return self.seen.error
        return _status(self.error) if self.error is not None else _NO_END


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
        orchestrator: grpc.aio.Channel,
        history: grpc.aio.Channel,
        settings: Settings,
        cfg: SchedulerSettings,
        lease_owner: str,
    ) -> None:
        self._engine = engine
        self._stub = orch_grpc.OrchestratorServiceStub(orchestrator)
        # Where the runs' records are: the authority on whether a slot's run happened.
        self._history = hist_grpc.HistoryServiceStub(history)
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
        run = order.run
        if run.id not in self._held:
            self._held[run.id] = (run.attempt, time.monotonic() + self._cfg.lease_seconds)
        if not self._lease_valid(run):
            # Waited too long for a dispatch slot without a renewal: another replica may
            # own the run by now, so starting it here could run it twice.
            log.warning(
                "job run %s attempt %d: lease not certain, left to its next holder",
                run.id,
                run.attempt,
            )
            return False
        started = datetime.now(UTC)
        metrics.observe_dispatch_lag((started - run.scheduled_slot).total_seconds())
        error: AttemptFailed | None = None
        done_as = core.orchestrator_run_id(run.id, 1)
        try:
            done_as = await self._settle(order)
        except AttemptFailed as err:
            error = err
            done_as = err.run_id or done_as
        kill_point(self._cfg, "before_outcome")
        self._ensure_helpers()
        outcome = _Outcome(
            order, started, done_as, error, asyncio.get_running_loop().create_future()
        )
        await self._outcomes.put(outcome)
        written = await outcome.written
        if not written:
            log.warning(
                "job run %s attempt %d lost its lease; its result is not recorded",
                run.id,
                run.attempt,
            )
        return written

    async def _settle(self, order: Order) -> str:
        """Make sure the slot ran once: the id of its run that succeeded, or AttemptFailed.

        Walks the slot's run ids in order (core.slot_run_ids, core.after_run): attempt 1,
        claimed just now, starts the first; a later attempt asks history about each id and
        follows a run that is going, takes one that succeeded, starts one history does not
        know, and skips only one that is over without success.
        """
        run, job = order.run, order.job
        deadline = time.monotonic() + self._settings.run_timeout_seconds
        fresh = run.attempt == 1
        for run_id in core.slot_run_ids(run.id, run.attempt):
            try:
                record = None if fresh else await self._record(job, run_id)
            except grpc.aio.AioRpcError as err:
                # Unknown whether the run exists: starting one could run the slot twice.
                problem = f"cannot ask history about run {run_id}: {_status(err)}"
                raise AttemptFailed(problem, retryable=True, run_id=run_id) from None
            if record is None:
                seen = await self._start(job, run_id, deadline)
            else:
                ended = _seen_record(record, found_ended=True)
                seen = ended or await self._follow(job, run_id, deadline)
            step = core.after_run(seen.end, found_ended=seen.found_ended)
            if step is Next.DONE:
                return run_id
            if step is Next.NEXT_ID:
                continue
            retryable = step is Next.RETRY
            raise AttemptFailed(f"{seen.error} (run {run_id})", retryable=retryable, run_id=run_id)
        raise AttemptFailed("every run of the slot so far ended without success", retryable=True)

    async def _record(self, job: Job, run_id: str) -> hist_pb.Run | None:
        """History's record of the run; None when history has none."""
        try:
            reply = await self._history.GetRun(
                hist_pb.GetRunRequest(run_id=run_id),
                metadata=call_metadata(job.owner_id),
                timeout=self._settings.rpc_timeout_seconds,
            )
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return reply.run

    async def _start(self, job: Job, run_id: str, deadline: float) -> _Seen:
        """Start the run; how it ended. A run id the orchestrator has already is followed."""
        call = self._stub.StartRun(
            start_request(job, run_id),
            metadata=call_metadata(job.owner_id),
            timeout=_left(deadline),
        )
        read = await self._read(call, "during_dispatch")
        err = read.error
        if err is not None and err.code() == grpc.StatusCode.ALREADY_EXISTS:
            # Another attempt started this id: follow it. Its log ended without a record in
            # history means it is over and did nothing durable.
            followed = await self._follow(job, run_id, deadline)
            return _Seen(followed.end, followed.error, found_ended=followed.end is RunEnd.ABSENT)
        if err is not None and err.code() in _PERMANENT_CODES and not read.streamed:
            raise AttemptFailed(_status(err), retryable=False, run_id=run_id)
        if read.seen is not None and read.seen.end is not RunEnd.FAILED:
            return read.seen
        if not read.streamed:
            # Refused before anything came (or lost at once): one look at history says
            # whether it started after all. Not knowing is not a failure of the run.
            try:
                record = await self._record(job, run_id)
            except grpc.aio.AioRpcError as look:
                return _Seen(RunEnd.UNKNOWN, f"{read.problem}; cannot ask history: {_status(look)}")
            if record is None:
                return _Seen(RunEnd.ABSENT, read.problem)
            return _seen_record(record) or await self._follow(job, run_id, deadline)
        # Lost mid-way or RUN_ERROR: history knows how it ended. The run is admitted by
        # history right after its first event (the orchestrator's BeginRun, within its rpc
        # deadline), so it gets that long to show up there.
        grace = self._settings.rpc_timeout_seconds
        return await self._until_ended(job, run_id, deadline, grace, read.problem)

    async def _follow(self, job: Job, run_id: str, deadline: float) -> _Seen:
        """Follow a run that is going to its end (its event stream while that lasts, then
        history's record)."""
        call = self._stub.StreamRun(
            orch_pb.StreamRunRequest(run_id=run_id, after_sequence=0),
            metadata=call_metadata(job.owner_id),
            timeout=_left(deadline),
        )
        read = await self._read(call, "during_follow")
        if read.seen is not None and read.seen.end is not RunEnd.FAILED:
            return read.seen
        # No log (lost, expired, never written), a broken stream or RUN_ERROR: history decides.
        return await self._until_ended(job, run_id, deadline, 0.0, read.problem)

    async def _read(self, call: grpc.aio.UnaryStreamCall[Any, Any], point: str) -> _Stream:
        """Read a run's events to the end, or to the error that ends the call.

        RUN_FINISHED is the record's answer (the orchestrator writes it after history
        recorded the end); RUN_ERROR is only a claim, checked with history (FAILED here).
        """
        streamed = False
        try:
            async for response in call:
                if not streamed:
                    streamed = True
                    kill_point(self._cfg, point)
                event = response.event
                kind = event.WhichOneof("payload")
                if kind == "run_error":
                    code = event.run_error.code or "RUN_ERROR"
                    if code in _PERMANENT_RUN_ERRORS:
                        # Refused for good (the thread is not the job's): no retry can help.
                        raise AttemptFailed(f"{code}: {event.run_error.message}", retryable=False)
                    claim = _Seen(RunEnd.FAILED, f"{code}: {event.run_error.message}")
                    return _Stream(claim, streamed)
                if kind == "run_finished":
                    if event.run_finished.outcome == run_event_pb2.RUN_OUTCOME_CANCELLED:
                        return _Stream(_Seen(RunEnd.CANCELLED, "the run was cancelled"), streamed)
                    return _Stream(_Seen(RunEnd.SUCCEEDED), streamed)
        except grpc.aio.AioRpcError as err:
            return _Stream(None, streamed, err)
        return _Stream(None, streamed)

    async def _until_ended(
        self, job: Job, run_id: str, deadline: float, grace: float, error: str
    ) -> _Seen:
        """Read the run's record until it has ended: how it ended (UNKNOWN at the deadline;
        ABSENT when history has no record of it after `grace` seconds)."""
        absent_until = time.monotonic() + grace
        unknown = error
        while True:
            try:
                record = await self._record(job, run_id)
            except grpc.aio.AioRpcError as err:
                unknown = f"cannot ask history: {_status(err)}"  # history down: wait for it
            else:
                if record is None:
                    if time.monotonic() >= absent_until:
                        return _Seen(RunEnd.ABSENT, f"{error} (history has no record of the run)")
                else:
                    seen = _seen_record(record)
                    if seen is not None:
                        return seen
                    unknown = "the run is still going"
            if time.monotonic() + self._cfg.outcome_poll_seconds > deadline:
                return _Seen(RunEnd.UNKNOWN, f"outcome unknown at the run deadline ({unknown})")
            await asyncio.sleep(self._cfg.outcome_poll_seconds)

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
                    log.exception(
                        "writing %d run outcomes failed (try %d)", len(batch), attempt + 1
                    )
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
                    store.Finish(
                        o.order.run.id, o.order.run.attempt, o.dispatched_at, o.orchestrator_run_id
                    )
                    for o in batch
                    if o.error is None
                ],
                now,
            )
            # Webhook events of the ends written, in the same transaction (shared/outbox.py).
            ended = [
                store.job_run_ended_event(
                    o.order.run,
                    o.order.job,
                    failed=False,
                    now=now,
                    orchestrator_run_id=o.orchestrator_run_id,
                    error="",
                )
                for o in batch
                if o.error is None and o.order.run.id in written
            ]
            for o in batch:
                if o.error is None:
                    continue
                run, job = o.order.run, o.order.job
                retry = o.error.retryable and run.attempt < cfg.max_attempts
                retry_at = (
                    now
                    + core.retry_delay(
                        run.attempt, cfg.backoff_initial_seconds, cfg.backoff_max_seconds
                    )
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
                    if retry_at is None:
                        ended.append(
                            store.job_run_ended_event(
                                run,
                                job,
                                failed=True,
                                now=now,
                                orchestrator_run_id=o.orchestrator_run_id,
                                error=o.error.message,
                            )
                        )
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
            await outbox.add(conn, tables.webhook_outbox, ended)
        return written


# What the dispatcher says of a stream that ended without RUN_FINISHED or RUN_ERROR.
_NO_END = "the run's event stream ended without RUN_FINISHED"


def _status(err: grpc.aio.AioRpcError) -> str:
    return f"{err.code().name}: {err.details() or ''}".strip()


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.1)


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
            now, due = await store.lock_due(
                conn, self._clock() if self._clock else None, cfg.batch_size
            )
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
                        extra={
                            "fields": {"job_ids": list(group.ids), "unrecorded": shared.unrecorded}
                        },
                    )
                if shared.common is not None:  # no jitter: one plan for the whole group
                    writes.add(group, shared.common)
                    continue
                for i, job_id in enumerate(group.ids):
                    writes.add(
                        group,
                        core.plan_job(job_id, group.position, shared, now, misfire_grace=grace),
                        only=i,
                    )
            recorded = await store.record_claim(
                conn,
                now,
                writes,
                self._dispatcher.lease_owner,
                store.lease_until(now, cfg.lease_seconds),
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
