"""The offline scripted model: deterministic replies, streamed word by word."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Sequence

from shared.messages import Msg, Role, TextBlock, Usage
from shared.model.base import ChatResponse, ToolSpec

_WORD = re.compile(r"\S+\s*|\s+")


def reply_text(messages: Sequence[Msg]) -> str:
    """The scripted reply to the last user message, aware of how long the conversation is."""
    last = next((m for m in reversed(messages) if m.role == Role.USER), None)
    said = last.text.strip() if last is not None else ""
    turns = sum(1 for m in messages if m.role == Role.USER)
    if not said:
        return "I did not catch that. Could you say it again?"
    return f'You said: "{said}". This is turn {turns} of our conversation.'


class ScriptedModel:
    name = "scripted"

    def __init__(self, token_latency: float = 0.0) -> None:
        self.token_latency = token_latency

    async def stream(
        self, messages: Sequence[Msg], *, tools: Sequence[ToolSpec] = ()
    ) -> AsyncIterator[ChatResponse]:
        text = reply_text(messages)
        tokens = _WORD.findall(text)
        for token in tokens:
            if self.token_latency:
                await asyncio.sleep(self.token_latency)
            yield ChatResponse(content=(TextBlock(token),))
        prompt_tokens = sum(len(m.text.split()) for m in messages)
        yield ChatResponse(is_last=True, finished_reason="stop", usage=Usage(prompt_tokens, len(tokens)))
