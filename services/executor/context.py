"""What of a thread goes into a model call: the context budget from the model's card.

A call must fit card.context_size, less the output it may produce (the call's max_tokens,
else the card's output_size) and less what it must carry whatever the thread holds (the
prompt's own size: leading system messages, this step's input and turns, the offered
tools). What is left is the budget of the thread's earlier messages, counted with
shared.model.tokens' estimate, or by the model's own tokenizer when its card has one (the
caller passes that count: shared.model.tokens.text_counter). The oldest go first, whole
groups at a time: an assistant message with tool calls and the message(s) carrying their
results are one group, so a call never reaches the model without its result or a result
without its call. So a thread never dies of its own length: its newest messages always
fit, down to none. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shared.messages import Msg, Role
from shared.model.base import ToolSpec
from shared.model.cards import ModelCard
from shared.model.tokens import (
    TextCount,
    message_tokens,
    messages_tokens,
    text_tokens,
    tools_tokens,
)


@dataclass(frozen=True)
class Fitted:
    """The messages of one call and what was left out to fit them."""

    messages: list[Msg]
    dropped: int
    # The estimated input tokens of `messages` and the offered tools.
    input_tokens: int


def output_reserve(card: ModelCard, max_tokens: int | None = None) -> int:
    """The output a call may produce: its max_tokens (the profile's), else the card's
    max_tokens default, else the card's output_size."""
    limit = max_tokens or card.resolve_parameters().get("max_tokens")
    return min(int(limit), card.output_size) if limit else card.output_size


def input_budget(card: ModelCard, max_tokens: int | None = None) -> int:
    """The tokens a call's input may take."""
    return max(0, card.context_size - output_reserve(card, max_tokens))


def recall_budget(
    budget: int | None, carried: Sequence[Msg], tools: Sequence[ToolSpec], limit: int
) -> int:
    """The tokens a recalled memories block may take (services.executor.recall): `limit`
    (the profile's), and no more than is left of `budget` once the call carries `carried`
    (the prompt, this step's input) and `tools`. The block leads the context, so the
    thread's earlier messages make room for it, never the other way round."""
    if budget is None:
        return limit
    left = budget - messages_tokens(carried) - tools_tokens(tools)
    return max(0, min(limit, left))


def groups(messages: Sequence[Msg]) -> list[list[Msg]]:
    """The messages in units that stay together: a message whose tool results answer calls
    of the group before it joins that group."""
    out: list[list[Msg]] = []
    open_calls: set[str] = set()
    for msg in messages:
        results = {r.id for r in msg.tool_results}
        if out and results and results & open_calls:
            out[-1].append(msg)
        else:
            out.append([msg])
            open_calls = set()
        open_calls |= {c.id for c in msg.tool_calls}
        open_calls -= results
    return out


def fit(
    history: Sequence[Msg],
    pinned: Sequence[Msg],
    tools: Sequence[ToolSpec],
    budget: int,
    count: TextCount = text_tokens,
) -> Fitted:
    """`history` (the thread's earlier messages, oldest first) cut to what fits `budget`
    beside `pinned` (this step's input and turns: always sent) and `tools`. Leading system
    messages of `history` are the prompt: always kept, ahead of the rest."""
    head = 0
    while head < len(history) and history[head].role == Role.SYSTEM:
        head += 1
    prompt, rest = list(history[:head]), history[head:]
    fixed = messages_tokens(prompt, count) + messages_tokens(pinned, count)
    fixed += tools_tokens(tools, count)
    left = budget - fixed
    kept: list[list[Msg]] = []
    used = 0
    for group in reversed(groups(rest)):
        size = sum(message_tokens(m, count) for m in group)
        if used + size > left:
            break
        kept.append(group)
        used += size
    chosen = [m for group in reversed(kept) for m in group]
    return Fitted([*prompt, *chosen, *pinned], len(rest) - len(chosen), fixed + used)
