"""Token counts without the model's tokenizer: a documented, deliberately high estimate.

Used where agentmesh must count before (the context budget, services/executor/context.py)
or without (usage of a server that reports none, marked estimated) the model's own count.

The rule: an ASCII character is a third of a token (English BPE vocabularies average about
four characters a token, code and numbers nearer three), any other character two tokens
(CJK runs one to three tokens a character in small byte-level vocabularies such as
SmolLM2's, fewer in Qwen's or GPT-4o's); each message adds MESSAGE_OVERHEAD for its chat
template's role markers (ChatML: `<|im_start|>role\\n ... <|im_end|>\\n`); a media block
counts DATA_BLOCK_TOKENS; a set of offered tools its JSON schema's text plus
TOOLS_OVERHEAD for the instructions a template wraps them in. Overestimating only leaves
part of the window unused; an underestimate the endpoint refuses (MODEL_CONTEXT_OVERFLOW),
which the worker answers by fitting again into half the budget.

A card whose endpoint tokenizes (card.tokenizer: llama-cpp-python's or llama.cpp's server)
has its texts counted by the model's own tokenizer instead (`text_counter`): every count
below takes the per-text counter to use, and the estimate stays the fallback for a text the
endpoint did not count. Measured against SmolLM2-135M's tokenizer (python -m bench.tokens):
the estimate counts English 1.44 times what the tokenizer does (so it fills the local card's
input budget with about 70% real text) and Chinese 1.08 times, and single texts as low as
0.89 times (numbers and codes): not always high.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol, runtime_checkable

from shared.messages import (
    DataBlock,
    HintBlock,
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from shared.model.base import ToolSpec

MESSAGE_OVERHEAD = 6
DATA_BLOCK_TOKENS = 256
TOOLS_OVERHEAD = 120

# How one text is counted: the estimate, or a model's tokenizer (text_counter).
TextCount = Callable[[str], int]


def text_tokens(text: str) -> int:
    """The estimate for one text."""
    if not text:
        return 0
    ascii_chars = sum(1 for c in text if c < "\x80")
    return math.ceil(ascii_chars / 3) + 2 * (len(text) - ascii_chars)


def message_texts(msg: Msg) -> list[str]:
    """The texts of a message that count (thinking is not sent back, media count as a block)."""
    out: list[str] = []
    for block in msg.content:
        if isinstance(block, TextBlock):
            out.append(block.text)
        elif isinstance(block, HintBlock):
            out.append(block.hint)
        elif isinstance(block, ToolCallBlock):
            out += [block.name, block.input]
        elif isinstance(block, ToolResultBlock):
            out.append(block.text)
    return out


def message_tokens(msg: Msg, count: TextCount = text_tokens) -> int:
    """One message as a provider sends it: its texts by `count`, the template's overheads."""
    total = MESSAGE_OVERHEAD + sum(count(t) for t in message_texts(msg) if t)
    for block in msg.content:
        if isinstance(block, HintBlock | ToolCallBlock | ToolResultBlock):
            total += MESSAGE_OVERHEAD
        elif isinstance(block, DataBlock):
            total += DATA_BLOCK_TOKENS
    return total


def messages_tokens(messages: Iterable[Msg], count: TextCount = text_tokens) -> int:
    return sum(message_tokens(m, count) for m in messages)


def tools_text(tools: Sequence[ToolSpec]) -> str:
    """The offered tools' schemas as one text ("" when none)."""
    if not tools:
        return ""
    schemas = [
        {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
        for t in tools
    ]
    return json.dumps(schemas, ensure_ascii=False)


def tools_tokens(tools: Sequence[ToolSpec], count: TextCount = text_tokens) -> int:
    """The tools offered to a call (0 when none)."""
    return TOOLS_OVERHEAD + count(tools_text(tools)) if tools else 0


@runtime_checkable
class Tokenizes(Protocol):
    """A model whose endpoint counts tokens (shared.model.openai: card.tokenizer)."""

    def count_tokens(self, texts: Sequence[str]) -> Awaitable[list[int] | None]: ...


async def text_counter(
    model: object, messages: Iterable[Msg], tools: Sequence[ToolSpec] = ()
) -> TextCount:
    """How to count the texts of `messages` and `tools` for `model`: its own tokenizer when
    it has one and it answers (asked once for every text not yet counted), else the
    estimate; a text it did not count is estimated."""
    if not isinstance(model, Tokenizes):
        return text_tokens
    texts = list(dict.fromkeys(t for m in messages for t in message_texts(m) if t))
    if tools:
        texts.append(tools_text(tools))
    counts = await model.count_tokens(texts)
    if counts is None:
        return text_tokens
    known = dict(zip(texts, counts, strict=True))

    def count(text: str) -> int:
        found = known.get(text)
        return found if found is not None else text_tokens(text)

    return count
