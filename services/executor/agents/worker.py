"""The worker agent: general conversation and tool orchestration as a bounded tool loop.

Each model turn streams text and tool calls. The model is offered only the run's effective
server-side tools (shared.tools.effective_tools) and its client-side tools. Calls that
shared.tools.authorize allows run here and their results feed the next turn; a call to a
client-side tool ends the step (the run finishes with outcome interrupt); any other call is
not executed: the model gets an error result and the step reports a ToolDenied for the audit.
After `max_tool_rounds` rounds of tool results, one last turn is offered no tools, so the
step always ends.

Each turn's messages fit the model card's context (services.executor.context): the oldest
of the thread go first. Should the endpoint still find them too long (the count is an
estimate), the turn is tried once more, before anything streamed, within half the budget.
A turn whose endpoint reports no usage gets an estimated one (shared.model.tokens).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace

from services.executor import agent_config, core, recall
from services.executor import context as budget
from services.executor.agents.base import StepRequest
from services.executor.core import ToolRoute
from services.executor.events import (
    StepItem,
    StepResult,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallResult,
    ToolCallStart,
    ToolDenied,
    TurnUsage,
)
from services.executor.tools import (
    ToolContext,
    ToolError,
    ToolRegistry,
    requires_approval,
    timeout_of,
)
from shared import metrics
from shared.approvals import (
    NOT_RUN,
    PERSON_DENIALS,
    DecisionKind,
    Pending,
    approval_record,
    pending_approvals,
)
from shared.approvals import RUNS as APPROVAL_RUNS
from shared.domain import MessageKind
from shared.errors import DomainError
from shared.messages import (
    Block,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolCallState,
    ToolResultBlock,
    ToolResultState,
    Usage,
    assistant,
    new_id,
    system,
    tool_result_message_id,
)
from shared.model.base import ChatModel, ModelContextOverflow, ToolSpec
from shared.model.tokens import messages_tokens, text_counter, text_tokens, tools_tokens
from shared.tools import (
    DenialReason,
    arguments_digest,
    authorize,
    check_client_tools,
    effective_tools,
    matches,
)

log = logging.getLogger("agentmesh.executor.worker")


@dataclass
class TurnOutput:
    """What one model turn produced."""

    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    calls: core.ToolCallAssembler = field(default_factory=core.ToolCallAssembler)
    usage: Usage | None = None
    finished_reason: str = ""
    # Whether anything of the turn streamed (a turn that streamed is never tried again).
    produced: bool = False

    def estimated_usage(self, input_tokens: int) -> Usage:
        """The turn's usage when the endpoint reported none (shared.model.tokens)."""
        output = text_tokens("".join(self.text)) + text_tokens("".join(self.thinking))
        output += sum(text_tokens(c.name) + text_tokens(c.input) for c in self.calls.blocks())
        return Usage(input_tokens, output, estimated=True)

    def content(self, calls: Sequence[ToolCallBlock]) -> tuple[Block, ...]:
        blocks: list[Block] = []
        if self.thinking:
            blocks.append(ThinkingBlock("".join(self.thinking)))
        if self.text:
            blocks.append(TextBlock("".join(self.text)))
        blocks.extend(calls)
        return tuple(blocks)


