"""One agent step as a loop, like AgentScope's ReActAgent.reply: prepare, then turns of
reason and act.

- prepare: the tools offered (the run's effective server-side tools, shared.tools, then its
  client-side ones), the model's setup (services.executor.agent_config), the input budget
  its card leaves (services.executor.context), the owner's memories the step recalls
  (services.executor.recall) and the system block leading the context: the prompt, then
  the recalled memories unless the prompt placed them.
- reason: one model turn. Its text and tool calls stream as events (the calls through the
  turn's services.executor.toolcalls.ToolCallTracker); its messages fit the budget (the
  oldest of the thread go first). Should the endpoint still find them too long (the count
  is an estimate), the turn is tried once more, before anything streamed, within half the
  budget. A turn whose endpoint reports no usage gets an estimated one (shared.model.tokens).
- route: where each call goes (core.ToolRoute): a client-side tool's call ends the step,
  a call shared.tools.authorize refuses is not executed (the model gets an error result,
  the audit a ToolDenied), one needing approval waits for a person, the others run here;
  the last turn is offered no tools, so the step always ends. Each call's lifecycle moves
  there, and its turn's message stores it so.
- act: run the calls routed here, refuse the others, and store their results as one message.

The worker is this loop (services.executor.agents.worker); the memory agent prepares,
reasons, routes and acts with it around its watermark (services.executor.agents.memory).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace

from services.executor import agent_config, core, recall
from services.executor import context as budgets
from services.executor.agents.base import StepRequest
from services.executor.core import ToolRoute
from services.executor.events import StepItem, TextDelta, TextEnd, TextStart, ToolDenied, TurnUsage
from services.executor.toolcalls import ToolCallTracker
from services.executor.tools import (
    ToolContext,
    ToolError,
    ToolRegistry,
    requires_approval,
    timeout_of,
)
from shared import metrics
from shared.approvals import Pending
from shared.domain import MessageKind
from shared.errors import DomainError
from shared.messages import (
    Block,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolResultState,
    Usage,
    assistant,
    new_id,
    system,
    tool_result_message_id,
)
from shared.model.base import ChatModel, ModelContextOverflow, OutputSchema, ToolSpec
from shared.model.tokens import messages_tokens, text_counter, text_tokens, tools_tokens
from shared.profiles import ExecutionProfile
from shared.tools import (
    DenialReason,
    arguments_digest,
    authorize,
    check_client_tools,
    effective_tools,
    matches,
)

log = logging.getLogger("agentmesh.executor.loop")

# The result of a call made in the last turn, which is offered no tools.
NO_ROUNDS_LEFT = "error: no tool rounds are left in this step; it was not executed"


@dataclass(frozen=True)
class Offer:
    """The tools a step's model is offered, and what its calls are checked against."""

    specs: tuple[ToolSpec, ...]  # the server-side tools, then the client's
    declared: tuple[str, ...]
    profile: ExecutionProfile
    registered: tuple[str, ...]
    client: frozenset[str] = frozenset()
    # Whether a call may wait for a person's approval (the memory agent has no one to ask).
    asks: bool = True


@dataclass(frozen=True)
class Prepared:
    """What a step runs with once prepared."""

    call: agent_config.CallSetup
    # The system block that leads the context.
    leading: tuple[Msg, ...]
    # The tokens a call's input may take (None: not fitted, the model has no card).
    budget: int | None
    # The memory_recall record of what was recalled (None: nothing was).
    recalled: Msg | None


@dataclass
class Context:
    """What a step sends the model: the thread's earlier messages, fitted to `budget`
    (None: all of them), and the step's own (its input and turns), always sent."""

    history: Sequence[Msg]
    pinned: list[Msg]
    budget: int | None = None


@dataclass(frozen=True)
class Routed:
    call: ToolCallBlock  # in the state its turn's message stores
    route: ToolRoute
    reason: DenialReason | None = None  # why the policy refused it


@dataclass
class Turn:
    """What one model turn produced."""

    message_id: str
    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    calls: ToolCallTracker = field(default_factory=ToolCallTracker)
    usage: Usage | None = None
    finished_reason: str = ""
    # Whether anything of the turn streamed (a turn that streamed is never tried again).
    produced: bool = False

    @property
    def used(self) -> Usage:
        return self.usage or Usage()

    def estimated_usage(self, input_tokens: int) -> Usage:
        """The turn's usage when the endpoint reported none (shared.model.tokens)."""
        output = text_tokens("".join(self.text)) + text_tokens("".join(self.thinking))
        output += sum(text_tokens(c.name) + text_tokens(c.input) for c in self.calls.calls())
        return Usage(input_tokens, output, estimated=True)

    def message(self, routed: Sequence[Routed]) -> Msg:
        """The turn as stored: its thinking, its text, then its calls as routed."""
        blocks: list[Block] = []
        if self.thinking:
            blocks.append(ThinkingBlock("".join(self.thinking)))
        if self.text:
            blocks.append(TextBlock("".join(self.text)))
        blocks.extend(stored_call(r.call, r.reason) for r in routed)
        return assistant(
            tuple(blocks),
            id=self.message_id,
            kind=core.turn_kind(bool(routed)),
            usage=self.usage,
            finished_reason=self.finished_reason,
        )


