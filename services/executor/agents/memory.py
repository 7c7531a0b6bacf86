"""The memory agent: extracts, writes and forgets durable facts about the owner from their
recent chat messages (seed 001 §4.2).

Its context is the owner's chat messages in the profile's window, across threads (the
orchestrator loads them); it keeps only those after its watermark (memory service), so a
second run over the same messages writes nothing. The watermark is the job's own, for the
memory tools it may call (core.watermark_name): a job that cannot forget never moves the
watermark of one that can. It counts in history's per-owner commit sequence, bounded by
the context's sequence horizon (core.unread), so a message that commits late is read by
the next run instead of being skipped. It asks the model (MEMORY_PROMPT and the job's
prompt as the system message, the owner's memories those messages recall
(services.executor.recall) so that it rewrites rather than duplicates, the new messages
as the conversation), runs the memory_write / memory_forget calls that shared.tools
authorises (or, for a card with memory_extraction "structured", the writes and forgets of
its one JSON document, as those calls), streams TOOL_CALL_* events through
services.executor.toolcalls.ToolCallTracker, then moves the watermark with a compare-and-set.

Two runs at once: before running any tool the agent re-reads the watermark; if another run
moved it, the messages are that run's and this one writes nothing. If the final
compare-and-set loses anyway (the other run advanced in between), this run's writes were
the same idempotent facts and the run ends normally.

Output it cannot use (small models answer in prose): the model's first answer must call a
memory tool or say NO_MEMORIES (the prompt asks for one or the other). Prose instead, or
calls none of which succeeded (arguments that are not JSON, tools it may not call), fail the
step with MEMORY_OUTPUT_UNUSABLE (a FailedPrecondition: the job run's error says so), and
the watermark stays where it was: those messages are read again by the next run.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from services.executor import agent_config, core, recall
from services.executor.agents.base import StepRequest
from services.executor.agents.worker import (
    TurnOutput,
    denied,
    denied_result,
    run_tool,
    stored_call,
)
from services.executor.events import (
    StepItem,
    StepResult,
    TextDelta,
    TextEnd,
    TextStart,
    TurnUsage,
)
from services.executor.memory_tools import (
    EXTRACTION_SCHEMA,
    GRAMMAR_EXTRACTION_SCHEMA,
    Extraction,
    MemoryForget,
    MemoryWrite,
    Watermark,
    forgotten_count,
    parse_extraction,
)
from services.executor.toolcalls import ToolCallTracker
from services.executor.tools import ToolContext, ToolRegistry
from shared.domain import MessageKind
from shared.errors import FailedPrecondition, InvalidArgument
from shared.messages import (
    Msg,
    Role,
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
    user,
)
from shared.model.base import ChatModel, OutputSchema, ToolSpec
from shared.model.scripted import (
    MEMORY_EXTRACTION,
    MEMORY_EXTRACTION_PROMPT,
    MEMORY_PROMPT,
    NO_MEMORIES,
)
from shared.model.tokens import messages_tokens, tools_tokens
from shared.tools import DenialReason, authorize, effective_tools

log = logging.getLogger("agentmesh.executor.memory")

NOTHING_NEW = "No new messages since the last memory run: nothing to save or forget."
TAKEN = "Another memory run processed these messages first: nothing was written twice."


def unusable(why: str) -> FailedPrecondition:
    return FailedPrecondition(
        f"the memory model's output could not be used ({why}); the watermark did not move, "
        "the next run reads these messages again",
        reason="MEMORY_OUTPUT_UNUSABLE",
    )


EXTRACTION = OutputSchema(MEMORY_EXTRACTION, EXTRACTION_SCHEMA, GRAMMAR_EXTRACTION_SCHEMA)


@dataclass
class _Progress:
    """One memory step's state across its model turns and tool calls."""

    step: StepRequest
    watermark: str  # its name (core.watermark_name)
    mark: Watermark  # the watermark when the step began
    registered: Sequence[str]
    context: ToolContext
    tracker: ToolCallTracker = field(default_factory=ToolCallTracker)
    usage: Usage = field(default_factory=Usage)
    reasons: dict[str, DenialReason | None] = field(default_factory=dict)
    succeeded: list[str] = field(default_factory=list)  # names of the calls that ran well
    forgotten: int = 0  # memories the forgets that ran removed (not the forgets run)
    checked: bool = False  # the watermark was read again before the first call
    taken: bool = False  # another run had moved it: these messages are that run's