class WorkerAgent:
    def __init__(
        self,
        model: ChatModel,
        tools: ToolRegistry,
        *,
        max_tool_rounds: int,
        tool_timeout_seconds: float,
        models: agent_config.ModelResolver | None = None,
        memories: recall.MemorySearch | None = None,
    ) -> None:
        self.model = model
        self.models = models
        self.memories = memories
        self.tools = tools
        self.max_tool_rounds = max_tool_rounds
        self.tool_timeout_seconds = tool_timeout_seconds

    async def run(self, step: StepRequest) -> AsyncGenerator[StepItem, None]:
        self.tools.refresh()
        registered = self.tools.names()
        server = effective_tools(step.declared, step.profile, registered)
        # A client-side tool may not carry the name of a server-side one (registered at all).
        names = set(registered)
        check_client_tools([t.name for t in step.client_tools], names.__contains__, "client_tools")
        client = tuple(t.name for t in step.client_tools)
        offered: list[ToolSpec] = [self.tools.spec(n) for n in server] + list(step.client_tools)
        tool_context = ToolContext(step.owner, step.run_id, step.thread_id, step.time_zone)
        model_call = agent_config.setup(step.profile.agent, step.time_zone, self.model, self.models)
        max_tokens = model_call.options.get("max_tokens")
        card = model_call.card
        budget_tokens = budget.input_budget(card, max_tokens) if card is not None else None
        carried = [step.input]
        if model_call.system_prompt:
            carried.insert(0, system(model_call.system_prompt))
        recalled = await recall.recall(
            self.memories,
            step.owner,
            step.profile.memory,
            [step.input.text],
            budget.recall_budget(budget_tokens, carried, offered, step.profile.memory.max_tokens),
            # The thread's messages the step sends are in its context already.
            in_context=[m.id for m in (*step.context, step.input)],
        )
        if recalled.memories:
            yield recall.recall_message(recalled, recall.recall_message_id(step.reply_message_id))
        block = recall.block_text(recalled.memories)
        prompt, placed = model_call.prompt_with(block)
        # The profile's prompt and the recalled memories lead the context (the budget keeps
        # leading system messages).
        leading = [system(prompt)] if prompt else []
        if block and not placed:
            leading.append(system(block))
        history = (*leading, *step.context)
        if step.decisions:
            decided: list[Msg] = []
            async for item in self._decided(step, registered, tool_context, decided):
                yield item
            # The decided calls' results follow the calls, before the new input.
            history = (*history, *decided)
        # This step's input and turns: always sent (the thread's earlier messages fit around them).
        conversation: list[Msg] = [step.input]
        usage = Usage()

        def decide(call: ToolCallBlock, last: bool) -> tuple[ToolRoute, DenialReason | None]:
            if call.name in client:
                return (ToolRoute.FORBIDDEN if last else ToolRoute.CLIENT), None
            reason = authorize(call.name, step.declared, step.profile, registered)
            if reason is not None:
                return ToolRoute.FORBIDDEN, reason
            tool = self.tools.get(call.name)
            asks = matches(step.profile.tool_policy.requires_approval, call.name)
            if not last and tool is not None and (asks or requires_approval(tool)):
                return ToolRoute.NEEDS_APPROVAL, None
            # Authorised, but the last turn is offered no tools: the loop's bound, no denial.
            return (ToolRoute.FORBIDDEN if last else ToolRoute.SERVER), None

        for turn_no in range(self.max_tool_rounds + 1):
            last = turn_no == self.max_tool_rounds
            message_id = core.turn_message_id(step.reply_message_id, turn_no)
            tools = () if last else offered
            while True:
                turn = TurnOutput()
                if budget_tokens is None:
                    messages = [*history, *conversation]
                    input_tokens = messages_tokens(messages) + tools_tokens(tools)
                else:
                    # The model's own tokenizer when its card has one, else the estimate.
                    count = await text_counter(model_call.model, [*history, *conversation], tools)
                    fitted = budget.fit(history, conversation, tools, budget_tokens, count)
                    messages, input_tokens = fitted.messages, fitted.input_tokens
                    if fitted.dropped:
                        log.info(
                            "context: left out the oldest messages to fit the model's window",
                            extra={"fields": {"dropped": fitted.dropped, "budget": budget_tokens}},
                        )
                # Counted from here on, even if a cancel or a broken stream cuts the turn.
                yield TurnUsage(Usage(input_tokens, 0, estimated=True))
                try:
                    async for event in self._model_turn(
                        model_call, messages, tools, message_id, turn
                    ):
                        yield event
                except ModelContextOverflow:
                    if turn.produced or budget_tokens is None or budget_tokens < 2:
                        raise
                    budget_tokens //= 2
                    log.warning(
                        "context: the model found the turn too long; fitting into half the budget",
                        extra={"fields": {"budget": budget_tokens}},
                    )
                    continue
                break
            if turn.usage is None:
                turn.usage = turn.estimated_usage(input_tokens)
            usage = usage + turn.usage
            calls = turn.calls.blocks()
            routes = {c.id: decide(c, last) for c in calls}
            calls = [replace(c, state=_call_state(routes[c.id][0])) for c in calls]
            message = assistant(
                turn.content([stored_call(c, routes[c.id][1]) for c in calls]),
                id=message_id,
                kind=core.turn_kind(bool(calls)),
                usage=turn.usage,
                finished_reason=turn.finished_reason,
            )
            yield message
            if not calls:
                yield StepResult(turn.finished_reason or "stop", usage)
                return
            conversation.append(message)

            pending: list[str] = []
            asked: list[Pending] = []
            results: list[ToolResultBlock] = []
            results_id = new_id()
            for call in calls:
                route, reason = routes[call.id]
                if route is ToolRoute.CLIENT:
                    pending.append(call.id)
                    continue
                if reason is not None:
                    yield denied(call, reason)
                    result = denied_result(call, reason)
                elif route is ToolRoute.NEEDS_APPROVAL:
                    args = call.input or "{}"
                    asked.append(Pending(call.id, call.name, args, message.created_at))
                    continue
                elif route is ToolRoute.SERVER:
                    result = await run_tool(
                        self.tools, call, tool_context, self.tool_timeout_seconds
                    )
                else:
                    result = _error(
                        call, "no tool rounds are left in this step; it was not executed"
                    )
                # The id AG-UI gives this result once stored (shared.messages.msg_to_agui).
                event_id = tool_result_message_id(results_id, len(results))
                yield ToolCallResult(event_id, call.id, result.text)
                results.append(result)
            if results:
                results_msg = assistant(results, id=results_id, kind=MessageKind.TOOL_RESULT)
                yield results_msg
                conversation.append(results_msg)
            if pending or asked:
                yield StepResult("tool_calls", usage, tuple(pending), tuple(asked))
                return
            if last:
                yield StepResult("max_tool_iterations", usage)
                return

    async def _decided(
        self,
        step: StepRequest,
        registered: Sequence[str],
        context: ToolContext,
        out: list[Msg],
    ) -> AsyncIterator[StepItem]:
        """Run the approved (or edited) calls the thread was waiting on, refuse the others;
        their results are one message, which keeps each decision and who made it."""
        waiting = pending_approvals(step.context)
        results: list[ToolResultBlock] = []
        records: list[dict[str, str]] = []
        results_id = new_id()
        for d in step.decisions:
            p = waiting.get(d.tool_call_id)
            if p is None:
                continue  # answered meanwhile (the orchestrator checked it was waiting)
            arguments = d.arguments if d.kind is DecisionKind.EDIT else p.arguments
            call = ToolCallBlock(p.tool_call_id, p.tool_name, arguments, ToolCallState.ALLOWED)
            if d.kind in APPROVAL_RUNS:
                # Still within the policy now (the profile or the registry may have changed).
                reason = authorize(call.name, step.declared, step.profile, registered)
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
            yield ToolCallResult(event_id, call.id, result.text)
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

    async def _model_turn(
        self,
        call: agent_config.CallSetup,
        conversation: Sequence[Msg],
        offered: Sequence[ToolSpec],
        message_id: str,
        turn: TurnOutput,
    ) -> AsyncIterator[StepItem]:
        text_open = False
        turn.produced = False
        # aclosing: a cancelled step closes the model's stream at once (the provider's
        # connection with it), instead of leaving it to the garbage collector.
        async with aclosing(call.stream(conversation, offered)) as stream:
            async for chunk in stream:
                turn.produced = True
                for block in chunk.content:
                    if isinstance(block, TextBlock):
                        if not block.text:
                            continue
                        if not text_open:
                            text_open = True
                            yield TextStart(message_id)
                        turn.text.append(block.text)
                        yield TextDelta(message_id, block.text)
                    elif isinstance(block, ToolCallBlock):
                        call_id, started = turn.calls.add(block)
                        if started:
                            yield ToolCallStart(call_id, turn.calls.name_of(call_id), message_id)
                        if block.input:
                            yield ToolCallArgs(call_id, block.input)
                    elif isinstance(block, ThinkingBlock):
                        turn.thinking.append(block.thinking)
                if chunk.usage is not None:
                    # Providers report the turn's running total; the last report wins.
                    turn.usage = chunk.usage
                    if not chunk.is_last:
                        yield TurnUsage(chunk.usage)
                if chunk.is_last:
                    turn.finished_reason = chunk.finished_reason
        if text_open:
            yield TextEnd(message_id)
        for block in turn.calls.blocks():
            yield ToolCallEnd(block.id)