@dataclass
class Acted:
    """What act did with a turn's calls."""

    results: Msg | None = None  # the results message (None: no call got a result here)
    pending: list[str] = field(default_factory=list)  # client-side calls: the client runs them
    asked: list[Pending] = field(default_factory=list)  # calls waiting for a person's approval


class ToolLoop:
    """An agent's parts: the model and tools it runs with and the loop's bounds."""

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

    def offer(self, step: StepRequest, *, asks: bool = True) -> Offer:
        registered = tuple(self.tools.names())
        server = effective_tools(step.declared, step.profile, registered)
        # A client-side tool may not carry the name of a server-side one (registered at all).
        names = set(registered)
        check_client_tools([t.name for t in step.client_tools], names.__contains__, "client_tools")
        specs = (*(self.tools.spec(n) for n in server), *step.client_tools)
        client = frozenset(t.name for t in step.client_tools)
        return Offer(specs, step.declared, step.profile, registered, client, asks)

    async def prepare(
        self,
        step: StepRequest,
        offer: Offer,
        *,
        queries: Sequence[str],
        in_context: Sequence[str],
        pinned: Sequence[Msg] | None = None,
        instructions: Callable[[str, agent_config.CallSetup], str] | None = None,
    ) -> Prepared:
        """The step's model setup, recall and system block. `queries` are what recall
        searches with, `in_context` the ids of the messages the step sends already;
        `pinned`, the step's own messages, which the input budget fits the rest around
        (None: the step's context is not fitted, its window bounds it); `instructions`
        makes the agent's system prompt of the profile's (rendered) one."""
        call = agent_config.setup(step.profile.agent, step.time_zone, self.model, self.models)
        budget = None
        if pinned is not None and call.card is not None:
            budget = budgets.input_budget(call.card, call.options.get("max_tokens"))
        carried = [*([system(call.system_prompt)] if call.system_prompt else []), *(pinned or ())]
        room = budgets.recall_budget(budget, carried, offer.specs, step.profile.memory.max_tokens)
        recalled = await recall.recall(
            self.memories, step.owner, step.profile.memory, queries, room, in_context=in_context
        )
        record = None
        if recalled.memories:
            record = recall.recall_message(
                recalled, recall.recall_message_id(step.reply_message_id)
            )
        block = recall.block_text(recalled.memories)
        prompt, placed = call.prompt_with(block)
        if instructions is not None:
            prompt = instructions(prompt, call)
        # The budget keeps leading system messages: the prompt and the memories stay.
        leading = [system(prompt)] if prompt else []
        if block and not placed:
            leading.append(system(block))
        return Prepared(call, tuple(leading), budget, record)

    async def reason(
        self,
        call: agent_config.CallSetup,
        context: Context,
        tools: Sequence[ToolSpec],
        turn: Turn,
        output_schema: OutputSchema | None = None,
    ) -> AsyncIterator[StepItem]:
        """One model turn: its events as they stream; `turn` holds what it produced."""
        while True:
            messages, input_tokens = await self._fit(call, context, tools)
            # Counted from here on, even if a cancel or a broken stream cuts the turn.
            yield TurnUsage(Usage(input_tokens, 0, estimated=True))
            try:
                async for event in self._stream(call, messages, tools, turn, output_schema):
                    yield event
            except ModelContextOverflow:
                if turn.produced or context.budget is None or context.budget < 2:
                    raise
                context.budget //= 2
                log.warning(
                    "context: the model found the turn too long; fitting into half the budget",
                    extra={"fields": {"budget": context.budget}},
                )
                continue
            break
        if turn.usage is None:
            turn.usage = turn.estimated_usage(input_tokens)

    async def _fit(
        self, call: agent_config.CallSetup, context: Context, tools: Sequence[ToolSpec]
    ) -> tuple[list[Msg], int]:
        """The turn's messages and their input tokens."""
        if context.budget is None:
            messages = [*context.history, *context.pinned]
            return messages, messages_tokens(messages) + tools_tokens(tools)
        # The model's own tokenizer when its card has one, else the estimate.
        count = await text_counter(call.model, [*context.history, *context.pinned], tools)
        fitted = budgets.fit(context.history, context.pinned, tools, context.budget, count)
        if fitted.dropped:
            log.info(
                "context: left out the oldest messages to fit the model's window",
                extra={"fields": {"dropped": fitted.dropped, "budget": context.budget}},
            )
        return fitted.messages, fitted.input_tokens

    async def _stream(
        self,
        call: agent_config.CallSetup,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec],
        turn: Turn,
        output_schema: OutputSchema | None,
    ) -> AsyncIterator[StepItem]:
        text_open = False
        turn.produced = False
        # aclosing: a cancelled step closes the model's stream at once (the provider's
        # connection with it), instead of leaving it to the garbage collector.
        async with aclosing(call.stream(messages, tools, output_schema)) as stream:
            async for chunk in stream:
                turn.produced = True
                for block in chunk.content:
                    if isinstance(block, TextBlock):
                        if not block.text:
                            continue
                        if not text_open:
                            text_open = True
                            yield TextStart(turn.message_id)
                        turn.text.append(block.text)
                        yield TextDelta(turn.message_id, block.text)
                    elif isinstance(block, ToolCallBlock):
                        for event in turn.calls.stream(block, turn.message_id):
                            yield event
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
            yield TextEnd(turn.message_id)
        for event in turn.calls.close_open():
            yield event

    def route(
        self,
        offer: Offer,
        turn: Turn,
        last: bool,
        calls: Sequence[ToolCallBlock] | None = None,
    ) -> list[Routed]:
        """Where each of `calls` (default: the turn's) goes; its lifecycle moves there."""
        routed = []
        for call in turn.calls.calls() if calls is None else calls:
            where, reason = self._where(offer, call.name, last)
            lifecycle = turn.calls.track(call.id, call.name, external=call.name in offer.client)
            if where is ToolRoute.CLIENT:
                lifecycle.allow()
                lifecycle.submit()  # handed to the client, which runs it
            elif where is ToolRoute.NEEDS_APPROVAL:
                lifecycle.ask()  # stored waiting: the thread's next run decides
            elif where is ToolRoute.SERVER:
                lifecycle.allow()
            elif reason is not None:
                lifecycle.deny()
            else:
                lifecycle.interrupt()
            routed.append(Routed(replace(call, state=lifecycle.stored_state), where, reason))
        return routed

    def _where(self, offer: Offer, name: str, last: bool) -> tuple[ToolRoute, DenialReason | None]:
        if name in offer.client:
            return (ToolRoute.FORBIDDEN if last else ToolRoute.CLIENT), None
        reason = authorize(name, offer.declared, offer.profile, offer.registered)
        if reason is not None:
            return ToolRoute.FORBIDDEN, reason
        tool = self.tools.get(name)
        asks = matches(offer.profile.tool_policy.requires_approval, name)
        if offer.asks and not last and tool is not None and (asks or requires_approval(tool)):
            return ToolRoute.NEEDS_APPROVAL, None
        # Authorised, but the last turn is offered no tools: the loop's bound, no denial.
        return (ToolRoute.FORBIDDEN if last else ToolRoute.SERVER), None

    async def act(
        self,
        message: Msg,
        routed: Sequence[Routed],
        turn: Turn,
        context: ToolContext,
        acted: Acted,
    ) -> AsyncIterator[StepItem]:
        """Run the calls of the turn's `message` routed here, refuse the others; their
        results are one message (`acted` says what waits for the client or a person)."""
        results: list[ToolResultBlock] = []
        results_id = new_id()
        for r in routed:
            call = r.call
            if r.route is ToolRoute.CLIENT:
                acted.pending.append(call.id)
                continue
            if r.route is ToolRoute.NEEDS_APPROVAL:
                args = call.input or "{}"
                acted.asked.append(Pending(call.id, call.name, args, message.created_at))
                continue
            if r.reason is not None:
                yield denied(call, r.reason)
                result = denied_result(call, r.reason)
            elif r.route is ToolRoute.SERVER:
                lifecycle = turn.calls.lifecycle(call.id)
                lifecycle.submit()
                result = await run_tool(self.tools, call, context, self.tool_timeout_seconds)
                lifecycle.finish(result.state)
            else:
                state = ToolResultState.INTERRUPTED
                result = ToolResultBlock(call.id, call.name, NO_ROUNDS_LEFT, state)
            # The id AG-UI gives this result once stored (shared.messages.msg_to_agui).
            event_id = tool_result_message_id(results_id, len(results))
            for event in turn.calls.result(call.id, event_id, result.text):
                yield event
            results.append(result)
        if results:
            acted.results = assistant(results, id=results_id, kind=MessageKind.TOOL_RESULT)
            yield acted.results


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


def _error(call: ToolCallBlock, reason: str) -> ToolResultBlock:
    return ToolResultBlock(call.id, call.name, f"error: {reason}", ToolResultState.ERROR)
