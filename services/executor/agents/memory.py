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
its one JSON document, as those calls), then moves the watermark with a compare-and-set. It
prepares, reasons, routes and acts with services.executor.agents.loop, the worker's loop
(no one to ask: a call never waits for approval).

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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from services.executor import agent_config, core, recall
from services.executor.agents.base import StepRequest
from services.executor.agents.loop import Acted, Context, Offer, Routed, ToolLoop, Turn
from services.executor.events import StepItem, StepResult, TextDelta, TextEnd, TextStart
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
from services.executor.tools import ToolContext, ToolRegistry
from shared.domain import MessageKind
from shared.errors import FailedPrecondition, InvalidArgument
from shared.messages import (
    Msg,
    Role,
    ToolCallBlock,
    ToolResultBlock,
    ToolResultState,
    Usage,
    assistant,
    new_id,
    tool_result_message_id,
    user,
)
from shared.model.base import ChatModel, OutputSchema
from shared.model.scripted import (
    MEMORY_EXTRACTION,
    MEMORY_EXTRACTION_PROMPT,
    MEMORY_PROMPT,
    NO_MEMORIES,
)

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
    offer: Offer
    watermark: str  # its name (core.watermark_name)
    mark: Watermark  # the watermark when the step began
    tools: ToolContext
    usage: Usage = field(default_factory=Usage)
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


def _extracts(call: agent_config.CallSetup) -> bool:
    """Whether the model answers one structured document instead of calling tools."""
    return call.card is not None and call.card.memory_extraction == "structured"


def instructions(prompt: str, call: agent_config.CallSetup, job: str) -> str:
    """The system prompt: the profile's replaces the built-in one; with tool calls the
    NO_MEMORIES answer stays part of the contract (without it an empty extraction could not
    be told from prose); a structured answer says "nothing" with its empty lists. The job's
    own instructions (its input) follow."""
    structured = _extracts(call)
    text = prompt or (MEMORY_EXTRACTION_PROMPT if structured else MEMORY_PROMPT)
    if not structured and NO_MEMORIES not in text:
        text += f"\n\nIf there is nothing to save or forget, reply {NO_MEMORIES} and nothing else."
    if job.strip():
        text += "\n\nThe job's instructions:\n" + job.strip()
    return text