def denied(call: ToolCallBlock, reason: DenialReason) -> ToolDenied:
    """The audit item of a refused call: a digest of its arguments, never the arguments."""
    metrics.tool_denied(reason.value)
    return ToolDenied(call.id, call.name, arguments_digest(call.input or ""), reason.value)


def stored_call(call: ToolCallBlock, reason: DenialReason | None) -> ToolCallBlock:
    """A call as its message stores it: a refused call (`reason`) keeps only the digest of
    its arguments, the audit's argumentsSha256, as `{"argumentsSha256": "<hex>"}`: refused
    arguments are never stored (they may be what an attacker injected)."""
    if reason is None:
        return call
    digest = arguments_digest(call.input or "")
    return replace(call, input=json.dumps({"argumentsSha256": digest}, separators=(",", ":")))


def denied_result(call: ToolCallBlock, reason: DenialReason) -> ToolResultBlock:
    return ToolResultBlock(
        call.id, call.name, core.forbidden_tool_message(call.name, reason), ToolResultState.DENIED
    )


async def run_tool(
    tools: ToolRegistry, call: ToolCallBlock, context: ToolContext, timeout_seconds: float
) -> ToolResultBlock:
    """Run an authorised call; failures become error results the model may read."""
    tool = tools.get(call.name)
    if tool is None:
        return denied_result(call, DenialReason.NOT_REGISTERED)
    try:
        arguments = json.loads(call.input or "{}")
        if not isinstance(arguments, dict):
            raise ToolError("the arguments must be a JSON object")
        async with asyncio.timeout(timeout_of(tool, timeout_seconds)):
            output = await tool.execute(arguments, context)
    except json.JSONDecodeError:
        return _error(call, "the arguments are not valid JSON")
    except (ToolError, DomainError) as exc:
        return _error(call, str(exc))
    except TimeoutError:
        return _error(call, "the tool did not answer in time")
    except Exception:
        log.exception("tool failed", extra={"fields": {"tool": call.name}})
        return _error(call, "the tool failed")
    return ToolResultBlock(call.id, call.name, output, ToolResultState.SUCCESS)


def _call_state(route: ToolRoute) -> ToolCallState:
    if route is ToolRoute.NEEDS_APPROVAL:
        return ToolCallState.ASKING  # stored waiting: the thread's next run decides
    return ToolCallState.SUBMITTED if route is ToolRoute.CLIENT else ToolCallState.FINISHED


def _error(call: ToolCallBlock, reason: str) -> ToolResultBlock:
    return ToolResultBlock(call.id, call.name, f"error: {reason}", ToolResultState.ERROR)
