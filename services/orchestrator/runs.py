"""Runs: each executes in a background task of its own, so a caller that goes away does not
stop it; its events go through its RunEventWriter into the event log, which every reader
(StartRun's caller, StreamRun's) follows.

The pipeline (ARCHITECTURE.md §2): history BeginRun -> RUN_STARTED -> [router step] ->
executor step -> history FinishRun -> RUN_FINISHED; on failure FinishRun FAILED then
RUN_ERROR, and nothing after it. A cancel stops the steps (the executor call, and with it
the model stream), closes what the stream had open, stores what was produced as
interrupted, finishes the record CANCELLED and ends with RUN_FINISHED outcome cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from enum import StrEnum

from agentmesh.executor.v1 import executor_service_pb2
from agentmesh.history.v1 import history_service_pb2
from agentmesh.type.v1 import message_pb2, run_event_pb2

from services.orchestrator import convert, core
from services.orchestrator.clients import Peers
from services.orchestrator.core import OpenSpans, RunPlan
from services.orchestrator.writer import RunEventWriter
from shared.domain import ExecutorKind
from shared.errors import AlreadyExists, Internal, NotFound
from shared.eventlog import EventLog
from shared.logs import run_id_var, thread_id_var

log = logging.getLogger("agentmesh.orchestrator.runs")

# Larger than any sequence number: reading after it only tells whether a log exists.
_PAST_THE_END = 2**53


class Outcome(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"
    FAILED = "failed"


@dataclass
class ActiveRun:
    plan: RunPlan
    key: str
    writer: RunEventWriter
    task: asyncio.Task[None] | None = None
    # The cancellable part of the run: router and executor steps.
    steps: asyncio.Task[executor_service_pb2.StepResult] | None = None
    cancel_requested: bool = False
    outcome: Outcome = Outcome.RUNNING
    done: asyncio.Event = field(default_factory=asyncio.Event)
    spans: OpenSpans = field(default_factory=OpenSpans)
    # Finished messages of the steps, stamped for history.
    outputs: list[message_pb2.Message] = field(default_factory=list)
    # Tool calls the executor refused, audited with the run's record.
    denials: list[history_service_pb2.ToolDenial] = field(default_factory=list)


class RunManager:
    def __init__(self, peers: Peers, event_log: EventLog, *, rpc_timeout_seconds: float) -> None:
        self.peers = peers
        self.event_log = event_log
        self.rpc_timeout_seconds = rpc_timeout_seconds
        self._active: dict[str, ActiveRun] = {}
        self._reserved: set[str] = set()

    def active(self, owner: str, run_id: str) -> ActiveRun | None:
        return self._active.get(core.event_log_key(owner, run_id))

    async def _log_exists(self, key: str) -> bool:
        try:
            await self.event_log.read(key, _PAST_THE_END)
        except KeyError:
            return False
        return True

    async def start(self, plan: RunPlan) -> ActiveRun:
        key = core.event_log_key(plan.owner, plan.run_id)
        if key in self._active or key in self._reserved:
            raise _run_exists()
        self._reserved.add(key)
        try:
            if await self._log_exists(key):
                raise _run_exists()
        finally:
            self._reserved.discard(key)
        run = ActiveRun(
            plan, key, RunEventWriter(self.event_log, key, plan.run_id, plan.thread_id)
        )
        self._active[key] = run
        run.task = asyncio.create_task(self._execute(run), name=f"run {plan.run_id}")
        return run

    async def cancel(self, owner: str, run_id: str) -> bool:
        """Cancel a run; whether it ended (or is ending) cancelled. Harmless when repeated."""
        run = self.active(owner, run_id)
        if run is None:
            return await self._ended_cancelled(core.event_log_key(owner, run_id))
        if not run.cancel_requested:
            run.cancel_requested = True
            if run.steps is not None:
                run.steps.cancel()
        # Wait (bounded) for the run to store what it produced and end its stream.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(run.done.wait()), self.rpc_timeout_seconds * 0.8)
        return run.outcome in (Outcome.CANCELLED, Outcome.RUNNING)

    async def _ended_cancelled(self, key: str) -> bool:
        try:
            entries, _closed = await self.event_log.read(key, 0)
        except KeyError:
            raise NotFound("run not found") from None
        if not entries:
            return False
        last = run_event_pb2.RunEvent.FromString(entries[-1][1])
        return (
            last.WhichOneof("payload") == "run_finished"
            and last.run_finished.outcome == run_event_pb2.RUN_OUTCOME_CANCELLED
        )

    async def aclose(self, grace_seconds: float) -> None:
        """Let running runs finish within the grace period, cancel the rest."""
        runs = list(self._active.values())
        if runs:
            waiters = [asyncio.ensure_future(r.done.wait()) for r in runs]
            await asyncio.wait(waiters, timeout=grace_seconds)
            for waiter in waiters:
                waiter.cancel()
        for run in list(self._active.values()):
            await self.cancel(run.plan.owner, run.plan.run_id)
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

    async def _execute(self, run: ActiveRun) -> None:
        run_token = run_id_var.set(run.plan.run_id)
        thread_token = thread_id_var.set(run.plan.thread_id)
        try:
            await self._pipeline(run)
        except asyncio.CancelledError:
            # Stopped hard (shutdown past its grace): still end the stream for followers.
            if run.outcome is Outcome.RUNNING:
                run.writer.emit(convert.run_error("UNAVAILABLE", "the run was stopped by a shutdown"))
                run.outcome = Outcome.FAILED
            raise
        except Exception:
            log.exception("run pipeline failed")
            if run.outcome is Outcome.RUNNING:
                run.writer.emit(convert.run_error(*core.user_error(Internal("internal error"))))
                run.outcome = Outcome.FAILED
        finally:
            try:
                await run.writer.close()
            finally:
                self._active.pop(run.key, None)
                run.done.set()
                run_id_var.reset(run_token)
                thread_id_var.reset(thread_token)

    async def _pipeline(self, run: ActiveRun) -> None:
        plan = run.plan
        try:
            begin = await self.peers.begin_run(plan.owner, convert.begin_run_request(plan))
        except Exception as exc:
            await self._emit(run, convert.run_started())
            await self._fail(run, exc)
            return
        await self._emit(run, convert.run_started())
        context = convert.context_without_inputs(begin.context_messages, plan)
        if plan.profile.executor is ExecutorKind.MEMORY:
            try:
                context = await self._owner_window(plan)
            except Exception as exc:
                await self._fail(run, exc)
                return

        steps = asyncio.create_task(self._steps(run, context), name=f"steps {plan.run_id}")
        run.steps = steps
        if run.cancel_requested:
            steps.cancel()
        try:
            result = await steps
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not run.cancel_requested or (current is not None and current.cancelling()):
                raise
            await self._cancelled(run)
            return
        except Exception as exc:
            await self._fail(run, exc)
            return
        await self._succeeded(run, result)

    async def _owner_window(self, plan: RunPlan) -> list[message_pb2.Message]:
        """The memory agent's context: the owner's chat messages (every thread) in the
        profile's window and the run's time zone, oldest first."""
        messages: list[message_pb2.Message] = []
        token = ""
        while True:
            page = await self.peers.load_context(
                plan.owner, convert.owner_window_request(plan, token)
            )
            messages.extend(page.messages)
            token = page.next_page_token
            if not token:
                return messages

    async def _steps(
        self, run: ActiveRun, context: list[message_pb2.Message]
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
                server_tools = core.narrow(server_tools, decision.tool_names)
                chosen = set(core.narrow([t.name for t in client_tools], decision.tool_names))
                client_tools = tuple(t for t in client_tools if t.name in chosen)
            else:
                request = convert.execute_request(
                    plan, context, server_tools, client_tools, reply_message_id=uuid.uuid4().hex
                )
                async for item in self.peers.execute(plan.owner, request):
                    which = item.WhichOneof("item")
                    if which == "event":
                        if item.event.WhichOneof("payload") in core.RELAYED_PAYLOADS:
                            await self._emit(run, item.event)
                    elif which == "message":
                        run.outputs.append(convert.stamp_output(item.message, plan))
                    elif which == "tool_denial":
                        run.denials.append(convert.tool_denial(item.tool_denial))
                    elif which == "result":
                        result = item.result
                if result is None:
                    raise Internal("the executor ended its step without a result")
            await self._emit(run, convert.step_finished(step))
        assert result is not None  # every plan ends with an executor step
        return result

    async def _finish(
        self,
        run: ActiveRun,
        state: history_service_pb2.RunState.ValueType,
        outputs: list[message_pb2.Message],
        code: str = "",
        message: str = "",
    ) -> None:
        await self.peers.finish_run(
            run.plan.owner,
            history_service_pb2.FinishRunRequest(
                run_id=run.plan.run_id,
                state=state,
                output_messages=outputs,
                error_code=code,
                error_message=message,
                tool_denials=run.denials,
            ),
        )

    async def _succeeded(self, run: ActiveRun, result: executor_service_pb2.StepResult) -> None:
        pending = list(result.pending_tool_call_ids)
        state = (
            history_service_pb2.RUN_STATE_INTERRUPTED
            if pending
            else history_service_pb2.RUN_STATE_SUCCEEDED
        )
        try:
            await self._finish(run, state, run.outputs)
        except Exception as exc:
            await self._fail(run, exc)
            return
        outcome = (
            run_event_pb2.RUN_OUTCOME_INTERRUPT if pending else run_event_pb2.RUN_OUTCOME_SUCCESS
        )
        run.outcome = Outcome.INTERRUPTED if pending else Outcome.SUCCEEDED
        await self._emit(run, convert.run_finished(outcome, pending, result.usage))

    async def _fail(self, run: ActiveRun, exc: BaseException) -> None:
        error = core.as_domain_error(exc)
        if error is not exc and not isinstance(exc, TimeoutError):
            log.error("run failed", exc_info=exc)
        else:
            log.warning("run failed: %s", error.message)
        code, message = core.user_error(error)
        outputs = run.outputs + convert.partial_replies(run.spans, run.outputs, run.plan, "error")
        try:
            await self._finish(run, history_service_pb2.RUN_STATE_FAILED, outputs, code, message)
        except Exception as finish_exc:
            log.warning("cannot record the failed run: %s", core.as_domain_error(finish_exc).message)
        run.outcome = Outcome.FAILED
        await self._emit(run, convert.run_error(code, message))

    async def _cancelled(self, run: ActiveRun) -> None:
        for payload, ident in run.spans.closing():
            await self._emit(run, convert.closing_event(payload, ident))
        outputs = run.outputs + convert.partial_replies(
            run.spans, run.outputs, run.plan, "interrupted"
        )
        try:
            await self._finish(run, history_service_pb2.RUN_STATE_CANCELLED, outputs)
        except Exception as exc:
            await self._fail(run, exc)
            return
        run.outcome = Outcome.CANCELLED
        await self._emit(run, convert.run_finished(run_event_pb2.RUN_OUTCOME_CANCELLED))


def _run_exists() -> AlreadyExists:
    return AlreadyExists(
        "a run with this run_id exists; follow it with StreamRun", reason="RUN_EXISTS"
    )