class MemoryAgent(ToolLoop):
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
        super().__init__(
            model,
            tools,
            max_tool_rounds=max(1, max_tool_rounds),
            tool_timeout_seconds=tool_timeout_seconds,
            models=models,
            memories=memories,
        )
        self.watermarks = watermarks

    async def run(self, step: StepRequest) -> AsyncGenerator[StepItem, None]:
        if step.client_tools:
            raise InvalidArgument("client_tools", "the memory agent runs no client-side tools")
        offer = self.offer(step, asks=False)
        watermark = core.watermark_name(step.thread_id, [t.name for t in offer.specs])
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

        said = [m for m in fresh if m.role is Role.USER]
        # The owner's memories the new messages may restate or contradict: the model updates
        # or forgets them instead of writing near-duplicates.
        prepared = await self.prepare(
            step,
            offer,
            queries=[m.text for m in said],
            in_context=[m.id for m in step.context],
            instructions=lambda prompt, call: instructions(prompt, call, step.input.text),
        )
        if prepared.recalled is not None:
            yield prepared.recalled
        tools = ToolContext(
            step.owner,
            step.run_id,
            step.thread_id,
            step.time_zone,
            source_message_ids=tuple(m.id for m in said),
            source_texts=tuple(m.text for m in said),
        )
        progress = _Progress(step, offer, watermark, mark, tools)
        context = Context([*prepared.leading, *transcript(fresh)], [])
        extract = self._structured if _extracts(prepared.call) else self._tool_calls
        async for item in extract(progress, prepared.call, context):
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
        self, progress: _Progress, call: agent_config.CallSetup, context: Context
    ) -> AsyncIterator[StepItem]:
        """One model turn answering the EXTRACTION_SCHEMA document; its memories and forgets
        run as the memory tool calls they stand for (same policy, audit and events)."""
        turn = Turn(core.turn_message_id(progress.step.reply_message_id, 0))
        async for event in self.reason(call, context, (), turn, EXTRACTION):
            yield event
        progress.usage = progress.usage + turn.used
        try:
            document: Extraction | None = parse_extraction("".join(turn.text))
            problem = ""
        except ValueError as err:
            document, problem = None, str(err)
        said = [m.text for m in context.history if m.role is Role.USER]
        wanted, unasked = document.calls(said) if document is not None else ([], 0)
        calls = [ToolCallBlock(f"call_{new_id()}", name, arguments) for name, arguments in wanted]
        if unasked:
            log.info("dropped %d forget(s) the user's messages do not ask for", unasked)
        for c in calls:
            for event in turn.calls.whole(c, turn.message_id):
                yield event
        routed = self.route(progress.offer, turn, last=False, calls=calls)
        message = turn.message(routed)
        yield message
        if document is None:
            cut = " (cut at the output limit)" if turn.finished_reason == "length" else ""
            raise unusable(f"its answer{cut} is {problem}")
        if routed:
            async for item in self._act(progress, message, routed, turn):
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
        self, progress: _Progress, call: agent_config.CallSetup, context: Context
    ) -> AsyncIterator[StepItem]:
        """Tool rounds: the model calls memory_write / memory_forget until it answers."""
        for turn_no in range(self.max_tool_rounds + 1):
            last = turn_no == self.max_tool_rounds
            turn = Turn(core.turn_message_id(progress.step.reply_message_id, turn_no))
            offered = () if last else progress.offer.specs
            async for event in self.reason(call, context, offered, turn):
                yield event
            progress.usage = progress.usage + turn.used
            routed = self.route(progress.offer, turn, last)
            message = turn.message(routed)
            yield message
            if not routed:
                if turn_no == 0 and NO_MEMORIES not in "".join(turn.text):
                    raise unusable(
                        "it answered in prose instead of calling a memory tool or saying "
                        + NO_MEMORIES
                    )
                return
            context.pinned.append(message)
            async for item in self._act(progress, message, routed, turn):
                if isinstance(item, Msg) and item.kind is MessageKind.TOOL_RESULT:
                    context.pinned.append(item)
                yield item
            if progress.taken:
                return
            if turn_no == 0 and not progress.succeeded:
                raise unusable("none of its tool calls could be run")

    async def _act(
        self, progress: _Progress, message: Msg, routed: Sequence[Routed], turn: Turn
    ) -> AsyncIterator[StepItem]:
        """Act on the turn's calls (loop.ToolLoop.act), counting what ran well. Before the
        first, the watermark is read again: if another run moved it, these messages are
        that run's and nothing runs (progress.taken)."""
        if not progress.checked:
            progress.checked = True
            current = await self.watermarks.watermark(progress.step.owner, progress.watermark)
            if current.position != progress.mark.position:
                progress.taken = True
                results_id = new_id()
                taken = []
                for i, r in enumerate(routed):
                    lifecycle = turn.calls.lifecycle(r.call.id)
                    if not lifecycle.finished:
                        lifecycle.interrupt()
                    result = ToolResultBlock(
                        r.call.id, r.call.name, TAKEN, ToolResultState.INTERRUPTED
                    )
                    event_id = tool_result_message_id(results_id, i)
                    for event in turn.calls.result(r.call.id, event_id, TAKEN):
                        yield event
                    taken.append(result)
                yield assistant(taken, id=results_id, kind=MessageKind.TOOL_RESULT)
                return
        acted = Acted()
        async for item in self.act(message, routed, turn, progress.tools, acted):
            yield item
        for result in acted.results.tool_results if acted.results is not None else ():
            if result.state is ToolResultState.SUCCESS:
                progress.succeeded.append(result.name)
                if result.name == MemoryForget.name:
                    progress.forgotten += forgotten_count(result.text)


async def _reply(message_id: str, text: str) -> AsyncIterator[StepItem]:
    yield TextStart(message_id)
    yield TextDelta(message_id, text)
    yield TextEnd(message_id)
    yield assistant(text, id=message_id, kind=MessageKind.AGENT_REPLY, finished_reason="stop")
