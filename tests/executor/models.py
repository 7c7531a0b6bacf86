"""A chat model that plays given turns: a real implementation of the ChatModel protocol for
driving the tool loop (the scripted model's tool calls are another engineer's work)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

from shared.messages import Block, Msg, TextBlock, ToolCallBlock, Usage
from shared.model.base import ChatResponse, ToolSpec

Turn = Sequence[Block]


def text(value: str) -> Turn:
    return [TextBlock(w) for w in value.split(" ") if w]


def call(call_id: str, name: str, arguments: str = "{}") -> Turn:
    # Streamed as a provider does: the name first, the JSON input in fragments.
    half = len(arguments) // 2
    return [
        ToolCallBlock(call_id, name, arguments[:half]),
        ToolCallBlock(call_id, "", arguments[half:]),
    ]


class TurnsModel:
    """Plays `turns` in order (the last one again once they run out); records what it saw."""

    name = "turns"

    def __init__(
        self,
        turns: Sequence[Turn] | Callable[[int], Turn],
        *,
        latency: float = 0.0,
    ) -> None:
        self.turns = turns
        self.latency = latency
        self.seen: list[tuple[list[Msg], list[str]]] = []
        self.open_streams = 0
        self.closed_streams = 0

    def _turn(self, n: int) -> Turn:
        if callable(self.turns):
            return self.turns(n)
        return self.turns[min(n, len(self.turns) - 1)]

    async def stream(
        self, messages: Sequence[Msg], *, tools: Sequence[ToolSpec] = ()
    ) -> AsyncIterator[ChatResponse]:
        turn = self._turn(len(self.seen))
        self.seen.append((list(messages), [t.name for t in tools]))
        self.open_streams += 1
        try:
            for block in turn:
                if self.latency:
                    await asyncio.sleep(self.latency)
                yield ChatResponse(content=(block,))
            has_calls = any(isinstance(b, ToolCallBlock) for b in turn)
            yield ChatResponse(
                is_last=True,
                finished_reason="tool_calls" if has_calls else "stop",
                usage=Usage(3, len(turn)),
            )
        finally:
            self.open_streams -= 1
            self.closed_streams += 1
