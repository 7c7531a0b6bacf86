"""The worker agent: general conversation and tool orchestration, as the bounded tool loop
of services.executor.agents.loop: prepare, then turns of reason (one model turn) and act
(route the turn's calls and run those that run here) until a turn calls no tool, calls a
client-side tool or one that waits for a person's approval, or the rounds run out.

A step that carries decisions on the thread's pending approvals runs (or refuses) those
calls first: their results follow the calls, before the new input.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

from services.executor import core
from services.executor.agents.base import StepRequest
from services.executor.agents.loop import (
    Acted,
    Context,
    Offer,
    ToolLoop,
    Turn,
    denied,
    denied_result,
    run_tool,
)
from services.executor.events import StepItem, StepResult
from services.executor.toolcalls import ToolCallTracker
from services.executor.tools import ToolContext
from shared.approvals import (
    NOT_RUN,
    PERSON_DENIALS,
    DecisionKind,
    approval_record,
    pending_approvals,
)
from shared.approvals import RUNS as APPROVAL_RUNS
from shared.domain import MessageKind
from shared.messages import (
    Msg,
    ToolCallBlock,
    ToolCallState,
    ToolResultBlock,
    ToolResultState,
    Usage,
    assistant,
    new_id,
    tool_result_message_id,
)
from shared.tools import arguments_digest, authorize


class WorkerAgent(ToolLoop):
    async def run(self, step: StepRequest) -> AsyncGenerator[StepItem, None]:
        self.tools.refresh()
        offer = self.offer(step)
        prepared = await self.prepare(
            step,
            offer,
            queries=[step.input.text],
            # The thread's messages the step sends are in its context already.
            in_context=[m.id for m in (*step.context, step.input)],
            pinned=[step.input],
        )
        if prepared.recalled is not None:
            yield prepared.recalled
        tool_context = ToolContext(step.owner, step.run_id, step.thread_id, step.time_zone)
        history = (*prepared.leading, *step.context)
        if step.decisions:
            decided: list[Msg] = []
            async for item in self._decided(step, offer, tool_context, decided):
                yield item
            # The decided calls' results follow the calls, before the new input.
            history = (*history, *decided)
        # This step's input and turns: always sent (the thread's earlier messages fit around them).
        context = Context(history, [step.input], prepared.budget)
        usage = Usage()
        for turn_no in range(self.max_tool_rounds + 1):
            last = turn_no == self.max_tool_rounds
            turn = Turn(core.turn_message_id(step.reply_message_id, turn_no))
            offered = () if last else offer.specs
            async for item in self.reason(prepared.call, context, offered, turn):
                yield item
            usage = usage + turn.used
            routed = self.route(offer, turn, last)
            message = turn.message(routed)
            yield message
            if not routed:
                yield StepResult(turn.finished_reason or "stop", usage)
                return
            context.pinned.append(message)
            acted = Acted()
            async for item in self.act(message, routed, turn, tool_context, acted):
                yield item
            if acted.results is not None:
                context.pinned.append(acted.results)
            if acted.pending or acted.asked:
                yield StepResult("tool_calls", usage, tuple(acted.pending), tuple(acted.asked))
                return
            if last:
                yield StepResult("max_tool_iterations", usage)
                return

    async def _decided(
        self,
        step: StepRequest,
        offer: Offer,
        context: ToolContext,
        out: list[Msg],
    ) -> AsyncIterator[StepItem]:
        """Run the approved (or edited) calls the thread was waiting on, refuse the others;
        their results are one message, which keeps each decision and who made it."""
        waiting = pending_approvals(step.context)
        # Their calls streamed in the run that asked: each gets its RESULT only.
        tracker = ToolCallTracker()
        results: list[ToolResultBlock] = []
        records: list[dict[str, str]] = []
        results_id = new_id()
        for d in step.decisions:
            p = waiting.get(d.tool_call_id)
            if p is None:
                continue  # answered meanwhile (the orchestrator checked it was waiting)
            arguments = d.arguments if d.kind is DecisionKind.EDIT else p.arguments
            call = ToolCallBlock(p.tool_call_id, p.tool_name, arguments, ToolCallState.ALLOWED)
            tracker.already_emitted(call.id, call.name)
            if d.kind in APPROVAL_RUNS:
                # Still within the policy now (the profile or the registry may have changed).
                reason = authorize(call.name, offer.declared, offer.profile, offer.registered)
                if reason is not None:
                    yield denied(call, reason)
                    result = denied_result(call, reason)
                else:
                    result = await run_tool(self.tools, call, context, self.tool_timeout_seconds)
            else:
                yield denied(call, PERSON_DENIALS[d.kind])
                text = NOT_RUN[d.kind]
                result = ToolResultBlock(call.id, call.name, text, ToolResultState.DENIED)
            records.append(approval_record(d, call.name, arguments_digest(arguments)))
            event_id = tool_result_message_id(results_id, len(results))
            for event in tracker.result(call.id, event_id, result.text):
                yield event
            results.append(result)
        if results:
            message = assistant(
                results,
                id=results_id,
                kind=MessageKind.TOOL_RESULT,
                metadata={"approvals": records},
            )
            out.append(message)
            yield message
