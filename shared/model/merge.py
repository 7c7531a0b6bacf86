"""Type-aware streaming merge: ChatResponse chunks accumulate into one assistant Msg.

Rules, by the type of a chunk's block:
- text, thinking and hint deltas concatenate onto the last block when it has the same
  type, and start a new block otherwise (so text, tool call, text stays three blocks);
- a tool_call delta merges into the earlier call with the same id wherever it is: its
  input fragments concatenate as a string (never parsed while streaming; parse once at the
  end with ToolCallBlock.arguments(), which names the call on invalid JSON), its name is
  the first non-empty name, its state the latest one;
- a data delta right after a data block continues that block: inline audio of the same
  MIME type appends its bytes; anything else (image, video, file, a URL, or a different
  media type or MIME type) replaces the block, since a response streams one asset at a
  time and a new version supersedes the old. A data delta after any other block starts a
  new block;
- a tool_result delta replaces the earlier result with the same id, else appends.

One accumulator may span several model calls of one message (a tool loop): a chunk with
is_last ends the current call, whose usage (providers report it per call, once or
cumulatively, so the last report wins) adds to the message's usage; the next chunk
starts another call. The message's finished_reason is its last call's.

Accumulation is O(n) in the total size: fragments are kept in lists and joined once, in
`message()`.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from dataclasses import dataclass, field
from typing import Any

from shared.messages import (
    Block,
    DataBlock,
    HintBlock,
    Msg,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolCallState,
    ToolResultBlock,
    Usage,
    new_id,
)
from shared.model.base import ChatResponse

_CONCATENATED: dict[type, str] = {TextBlock: "text", ThinkingBlock: "thinking", HintBlock: "hint"}


@dataclass
class _Slot:
    """One block being accumulated: its kind, fragments and the fields that are not fragments."""

    kind: type
    parts: list[Any] = field(default_factory=list)
    tool_id: str = ""
    name: str = ""
    state: ToolCallState = ToolCallState.PENDING
    block: Block | None = None  # data and tool_result blocks: the block itself
    mime_type: str = ""

    def build(self) -> Block:
        if self.kind is ToolCallBlock:
            text = "".join(self.parts)
            return ToolCallBlock(id=self.tool_id, name=self.name, input=text, state=self.state)
        if self.kind is DataBlock:
            assert isinstance(self.block, DataBlock)
            if len(self.parts) > 1:
                return DataBlock(
                    self.block.mime_type, data=b"".join(self.parts), name=self.block.name
                )
            return self.block
        if self.kind is ToolResultBlock:
            assert self.block is not None
            return self.block
        built: Block = self.kind("".join(self.parts))
        return built


def _is_audio_stream(block: DataBlock) -> bool:
    return block.media == "audio" and block.data is not None


class MessageAccumulator:
    """Accumulates the chunks of one or more model calls into one assistant message."""

    def __init__(self, *, id: str | None = None, name: str = "assistant") -> None:
        self.id = id or new_id()
        self.name = name
        self._slots: list[_Slot] = []
        self._tool_slots: dict[str, _Slot] = {}
        self._result_slots: dict[str, _Slot] = {}
        self._usage: Usage | None = None  # summed over finished calls
        self._call_usage: Usage | None = None  # the current call's latest report
        self.finished_reason = ""
        self.calls = 0  # finished model calls
        self._in_call = False

    @property
    def done(self) -> bool:
        """Whether the last chunk seen ended a model call."""
        return not self._in_call and self.calls > 0

    @property
    def usage(self) -> Usage | None:
        """Usage summed over the finished calls (plus the current call's latest report)."""
        if self._call_usage is None:
            return self._usage
        return self._call_usage if self._usage is None else self._usage + self._call_usage

    def add(self, chunk: ChatResponse) -> None:
        self._in_call = True
        for block in chunk.content:
            self._add_block(block)
        if chunk.usage is not None:
            self._call_usage = chunk.usage
        if chunk.is_last:
            self._usage = self.usage
            self._call_usage = None
            self.finished_reason = chunk.finished_reason
            self.calls += 1
            self._in_call = False

    def _add_block(self, block: Block) -> None:
        last = self._slots[-1] if self._slots else None
        kind = type(block)
        if kind in _CONCATENATED:
            delta = getattr(block, _CONCATENATED[kind])
            if last is not None and last.kind is kind:
                last.parts.append(delta)
            else:
                self._slots.append(_Slot(kind, [delta]))
        elif isinstance(block, ToolCallBlock):
            slot = self._tool_slots.get(block.id)
            if slot is None:
                slot = _Slot(ToolCallBlock, tool_id=block.id)
                self._tool_slots[block.id] = slot
                self._slots.append(slot)
            slot.parts.append(block.input)
            slot.name = slot.name or block.name
            slot.state = block.state
        elif isinstance(block, DataBlock):
            self._add_data(block, last)
        elif isinstance(block, ToolResultBlock):
            existing = self._result_slots.get(block.id)
            if existing is not None:
                existing.block = block
            else:
                slot = _Slot(ToolResultBlock, block=block)
                self._result_slots[block.id] = slot
                self._slots.append(slot)
        else:
            raise TypeError(f"not a content block: {block!r}")

    def _add_data(self, block: DataBlock, last: _Slot | None) -> None:
        if last is None or last.kind is not DataBlock:
            self._slots.append(_Slot(DataBlock, [block.data], block=block))
            return
        previous = last.block
        assert isinstance(previous, DataBlock)
        same_mime = block.mime_type == previous.mime_type
        if same_mime and _is_audio_stream(block) and _is_audio_stream(previous):
            last.parts.append(block.data)
        else:
            last.block = block
            last.parts = [block.data]

    def content(self) -> tuple[Block, ...]:
        """The blocks so far (joins every fragment: call it once, at the end)."""
        return tuple(slot.build() for slot in self._slots)

    def message(self, **fields: Any) -> Msg:
        """The accumulated assistant message; `fields` set other Msg fields (metadata, ...)."""
        return Msg(
            id=self.id,
            role=Role.ASSISTANT,
            content=self.content(),
            name=self.name,
            usage=self.usage,
            finished_reason=self.finished_reason,
            **fields,
        )


async def collect(
    stream: AsyncIterable[ChatResponse], accumulator: MessageAccumulator | None = None
) -> Msg:
    """Drain one model call into `accumulator` (a new one by default) and return the message."""
    acc = accumulator or MessageAccumulator()
    async for chunk in stream:
        acc.add(chunk)
    return acc.message()
