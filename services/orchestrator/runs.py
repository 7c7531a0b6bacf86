"""Runs: each executes in a background task of its own, so a caller that goes away does not
stop it; its events go through its RunEventWriter into the event log, which every reader
(StartRun's caller, StreamRun's) follows.

The pipeline (ARCHITECTURE.md §2): RUN_STARTED -> history BeginRun -> [router step] ->
executor step -> history FinishRun -> RUN_FINISHED (strategy reject, and a run that
resumes approvals: BeginRun first, so a busy thread, or an approval another run answered,
is refused before any stream); on failure FinishRun FAILED then
RUN_ERROR, and nothing after it. A cancel stops the steps (the executor call, and with it
the model stream), closes what the stream had open, stores what was produced as
interrupted, finishes the record CANCELLED and ends with RUN_FINISHED outcome cancelled.

History is the authority shared by every replica: BeginRun admits the run (one active run
per thread; a busy thread queues it, rejects it, or cancels what is active, by the run's
multitask strategy). While a run is active this replica renews its lease on the record;
the renewal also brings back a cancel recorded by another replica. A sweep on every replica
marks runs whose lease expired failed and ends their event logs with RUN_ERROR, so nothing
stays running forever when a replica dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from agentmesh.executor.v1 import executor_service_pb2
from agentmesh.history.v1 import history_service_pb2
from agentmesh.type.v1 import message_pb2, run_event_pb2

from services.orchestrator import convert, core
from services.orchestrator.clients import Peers
from services.orchestrator.core import OpenSpans, RunLifecycle, RunPlan, RunPolicy, TurnMeter
from services.orchestrator.eventlog import EventLog, LogExists
from services.orchestrator.gate import StartGate
from services.orchestrator.writer import RunEventWriter
from shared import approvals, metrics
from shared.admission import InFlight
from shared.domain import TERMINAL_RUN_STATES, ExecutorKind, RunState
from shared.errors import (
    AlreadyExists,
    DomainError,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from shared.logs import run_id_var, thread_id_var
from shared.messages import Msg, msg_from_pb, usage_from_pb

log = logging.getLogger("agentmesh.orchestrator.runs")


@dataclass
class ActiveRun:
    """A run of this replica: its plan, its lifecycle, the tasks that run it and what its
    steps produced."""

    plan: RunPlan
    key: str
    writer: RunEventWriter
    # Where the run is (core.RunLifecycle): its stage, the stop asked of it, how it ended.
    lifecycle: RunLifecycle = field(default_factory=RunLifecycle)
    task: asyncio.Task[None] | None = None
    # The cancellable part of the run: router and executor steps.
    steps: asyncio.Task[executor_service_pb2.StepResult] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    spans: OpenSpans = field(default_factory=OpenSpans)
    # Finished messages of the steps, stamped for history.
    outputs: list[Msg] = field(default_factory=list)
    # Tool calls the executor refused, audited with the run's record.
    denials: list[history_service_pb2.ToolDenial] = field(default_factory=list)
    heartbeat: asyncio.Task[None] | None = None
    # The executor's model turn under way: what it used if a cancel or an error cuts it.
    turn: TurnMeter = field(default_factory=TurnMeter)


class RunManager:
    def __init__(
        self,
        peers: Peers,
        event_log: EventLog,
        *,
        rpc_timeout_seconds: float,
        policy: RunPolicy | None = None,
        in_flight: InFlight,
    ) -> None:
        self.peers = peers
        # Load shedding: runs of this replica (queued ones too), held until their task ends.
        self.in_flight = in_flight
        self.event_log = event_log
        self.rpc_timeout_seconds = rpc_timeout_seconds
        self.policy = policy or RunPolicy()
        # This replica, as the holder of the leases of the runs it runs.
        self.holder = f"orchestrator-{uuid.uuid4().hex[:12]}"
        self._active: dict[str, ActiveRun] = {}
        self._reserved: set[str] = set()
        # When a started run begins its work: in arrival order while the loop is behind.
        self.gate = StartGate()
        self._sweeper: asyncio.Task[None] | None = None

    def active(self, owner: str, run_id: str) -> ActiveRun | None:
        return self._active.get(core.event_log_key(owner, run_id))

    def _begin_request(self, plan: RunPlan) -> history_service_pb2.BeginRunRequest:
        return convert.begin_run_request(plan, self.holder, self.policy.lease_seconds)

    async def start(self, plan: RunPlan) -> ActiveRun:
        """Start the run in a task of its own, which admits it in history (BeginRun) right
        after RUN_STARTED, so the caller's stream begins without waiting for the database.
        Under strategy reject the run is admitted here instead: a busy thread fails the
        call (the caller gets the error, no stream). Any other BeginRun failure ends the
        run's stream with RUN_ERROR."""
        key = core.event_log_key(plan.owner, plan.run_id)
        if key in self._active or key in self._reserved:
            raise _run_exists()
        # Over a bound: refused here, before the event log or history is written.
        self.in_flight.acquire(plan.owner)
        self._reserved.add(key)
        lifecycle = RunLifecycle()
        # BeginRun's answer; None until the run's task asks, right after RUN_STARTED
        # (strategy reject: asked before it starts), or when history refused it.
        begin: history_service_pb2.BeginRunResponse | None = None
        writer = RunEventWriter(self.event_log, key, plan.run_id, plan.thread_id)
        try:
            if plan.decisions and not await self.event_log.exists(key):
                # A resume is checked before anything of the run is stored (a retried
                # StartRun of a run that began is that run, as for any run).
                await self._check_decisions(plan)
            if plan.multitask_strategy is core.MultitaskStrategy.REJECT or plan.decisions:
                # History is asked before RUN_STARTED here: a run_id used before must be
                # refused before it is. A resume's approvals are taken by the run as history
                # admits it: one answered by a concurrent run refuses this one, before it
                # starts (two runs checked above at once both found them waiting).
                if await self.event_log.exists(key):
                    raise _run_exists()
                begin = await self._begin(plan, lifecycle)
            # Storing RUN_STARTED creates the run's log and finds the log of an earlier run
            # with this run_id: one write for both.
            await writer.open(convert.run_started())
        except BaseException as exc:
            writer.abandon()
            self.in_flight.release(plan.owner)
            if isinstance(exc, LogExists):
                raise _run_exists() from None
            if isinstance(exc, Exception) and not isinstance(exc, FailedPrecondition):
                if begin is not None:
                    # Strategy reject: history admitted the run, then its log failed.
                    await self._abandon_record(plan, exc)
                if not isinstance(exc, DomainError):
                    raise Unavailable(NOT_STARTED_MESSAGE, reason=NOT_STARTED) from exc
            raise
        finally:
            self._reserved.discard(key)
        run = ActiveRun(plan, key, writer, lifecycle)
        self._active[key] = run
        run.task = asyncio.create_task(self._execute(run, begin), name=f"run {plan.run_id}")
        metrics.run_started(plan.profile.name)
        return run

    async def _waiting(self, plan: RunPlan) -> dict[str, approvals.Pending]:
        """The approvals waiting in the run's thread (its context: the profile's window)."""
        messages: list[message_pb2.Message] = []
        token = ""
        while True:
            try:
                page = await self.peers.load_context(
                    plan.owner, convert.thread_context_request(plan, token)
                )
            except NotFound:
                return {}  # no such thread of this owner: nothing waits
            messages.extend(page.messages)
            token = page.next_page_token
            if not token:
                break
        msgs = [msg_from_pb(m, f"context[{i}]") for i, m in enumerate(messages)]
        return approvals.pending_approvals(msgs)

    async def _check_decisions(self, plan: RunPlan) -> None:
        approvals.check(
            plan.decisions,
            await self._waiting(plan),
            now=datetime.now(UTC),
            ttl=self.policy.approval_ttl,
        )

    async def _abandon_record(self, plan: RunPlan, exc: BaseException) -> None:
        """A run admitted in history whose stream could not start: finished FAILED at once
        (not left running until its lease expires), with what the client is told."""
        log.warning("the run's event log failed as it started: %s", exc)
        with contextlib.suppress(Exception):
            await self.peers.finish_run(
                plan.owner,
                convert.finish_run_request(
                    plan, RunState.FAILED, code="UNAVAILABLE", message=NOT_STARTED_MESSAGE
                ),
            )

    async def _begin(
        self, plan: RunPlan, lifecycle: RunLifecycle
    ) -> history_service_pb2.BeginRunResponse | None:
        """BeginRun's answer; None when it failed (the run's lifecycle records why, and the
        run ends with RUN_ERROR). A busy thread (strategy reject) raises."""
        try:
            return await self.peers.begin_run(plan.owner, self._begin_request(plan))
        except FailedPrecondition as exc:
            if exc.reason == "THREAD_BUSY":
                raise
            lifecycle.refuse(exc)
        except InvalidArgument as exc:
            if exc.reason in (INTERRUPT_ANSWERED, INTERRUPT_BUSY):
                raise _as_resume_field(exc) from None
            lifecycle.refuse(exc)
        except Exception as exc:
            lifecycle.refuse(exc)
        return None

    def _cancel_ahead(self, run: ActiveRun, ahead_run_ids: Sequence[str]) -> None:
        """An interrupt/rollback run was admitted: history marked the runs ahead of it
        cancel_requested. Those this replica runs stop now (not at their next renewal);
        another replica's learn it from history (renewal, or FinishRun's answer)."""
        for run_id in ahead_run_ids:
            ahead = self.active(run.plan.owner, run_id)
            if ahead is not None:
                self._cancel_local(ahead)

    @staticmethod
    def _cancel_local(run: ActiveRun) -> None:
        if run.lifecycle.request_cancel() and run.steps is not None:
            run.steps.cancel()

    @staticmethod
    def _lose_lease(run: ActiveRun) -> None:
        """History gave the run's lease up: it stops, and records nothing more."""
        if run.lifecycle.lose_lease() and run.steps is not None:
            run.steps.cancel()

    async def cancel(self, owner: str, run_id: str) -> tuple[bool, str, str]:
        """Cancel a run held by any replica: (ended or ending cancelled, state, thread id).
        Harmless when repeated; FAILED_PRECONDITION when the run already ended otherwise."""
        run = self.active(owner, run_id)
        if run is not None:
            self._cancel_local(run)
            # Wait (bounded) for the run to store what it produced and end its stream.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.shield(run.done.wait()), self.rpc_timeout_seconds * 0.8
                )
            state = run.lifecycle.state
            if state in TERMINAL_RUN_STATES and state is not RunState.CANCELLED:
                raise _already_finished(state)
            return True, state.value, run.plan.thread_id
        # Held by another replica (or finished): record the request where every replica
        # looks; the holder stops the run at its next lease renewal.
        record = await self.peers.request_cancellation(owner, run_id)
        deadline = time.monotonic() + self.policy.cancel_wait_seconds
        state = convert.record_state(record.state)
        while state not in TERMINAL_RUN_STATES and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            record = await self.peers.get_run(owner, run_id)
            state = convert.record_state(record.state)
        if state in TERMINAL_RUN_STATES and state is not RunState.CANCELLED:
            raise _already_finished(state)
        return True, state.value, record.thread_id

    def start_sweeper(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="lease sweep")

    async def _sweep_forever(self) -> None:
        while True:
            # Jitter: replicas started together do not sweep in lockstep.
            await asyncio.sleep(self.policy.sweep_seconds * random.uniform(0.8, 1.2))
            try:
                await self.sweep()
            except Exception as exc:
                log.warning("lease sweep failed: %s", core.as_domain_error(exc).message)

    async def sweep(self) -> int:
        """Mark runs whose holder stopped renewing their lease failed (history hands each to
        one sweeper) and end their event logs with RUN_ERROR, so followers stop."""
        expired = await self.peers.expire_leases()
        for record in expired:
            await self._end_expired(record)
        return len(expired)

    async def _end_expired(self, record: history_service_pb2.Run) -> None:
        key = core.event_log_key(record.owner_id, record.id)
        local = self._active.get(key)
        if local is not None:
            # Ours, but history gave up on us (a long pause): stop it, write nothing more
            # to history; it ends its own stream.
            self._lose_lease(local)
            return
        log.warning(
            "run lease expired; the run is marked failed",
            extra={"fields": {"run_id": record.id, "thread_id": record.thread_id}},
        )
        try:
            entries, closed = await self.event_log.read(key, 0)
        except KeyError:
            return  # no log (it died before its first event, or the log was lost)
        if closed:
            return
        last = entries[-1][0] if entries else 0
        ended = entries and run_event_pb2.RunEvent.FromString(entries[-1][1]).WhichOneof(
            "payload"
        ) in ("run_finished", "run_error")
        try:
            if ended:
                await self.event_log.close(key)
            else:
                event = convert.run_error(LEASE_EXPIRED, core.LEASE_EXPIRED_MESSAGE)
                event.run_id, event.thread_id = record.id, record.thread_id
                event.sequence = last + 1
                event.timestamp_ms = time.time_ns() // 1_000_000
                # One write: the error and the end (which seals the log against its holder).
                await self.event_log.append(
                    key, [(last + 1, event.SerializeToString())], close=True
                )
        except Exception:
            # The holder came back and wrote first, or the log is unavailable: it is ended
            # by whoever wrote, or readers get UNAVAILABLE and history has the record.
            log.warning("cannot end the expired run's event log", extra={"fields": {"key": key}})

    async def aclose(self, grace_seconds: float) -> None:
        """Let running runs finish within the grace period, cancel the rest."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        runs = list(self._active.values())
        if runs:
            waiters = [asyncio.ensure_future(r.done.wait()) for r in runs]
            await asyncio.wait(waiters, timeout=grace_seconds)
            for waiter in waiters:
                waiter.cancel()
        for run in list(self._active.values()):
            self._cancel_local(run)
        runs = list(self._active.values())
        if runs:
            waiters = [asyncio.ensure_future(r.done.wait()) for r in runs]
            await asyncio.wait(waiters, timeout=self.rpc_timeout_seconds)
            for waiter in waiters:
                waiter.cancel()
        for run in list(self._active.values()):
            if run.task is not None:
                run.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await run.task

    # ---- the pipeline ---------------------------------------------------------------

    async def _emit(self, run: ActiveRun, event: run_event_pb2.RunEvent) -> None:
        convert.observe(run.spans, event)
        run.writer.emit(event)
        await run.writer.pace()

    async def _execute(
        self, run: ActiveRun, begin: history_service_pb2.BeginRunResponse | None
    ) -> None:
        run_token = run_id_var.set(run.plan.run_id)
        thread_token = thread_id_var.set(run.plan.thread_id)
        try:
            await self._pipeline(run, begin)
        except asyncio.CancelledError:
            # Stopped hard (shutdown past its grace): still end the stream for followers.
            if not run.lifecycle.ended:
                run.lifecycle.end(RunState.FAILED)
                run.writer.emit(
                    convert.run_error("UNAVAILABLE", "the run was stopped by a shutdown")
                )
            raise
        except Exception:
            log.exception("run pipeline failed")
            if not run.lifecycle.ended:
                run.lifecycle.end(RunState.FAILED)
                run.writer.emit(convert.run_error(*core.user_error(Internal("internal error"))))
        finally:
            if run.heartbeat is not None:
                run.heartbeat.cancel()
            try:
                await run.writer.close()
            finally:
                self._active.pop(run.key, None)
                self.in_flight.release(run.plan.owner)
                metrics.run_ended(run.plan.profile.name, run.lifecycle.state.value.upper())
                run.done.set()
                run_id_var.reset(run_token)
                thread_id_var.reset(thread_token)

    async def _pipeline(
        self, run: ActiveRun, begin: history_service_pb2.BeginRunResponse | None
    ) -> None:
        plan, lifecycle = run.plan, run.lifecycle  # RUN_STARTED is stored already (start)
        await self.gate.enter()
        if begin is None and lifecycle.refusal is None:
            begin = await self._begin(plan, lifecycle)
        if begin is None:
            await self._fail(run, lifecycle.refusal or Internal("the run was not admitted"))
            return
        state = convert.record_state(begin.run.state)
        if state in TERMINAL_RUN_STATES:
            await self._replay_end(run, begin.run)
            return
        lifecycle.admit(state)
        run.heartbeat = asyncio.create_task(self._keep_lease(run), name=f"lease {plan.run_id}")
        if plan.multitask_strategy in core.CANCELLING_STRATEGIES:
            self._cancel_ahead(run, begin.run.ahead_run_ids)
        if state is RunState.QUEUED:
            ahead = {"aheadRunIds": list(begin.run.ahead_run_ids)}
            await self._emit(run, convert.custom(core.QUEUED_EVENT, ahead))
            try:
                turn = await self._wait_turn(run)
            except Exception as exc:
                await self._fail(run, exc)
                return
            if turn is None:
                await self._cancelled(run)
                return
            if convert.record_state(turn.run.state) in TERMINAL_RUN_STATES:
                await self._replay_end(run, turn.run)
                return
            lifecycle.take_turn()
            begin = turn
        context = convert.context_without_inputs(begin.context_messages, plan)
        horizon = 0
        if plan.profile.executor is ExecutorKind.MEMORY:
            try:
                context, horizon = await self._owner_window(plan)
            except Exception as exc:
                await self._fail(run, exc)
                return

        steps = asyncio.create_task(self._steps(run, context, horizon), name=f"steps {plan.run_id}")
        run.steps = steps
        if lifecycle.stopping:
            steps.cancel()
        try:
            result = await steps
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            if lifecycle.lease_lost:
                await self._lost(run)
                return
            if not lifecycle.cancelling:
                raise
            await self._cancelled(run)
            return
        except Exception as exc:
            await self._fail(run, exc)
            return
        await self._succeeded(run, result)

    async def _wait_turn(self, run: ActiveRun) -> history_service_pb2.BeginRunResponse | None:
        """Ask history, every poll interval, whether the queued run may start (the same
        BeginRun again). None when it was cancelled while it waited."""
        request = self._begin_request(run.plan)
        while True:
            if run.lifecycle.cancelling:
                return None
            await asyncio.sleep(self.policy.queue_poll_seconds)
            if run.lifecycle.cancelling:
                return None
            turn = await self.peers.begin_run(run.plan.owner, request)
            state = convert.record_state(turn.run.state)
            if turn.run.cancel_requested and state not in TERMINAL_RUN_STATES:
                return None
            if state is not RunState.QUEUED:
                return turn

    async def _keep_lease(self, run: ActiveRun) -> None:
        """Renew the run's lease; bring back a cancel recorded by any replica; stop the run
        if history gave it up (its lease expired while this replica could not renew)."""
        request = history_service_pb2.RenewRunLeaseRequest(
            run_id=run.plan.run_id,
            lease_holder=self.holder,
            lease_seconds=self.policy.lease_seconds,
        )
        while True:
            await asyncio.sleep(self.policy.renew_seconds)
            try:
                renewed = await self.peers.renew_lease(run.plan.owner, request)
            except Exception as exc:
                log.warning("cannot renew the run's lease: %s", core.as_domain_error(exc).message)
                continue
            if not renewed.held:
                # Expected once the run's end is being recorded (the lifecycle ignores it).
                self._lose_lease(run)
                return
            if renewed.run.cancel_requested:
                self._cancel_local(run)

    async def _lost(self, run: ActiveRun) -> None:
        """History marked the run failed (lease expired): end the stream, record nothing."""
        for kind, ident in run.spans.closing():
            await self._emit(run, convert.closing_event(kind, ident))
        run.lifecycle.end(RunState.FAILED)
        await self._emit(run, convert.run_error(LEASE_EXPIRED, core.LEASE_EXPIRED_MESSAGE))

    async def _replay_end(self, run: ActiveRun, record: history_service_pb2.Run) -> None:
        """A retried StartRun of a run that already ended: its end, nothing re-run. Its
        lifecycle ends failed whatever the record says, as it always has: the metrics count
        it failed, and a cancel of it is refused."""
        run.lifecycle.end(RunState.FAILED)
        await self._emit(run, convert.end_of(record))

    async def _owner_window(self, plan: RunPlan) -> tuple[list[message_pb2.Message], int]:
        """The memory agent's context: the owner's chat messages (every thread) in the
        profile's window and the run's time zone, oldest first; and the first page's
        sequence horizon (every message numbered up to it is among them, if in the window)."""
        messages: list[message_pb2.Message] = []
        token = ""
        horizon: int | None = None
        while True:
            page = await self.peers.load_context(
                plan.owner, convert.owner_window_request(plan, token)
            )
            messages.extend(page.messages)
            horizon = page.sequence_horizon if horizon is None else horizon
            token = page.next_page_token
            if not token:
                return messages, horizon

    async def _steps(
        self, run: ActiveRun, context: list[message_pb2.Message], horizon: int = 0
    ) -> executor_service_pb2.StepResult:
        plan = run.plan
        server_tools, client_tools = plan.server_tools, plan.client_tools
        result: executor_service_pb2.StepResult | None = None
        for step in core.plan_steps(plan.profile):
            await self._emit(run, convert.step_started(step))
            if step == core.ROUTER_STEP:
                decision = await self.peers.route(
                    plan.owner, convert.route_request(plan, context, server_tools, client_tools)
                )
                recorded = convert.route_message(decision, plan)
                if recorded is not None:
                    run.outputs.append(recorded)
                server_tools = core.narrow(server_tools, decision.tool_names)
                chosen = set(core.narrow([t.name for t in client_tools], decision.tool_names))
                client_tools = tuple(t for t in client_tools if t.name in chosen)
            else:
                request = convert.execute_request(
                    plan,
                    context,
                    server_tools,
                    client_tools,
                    reply_message_id=uuid.uuid4().hex,
                    decisions=self._settled(plan, context),
                )
                request.sequence_horizon = horizon
                result = await self._executor_step(run, request)
            await self._emit(run, convert.step_finished(step))
        assert result is not None  # every plan ends with an executor step
        return result

    def _settled(
        self, plan: RunPlan, context: Sequence[message_pb2.Message]
    ) -> list[approvals.Decision]:
        """The decision on every approval waiting in the context (the worker's only)."""
        if plan.profile.executor is not ExecutorKind.WORKER:
            return []
        msgs = [msg_from_pb(m, f"context[{i}]") for i, m in enumerate(context)]
        return approvals.settle(
            plan.decisions,
            approvals.pending_approvals(msgs),
            now=datetime.now(UTC),
            ttl=self.policy.approval_ttl,
            owner=plan.owner,
        )

    async def _executor_step(
        self, run: ActiveRun, request: executor_service_pb2.ExecuteRequest
    ) -> executor_service_pb2.StepResult:
        """The executor step; tried again, a bounded number of times, when its replica was
        unavailable before the step produced anything (core.retries_executor_step)."""
        attempt = 1
        while True:
            progress = _StepProgress()
            try:
                return await self._execute_once(run, request, progress)
            except Unavailable as exc:
                if not core.retries_executor_step(exc, progress.produced, attempt):
                    raise
                log.warning(
                    "the executor was unavailable before the step produced anything; trying again",
                    extra={"fields": {"attempt": attempt, "error": exc.message}},
                )
                await self.peers.executor_reconnected(core.executor_retry_delay(attempt))
                attempt += 1

    async def _execute_once(
        self,
        run: ActiveRun,
        request: executor_service_pb2.ExecuteRequest,
        progress: _StepProgress,
    ) -> executor_service_pb2.StepResult:
        """One executor call: relay its events, collect its messages and denials."""
        result: executor_service_pb2.StepResult | None = None
        async for item in self.peers.execute(run.plan.owner, request):
            which = item.WhichOneof("item")
            if which == "event":
                payload = item.event.WhichOneof("payload")
                if payload in core.RELAYED_PAYLOADS:
                    progress.produced = True
                    if payload in _STREAMED_OUTPUT:
                        run.turn.stream(getattr(item.event, payload).delta)
                    await self._emit(run, item.event)
            elif which == "turn_usage":
                run.turn.report(usage_from_pb(item.turn_usage))
            elif which == "message":
                if item.message.HasField("usage"):
                    run.turn.ended()
                if item.message.kind == message_pb2.MESSAGE_KIND_MEMORY_RECALL:
                    # What the step recalled, for the audit: it streamed nothing, so the
                    # step may still be tried again, and the new attempt's record replaces it.
                    run.outputs = [m for m in run.outputs if m.id != item.message.id]
                else:
                    progress.produced = True
                run.outputs.append(convert.stamp_output(item.message, run.plan))
            elif which == "tool_denial":
                progress.produced = True
                run.denials.append(convert.tool_denial(item.tool_denial))
            elif which == "result":
                progress.produced = True
                result = item.result
        if result is None:
            raise Internal("the executor ended its step without a result")
        return result

    async def _finish(
        self,
        run: ActiveRun,
        state: RunState,
        outputs: list[Msg],
        code: str = "",
        message: str = "",
    ) -> history_service_pb2.Run:
        """Finish the record; history's answer is the run's real end (a run whose cancel was
        requested before it finished is recorded cancelled, whatever `state` asked). A model
        turn cut short (a cancel, an error) is in its usage."""
        run.lifecycle.finish()
        request = convert.finish_run_request(
            run.plan, state, outputs, run.denials, code, message, run.turn.cut_short()
        )
        response = await self.peers.finish_run(run.plan.owner, request)
        return response.run

    async def _succeeded(self, run: ActiveRun, result: executor_service_pb2.StepResult) -> None:
        pending = list(result.pending_tool_call_ids)
        asked = convert.approvals_of(result, run.outputs, self.policy.approval_ttl)
        state = RunState.INTERRUPTED if pending or asked else RunState.SUCCEEDED
        try:
            record = await self._finish(run, state, run.outputs)
        except Exception as exc:
            await self._fail(run, exc)
            return
        if convert.record_state(record.state) is RunState.CANCELLED:
            # An interrupt/rollback run was admitted before this one finished: history
            # recorded it cancelled (under rollback its messages are hidden), so is its end.
            run.lifecycle.end(RunState.CANCELLED)
            usage = record.usage if record.HasField("usage") else None
            await self._emit(run, convert.run_end(RunState.CANCELLED, usage=usage))
            return
        await self._index_conversation(run)
        run.lifecycle.end(state)
        # The record's usage (its output messages' sum, history) is what GET .../runs/{id}
        # shows; the step's own is the fallback of a history that recorded none.
        usage = record.usage if record.HasField("usage") else result.usage
        await self._emit(run, convert.run_end(state, pending, usage, asked))

    async def _index_conversation(self, run: ActiveRun) -> None:
        """A chat run whose messages history kept: they join the owner's conversation index
        (conversation recall), before its end is streamed, so the next run can find them.
        Best effort: an index that missed them costs recall, never the run. Indexed after
        FinishRun, whose answer says the messages stay (a run rolled back is recorded
        cancelled and never reaches here)."""
        said = core.recallable(run.plan, [*run.plan.inputs, *run.outputs])
        if not said:
            return
        try:
            await self.peers.index_conversation(
                run.plan.owner, convert.index_conversation_request(run.plan.thread_id, said)
            )
        except Exception as exc:
            log.warning(
                "the run's messages were not indexed for conversation recall: %s",
                core.as_domain_error(exc).message,
            )

    async def _fail(self, run: ActiveRun, exc: BaseException) -> None:
        error = core.as_domain_error(exc)
        if error is not exc and not isinstance(exc, TimeoutError):
            log.error("run failed", exc_info=exc)
        else:
            log.warning("run failed: %s", error.message)
        code, message = core.user_error(error)
        outputs = run.outputs + core.partial_replies(run.spans, run.outputs, run.plan, "error")
        usage = None
        try:
            record = await self._finish(run, RunState.FAILED, outputs, code, message)
            usage = record.usage if record.HasField("usage") else None
        except Exception as finish_exc:
            reason = core.as_domain_error(finish_exc).message
            log.warning("cannot record the failed run: %s", reason)
        run.lifecycle.end(RunState.FAILED)
        await self._emit(run, convert.run_error(code, message, usage))

    async def _cancelled(self, run: ActiveRun) -> None:
        for kind, ident in run.spans.closing():
            await self._emit(run, convert.closing_event(kind, ident))
        outputs = run.outputs + core.partial_replies(
            run.spans, run.outputs, run.plan, "interrupted"
        )
        try:
            record = await self._finish(run, RunState.CANCELLED, outputs)
        except Exception as exc:
            await self._fail(run, exc)
            return
        run.lifecycle.end(RunState.CANCELLED)
        usage = record.usage if record.HasField("usage") else None
        await self._emit(run, convert.run_end(RunState.CANCELLED, usage=usage))


LEASE_EXPIRED = core.LEASE_EXPIRED
# StartRun refused because the run's event log failed before its first event was stored.
NOT_STARTED = "RUN_NOT_STARTED"
NOT_STARTED_MESSAGE = (
    "the run's event stream is unavailable; the run was not started: send it again later"
)


# The events whose deltas are a model turn's output (counted if the turn is cut short).
_STREAMED_OUTPUT = frozenset(
    {"text_message_content", "tool_call_args", "reasoning_message_content"}
)


@dataclass
class _StepProgress:
    """Whether an executor call produced anything the run kept (an event relayed to the
    stream, a message, a tool denial, its result)."""

    produced: bool = False


def _already_finished(state: RunState) -> DomainError:
    return FailedPrecondition(
        f"the run already finished ({state.value}); there is nothing to cancel",
        reason="RUN_ALREADY_FINISHED",
        metadata={"state": state.value},
    )


# History's reasons (BeginRun) for a run whose approval another run answered, and for a run
# answering approvals while its thread has a run in progress.
INTERRUPT_ANSWERED = "INTERRUPT_ANSWERED"
INTERRUPT_BUSY = "INTERRUPT_BUSY"


def _as_resume_field(exc: InvalidArgument) -> InvalidArgument:
    """History's refusal of answered_interrupt_ids[i], as the caller wrote it: resume[i]."""
    field, why = exc.violations[0] if exc.violations else ("", exc.message)
    index = field.removeprefix("answered_interrupt_ids[").removesuffix("]")
    where = f"resume[{index}].interruptId" if index.isdigit() else "resume"
    return InvalidArgument(where, why, reason=exc.reason)


def _run_exists() -> AlreadyExists:
    return AlreadyExists(
        "a run with this run_id exists; follow it with StreamRun", reason="RUN_EXISTS"
    )
