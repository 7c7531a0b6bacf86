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
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

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


def text_tokens(text: str) -> int:
    """The estimate for one text."""
    if not text:
        return 0
    ascii_chars = sum(1 for c in text if c < "\x80")
    return math.ceil(ascii_chars / 3) + 2 * (len(text) - ascii_chars)


def message_tokens(msg: Msg) -> int:
    """The estimate for one message as a provider sends it (thinking is not sent back)."""
    total = MESSAGE_OVERHEAD
    for block in msg.content:
        if isinstance(block, TextBlock):
            total += text_tokens(block.text)
        elif isinstance(block, HintBlock):
            total += MESSAGE_OVERHEAD + text_tokens(block.hint)
        elif isinstance(block, ToolCallBlock):
            total += MESSAGE_OVERHEAD + text_tokens(block.name) + text_tokens(block.input)
        elif isinstance(block, ToolResultBlock):
            total += MESSAGE_OVERHEAD + text_tokens(block.text)
        elif isinstance(block, DataBlock):
            total += DATA_BLOCK_TOKENS
    return total


def messages_tokens(messages: Iterable[Msg]) -> int:
    return sum(message_tokens(m) for m in messages)


def tools_tokens(tools: Sequence[ToolSpec]) -> int:
    """The estimate for the tools offered to a call (0 when none)."""
    if not tools:
        return 0
    schemas = [
        {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
        for t in tools
    ]
    return TOOLS_OVERHEAD + text_tokens(json.dumps(schemas, ensure_ascii=False))