class Watermarks(Protocol):
    async def watermark(self, owner: str, name: str) -> Watermark: ...

    async def advance(
        self, owner: str, name: str, expected: str, position: str, time: datetime
    ) -> bool: ...


def transcript(messages: Sequence[Msg]) -> list[Msg]:
    """What the model reads of them: the user's and the assistant's text, nothing else (no
    tool calls whose results the window may have cut)."""
    out = []
    for m in messages:
        if not m.text.strip():
            continue
        make = user if m.role is Role.USER else assistant
        out.append(make(m.text, id=m.id))
    return out


class MemoryAgent:
    def __init__(
        self,
        model: ChatModel,
        tools: ToolRegistry,
        watermarks: Watermarks,
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
        self.watermarks = watermarks
        self.max_tool_rounds = max(1, max_tool_rounds)
        self.tool_timeout_seconds = tool_timeout_seconds

    async def run(self, step: StepRequest) -> AsyncGenerator[StepItem, None]:
        if step.client_tools:
            raise InvalidArgument("client_tools", "the memory agent runs no client-side tools")
        registered = self.tools.names()
        offered = [
            self.tools.spec(n) for n in effective_tools(step.declared, step.profile, registered)
        ]
        watermark = core.watermark_name(step.thread_id, [t.name for t in offered])
        mark = await self.watermarks.watermark(step.owner, watermark)
        reading = core.unread(
            step.context, core.watermark_sequence(mark.position), step.sequence_horizon
        )
        fresh = reading.messages
        if not fresh:
            async for item in _reply(step.reply_message_id, NOTHING_NEW):
                yield item
            yield StepResult("stop")
            return

        model_call = agent_config.setup(step.profile.agent, step.time_zone, self.model, self.models)
        card = model_call.card
        structured = card is not None and card.memory_extraction == "structured"
        # The owner's memories the new messages may restate or contradict: the model updates
        # or forgets them instead of writing near-duplicates.
        said = [m.text for m in fresh if m.role is Role.USER]
        limit = step.profile.memory.max_tokens
        recalled = await recall.recall(
            self.memories,
            step.owner,
            step.profile.memory,
            said,
            limit,
            in_context=[m.id for m in step.context],
        )
        if recalled.memories:
            yield recall.recall_message(recalled, recall.recall_message_id(step.reply_message_id))
        block = recall.block_text(recalled.memories)
        prompt, placed = model_call.prompt_with(block)
        # The profile's prompt replaces the built-in one; with tool calls the NO_MEMORIES
        # answer stays part of the contract (without it an empty extraction could not be
        # told from prose); a structured answer says "nothing" with its empty lists.
        instructions = prompt or (MEMORY_EXTRACTION_PROMPT if structured else MEMORY_PROMPT)
        if not structured and NO_MEMORIES not in instructions:
            instructions += (
                f"\n\nIf there is nothing to save or forget, reply {NO_MEMORIES} and nothing else."
            )
        if step.input.text.strip():
            instructions += "\n\nThe job's instructions:\n" + step.input.text.strip()
        leading = [system(instructions)]
        if block and not placed:
            leading.append(system(block))
        conversation: list[Msg] = [*leading, *transcript(fresh)]
        context = ToolContext(
            step.owner,
            step.run_id,
            step.thread_id,
            step.time_zone,
            source_message_ids=tuple(m.id for m in fresh if m.role is Role.USER),
            source_texts=tuple(m.text for m in fresh if m.role is Role.USER),
        )
        progress = _Progress(step, watermark, mark, registered, context)
        extract = self._structured if structured else self._tool_calls
        async for item in extract(progress, model_call, conversation, offered):
            yield item
        if progress.taken:
            async for item in _reply(new_id(), TAKEN):
                yield item
            yield StepResult("stop", progress.usage)
            return

        newest = fresh[-1]
        position = core.watermark_position(reading.upto, newest.id)
        advanced = await self.watermarks.advance(
            step.owner, watermark, mark.position, position, newest.created_at
        )
        if not advanced:
            log.info("another memory run advanced the watermark first")
        yield StepResult("stop", progress.usage)

    async def _structured(
        self,
        progress: _Progress,
        model_call: agent_config.CallSetup,
        conversation: list[Msg],
        offered: Sequence[ToolSpec],
    ) -> AsyncIterator[StepItem]:
        """One model turn answering the EXTRACTION_SCHEMA document; its memories and forgets
        run as the memory tool calls they stand for (same policy, audit and events)."""
        message_id = core.turn_message_id(progress.step.reply_message_id, 0)
        turn = TurnOutput()
        # Counted from here on, even if a cancel or a broken stream cuts the turn.
        yield TurnUsage(Usage(messages_tokens(conversation), 0, estimated=True))
        async for event in self._model_turn(
            model_call, conversation, (), message_id, turn, progress.tracker, EXTRACTION
        ):
            yield event
        if turn.usage is None:
            turn.usage = turn.estimated_usage(messages_tokens(conversation))
        progress.usage = progress.usage + turn.usage
        try:
            document: Extraction | None = parse_extraction("".join(turn.text))
            problem = ""
        except ValueError as err:
            document, problem = None, str(err)
        said = [m.text for m in conversation if m.role is Role.USER]
        wanted, unasked = document.calls(said) if document is not None else ([], 0)
        calls = [
            ToolCallBlock(f"call_{new_id()}", name, arguments, ToolCallState.FINISHED)
            for name, arguments in wanted
        ]
        if unasked:
            log.info("dropped %d forget(s) the user's messages do not ask for", unasked)
        for call in calls:
            for event in progress.tracker.start(call.id, call.name, message_id):
                yield event
            for event in progress.tracker.args(call.id, call.input):
                yield event
            for event in progress.tracker.end(call.id):
                yield event
        message = self._turn_message(progress, turn, calls, message_id)
        yield message
        if document is None:
            cut = " (cut at the output limit)" if turn.finished_reason == "length" else ""
            raise unusable(f"its answer{cut} is {problem}")
        if calls:
            async for item in self._run_calls(progress, calls, last=False):
                yield item
            if progress.taken:
                return
            if not progress.succeeded:
                raise unusable("none of the memories it gave could be saved or forgotten")
        saved = sum(1 for n in progress.succeeded if n == MemoryWrite.name)
        summary = (
            f"Saved {saved} {'memory' if saved == 1 else 'memories'}, forgot {progress.forgotten}."
        )
        if unasked:
            summary += f" Ignored {unasked} forget request(s) no message of the user makes."
        async for item in _reply(new_id(), summary):
            yield item

    async def _tool_calls(
        self,
        progress: _Progress,
        model_call: agent_config.CallSetup,
        conversation: list[Msg],
        offered: Sequence[ToolSpec],
    ) -> AsyncIterator[StepItem]:
        """Tool rounds: the model calls memory_write / memory_forget until it answers."""
        step = progress.step
        for turn_no in range(self.max_tool_rounds + 1):
            last = turn_no == self.max_tool_rounds
            message_id = core.turn_message_id(step.reply_message_id, turn_no)
            turn = TurnOutput()
            tools = () if last else offered
            input_tokens = messages_tokens(conversation) + tools_tokens(tools)
            yield TurnUsage(Usage(input_tokens, 0, estimated=True))
            async for event in self._model_turn(
                model_call, conversation, tools, message_id, turn, progress.tracker
            ):
                yield event
            if turn.usage is None:
                turn.usage = turn.estimated_usage(input_tokens)
            progress.usage = progress.usage + turn.usage
            calls = [replace(c, state=ToolCallState.FINISHED) for c in turn.calls.blocks()]
            message = self._turn_message(progress, turn, calls, message_id)
            yield message
            if not calls:
                if turn_no == 0 and NO_MEMORIES not in "".join(turn.text):
                    raise unusable(
                        "it answered in prose instead of calling a memory tool or saying "
                        + NO_MEMORIES
                    )
                return
            conversation.append(message)
            async for item in self._run_calls(progress, calls, last=last):
                if isinstance(item, Msg) and item.kind is MessageKind.TOOL_RESULT:
                    conversation.append(item)
                yield item
            if progress.taken:
                return
            if turn_no == 0 and not progress.succeeded:
                raise unusable("none of its tool calls could be run")

    def _turn_message(
        self, progress: _Progress, turn: TurnOutput, calls: list[ToolCallBlock], message_id: str
    ) -> Msg:
        """The model's turn as stored, each call with its policy decision (kept for
        _run_calls)."""
        step = progress.step
        for c in calls:
            reason = authorize(c.name, step.declared, step.profile, progress.registered)
            progress.reasons[c.id] = reason
        return assistant(
            turn.content([stored_call(c, progress.reasons[c.id]) for c in calls]),
            id=message_id,
            kind=core.turn_kind(bool(calls)),
            usage=turn.usage,
            finished_reason=turn.finished_reason,
        )

    async def _run_calls(
        self, progress: _Progress, calls: list[ToolCallBlock], *, last: bool
    ) -> AsyncIterator[StepItem]:
        """Run the memory tool calls the policy allows (refused ones are audited as denied),
        then their results message. Before the first, the watermark is read again: if
        another run moved it, these messages are that run's and nothing runs
        (progress.taken)."""
        tracker = progress.tracker
        if not progress.checked:
            progress.checked = True
            current = await self.watermarks.watermark(progress.step.owner, progress.watermark)
            if current.position != progress.mark.position:
                progress.taken = True
                taken = [
                    ToolResultBlock(c.id, c.name, TAKEN, ToolResultState.INTERRUPTED) for c in calls
                ]
                async for item in self._results(taken, tracker):
                    yield item
                for c in calls:
                    tracker.track(c.id, c.name).interrupt()
                return
        results: list[ToolResultBlock] = []
        for call in calls:
            lifecycle = tracker.track(call.id, call.name)
            reason = progress.reasons[call.id]
            if reason is not None:
                lifecycle.deny()
                yield denied(call, reason)
                result = denied_result(call, reason)
            elif last:
                lifecycle.interrupt()
                result = ToolResultBlock(
                    call.id,
                    call.name,
                    "error: no tool rounds are left",
                    ToolResultState.INTERRUPTED,
                )
            else:
                lifecycle.allow()
                lifecycle.submit()
                result = await run_tool(
                    self.tools, call, progress.context, self.tool_timeout_seconds
                )
                lifecycle.finish(result.state)
                if result.state is ToolResultState.SUCCESS:
                    progress.succeeded.append(call.name)
                    if call.name == MemoryForget.name:
                        progress.forgotten += forgotten_count(result.text)
            results.append(result)
        async for item in self._results(results, tracker):
            yield item

    async def _results(
        self, results: list[ToolResultBlock], tracker: ToolCallTracker
    ) -> AsyncIterator[StepItem]:
        results_id = new_id()
        for i, result in enumerate(results):
            for event in tracker.result(
                result.id, tool_result_message_id(results_id, i), result.text
            ):
                yield event
        yield assistant(results, id=results_id, kind=MessageKind.TOOL_RESULT)

    async def _model_turn(
        self,
        model_call: agent_config.CallSetup,
        conversation: Sequence[Msg],
        offered: Sequence[ToolSpec],
        message_id: str,
        turn: TurnOutput,
        tracker: ToolCallTracker,
        output_schema: OutputSchema | None = None,
    ) -> AsyncIterator[StepItem]:
        text_open = False
        stream_of = model_call.stream(conversation, offered, output_schema)
        async with aclosing(stream_of) as stream:
            async for chunk in stream:
                for block in chunk.content:
                    if isinstance(block, TextBlock) and block.text:
                        if not text_open:
                            text_open = True
                            yield TextStart(message_id)
                        turn.text.append(block.text)
                        yield TextDelta(message_id, block.text)
                    elif isinstance(block, ToolCallBlock):
                        call_id, _ = turn.calls.add(block)
                        for event in tracker.start(
                            call_id, turn.calls.name_of(call_id), message_id
                        ):
                            yield event
                        for event in tracker.args(call_id, block.input):
                            yield event
                    elif isinstance(block, ThinkingBlock):
                        turn.thinking.append(block.thinking)
                if chunk.usage is not None:
                    turn.usage = chunk.usage
                if chunk.is_last:
                    turn.finished_reason = chunk.finished_reason
        if text_open:
            yield TextEnd(message_id)
        for call in turn.calls.blocks():
            for event in tracker.end(call.id):
                yield event


async def _reply(message_id: str, text: str) -> AsyncIterator[StepItem]:
    yield TextStart(message_id)
    yield TextDelta(message_id, text)
    yield TextEnd(message_id)
    yield assistant(text, id=message_id, kind=MessageKind.AGENT_REPLY, finished_reason="stop")
