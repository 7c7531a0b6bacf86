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
authorises, streams TOOL_CALL_* events through shared.toolcalls.ToolCallTracker, then
moves the watermark with a compare-and-set.

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
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import replace
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
from services.executor.events import StepItem, StepResult, TextDelta, TextEnd, TextStart
from services.executor.memory_tools import Watermark
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
from shared.model.base import ChatModel
from shared.model.scripted import MEMORY_PROMPT, NO_MEMORIES
from shared.model.tokens import messages_tokens, tools_tokens
from shared.toolcalls import ToolCallTracker
from shared.tools import authorize, effective_tools

log = logging.getLogger("agentmesh.executor.memory")

NOTHING_NEW = "No new messages since the last memory run: nothing to save or forget."
TAKEN = "Another memory run processed these messages first: nothing was written twice."


def unusable(why: str) -> FailedPrecondition:
    return FailedPrecondition(
        f"the memory model's output could not be used ({why}); the watermark did not move, "
        "the next run reads these messages again",
        reason="MEMORY_OUTPUT_UNUSABLE",
    )


class Watermarks(Protocol):
    async def watermark(self, owner: str, name: str) -> Watermark: ...

    async def advance(
        self, owner: str, name: str, expected: str, position: str, time: object
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

    async def run(self, step: StepRequest) -> AsyncIterator[StepItem]:
        if step.client_tools:
            raise InvalidArgument("client_tools", "the memory agent runs no client-side tools")
        registered = self.tools.names()
        offered = [self.tools.spec(n) for n in effective_tools(step.declared, step.profile, registered)]
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
        # The owner's memories the new messages may restate or contradict: the model updates
        # or forgets them instead of writing near-duplicates.
        said = [m.text for m in fresh if m.role is Role.USER]
        limit = step.profile.memory.max_tokens
        recalled = await recall.recall(self.memories, step.owner, step.profile.memory, said, limit)
        if recalled:
            yield recall.recall_message(recalled, recall.recall_message_id(step.reply_message_id))
        block = recall.block_text(recalled)
        prompt, placed = model_call.prompt_with(block)
        # The profile's prompt replaces the built-in one; the NO_MEMORIES answer stays part
        # of the contract (without it an empty extraction could not be told from prose).
        instructions = prompt or MEMORY_PROMPT
        if NO_MEMORIES not in instructions:
            instructions += f"\n\nIf there is nothing to save or forget, reply {NO_MEMORIES} and nothing else."
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
        tracker = ToolCallTracker()
        usage = Usage()
        checked = False
        for turn_no in range(self.max_tool_rounds + 1):
            last = turn_no == self.max_tool_rounds
            message_id = core.turn_message_id(step.reply_message_id, turn_no)
            turn = TurnOutput()
            tools = () if last else offered
            async for event in self._model_turn(model_call, conversation, tools, message_id, turn, tracker):
                yield event
            if turn.usage is None:
                turn.usage = turn.estimated_usage(messages_tokens(conversation) + tools_tokens(tools))
            usage = usage + turn.usage
            calls = [replace(c, state=ToolCallState.FINISHED) for c in turn.calls.blocks()]
            reasons = {c.id: authorize(c.name, step.declared, step.profile, registered) for c in calls}
            message = assistant(
                turn.content([stored_call(c, reasons[c.id]) for c in calls]),
                id=message_id,
                kind=core.turn_kind(bool(calls)),
                usage=turn.usage,
                finished_reason=turn.finished_reason,
            )
            yield message
            if not calls:
                if turn_no == 0 and NO_MEMORIES not in "".join(turn.text):
                    raise unusable(f"it answered in prose instead of calling a memory tool or saying {NO_MEMORIES}")
                break
            conversation.append(message)
            if not checked:
                checked = True
                current = await self.watermarks.watermark(step.owner, watermark)
                if current.position != mark.position:
                    results = [
                        ToolResultBlock(c.id, c.name, TAKEN, ToolResultState.INTERRUPTED) for c in calls
                    ]
                    async for item in self._results(results, tracker):
                        yield item
                    for c in calls:
                        tracker.track(c.id, c.name).interrupt()
                    async for item in _reply(new_id(), TAKEN):
                        yield item
                    yield StepResult("stop", usage)
                    return
            results: list[ToolResultBlock] = []
            for call in calls:
                lifecycle = tracker.track(call.id, call.name)
                reason = reasons[call.id]
                if reason is not None:
                    lifecycle.deny()
                    yield denied(call, reason)
                    result = denied_result(call, reason)
                elif last:
                    lifecycle.interrupt()
                    result = ToolResultBlock(
                        call.id, call.name, "error: no tool rounds are left", ToolResultState.INTERRUPTED
                    )
                else:
                    lifecycle.allow()
                    lifecycle.submit()
                    result = await run_tool(self.tools, call, context, self.tool_timeout_seconds)
                    lifecycle.finish(result.state)
                results.append(result)
            results_msg = None
            async for item in self._results(results, tracker):
                if isinstance(item, Msg):
                    results_msg = item
                yield item
            assert results_msg is not None
            conversation.append(results_msg)
            if turn_no == 0 and not any(r.state is ToolResultState.SUCCESS for r in results):
                raise unusable("none of its tool calls could be run")

        newest = fresh[-1]
        position = core.watermark_position(reading.upto, newest.id)
        advanced = await self.watermarks.advance(
            step.owner, watermark, mark.position, position, newest.created_at
        )
        if not advanced:
            log.info("another memory run advanced the watermark first")
        yield StepResult("stop", usage)

    async def _results(
        self, results: list[ToolResultBlock], tracker: ToolCallTracker
    ) -> AsyncIterator[StepItem]:
        results_id = new_id()
        for i, result in enumerate(results):
            for event in tracker.result(result.id, tool_result_message_id(results_id, i), result.text):
                yield event
        yield assistant(results, id=results_id, kind=MessageKind.TOOL_RESULT)

    async def _model_turn(
        self,
        model_call: agent_config.CallSetup,
        conversation: Sequence[Msg],
        offered: Sequence[object],
        message_id: str,
        turn: TurnOutput,
        tracker: ToolCallTracker,
    ) -> AsyncIterator[StepItem]:
        text_open = False
        async with aclosing(model_call.stream(conversation, offered)) as stream:  # type: ignore[arg-type]
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
                        for event in tracker.start(call_id, turn.calls.name_of(call_id), message_id):
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
