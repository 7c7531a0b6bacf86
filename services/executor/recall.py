"""Recall: the owner's memories most relevant to a step's input, put into the step's context
as one block (the profile's MemoryPolicy, shared.profiles).

The query is the input's text (the user's latest message; for the memory agent, each of
the new user messages); the memory service's SearchMemories ranks the owner's memories
for it. Of its results, best first, those of at least `min_relevance` are kept, at most
`top_k`, and no more than fit `max_tokens` and the room the call's context leaves
(services.executor.context.recall_budget). The block is a system message: the prompt's
{memories} placeholder holds it, else it follows the prompt. The step also yields it as a
message of kind memory_recall with the ids and scores it used and how the search ran
(hybrid, or lexical and why: the model was late, down or absent), which the run stores for
the audit only (never in /history, never in a later run's context: each run recalls
afresh).

A memory service that cannot answer does not fail the run: the step goes on without the
block (logged); a user's chat is worth more than the memories it would have seen.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from shared.domain import SEARCH_MODE_NAMES, MessageKind
from shared.errors import DomainError, InvalidArgument
from shared.messages import Msg, system
from shared.model.tokens import text_tokens
from shared.profiles import MemoryPolicy

log = logging.getLogger("agentmesh.executor.recall")

HEADER = (
    "What you know about the user (their saved memories; use them when they are relevant, "
    "never mention this list):"
)
# A search query is at most this long (the memory service's rule); longer input is cut.
MAX_QUERY_CHARS = 2000
# The memory agent searches with each of its newest user messages, at most this many.
MAX_QUERIES = 10


@dataclass(frozen=True)
class Recalled:
    id: str
    content: str
    kind: str
    score: float


class MemorySearch(Protocol):
    async def search_response(self, owner: str, query: str, page_size: int = 10) -> Any:
        """SearchMemoriesResponse-like: memories, mode, mode_reason."""
        ...


@dataclass(frozen=True)
class Recall:
    """What a step recalled, and how the searches ran: `mode` "hybrid" or "lexical" (any of
    its searches ran by words only, `reason` saying why), "" when the memory service did
    not say."""

    memories: list[Recalled]
    mode: str = ""
    reason: str = ""


NOTHING = Recall([])


def block_text(memories: Sequence[Recalled]) -> str:
    """What the model reads: the header, then one line per memory. Empty without memories."""
    if not memories:
        return ""
    return "\n".join([HEADER, *(f"- {m.content}" for m in memories)])


def choose(found: Sequence[Recalled], policy: MemoryPolicy, budget: int) -> list[Recalled]:
    """Of `found` (best first): those of at least min_relevance, at most top_k, while the
    block stays within `budget` tokens. A memory that does not fit ends the block (the
    next ones are less relevant)."""
    chosen: list[Recalled] = []
    for memory in found:
        if len(chosen) == policy.top_k:
            break
        if memory.score < policy.min_relevance:
            continue
        if text_tokens(block_text([*chosen, memory])) > budget:
            break
        chosen.append(memory)
    return chosen


def merge(results: Sequence[Sequence[Recalled]]) -> list[Recalled]:
    """The results of several queries as one ranking: each memory once with its best score,
    best first; ties keep the order the queries found them in."""
    best: dict[str, tuple[Recalled, int]] = {}
    order = 0
    for found in results:
        for memory in found:
            seen = best.get(memory.id)
            if seen is None:
                best[memory.id] = (memory, order)
                order += 1
            elif memory.score > seen[0].score:
                best[memory.id] = (memory, seen[1])
    ranked = sorted(best.values(), key=lambda pair: (-pair[0].score, pair[1]))
    return [memory for memory, _ in ranked]


async def search(
    memories: MemorySearch, owner: str, queries: Sequence[str], policy: MemoryPolicy
) -> Recall | None:
    """The owner's memories for `queries`, ranked, and how the searches ran (lexical when
    one of them was, with its reason); None when the memory service failed."""
    texts = [q.strip()[:MAX_QUERY_CHARS] for q in queries if q.strip()][-MAX_QUERIES:]
    results: list[list[Recalled]] = []
    mode = reason = ""
    for text in texts:
        try:
            answer = await memories.search_response(owner, text, policy.top_k)
        except DomainError as err:
            if isinstance(err, InvalidArgument):
                continue  # e.g. only punctuation: nothing to search with
            log.warning(
                "recall: the memory service did not answer; the step runs without memories",
                extra={"fields": {"error": err.reason}},
            )
            return None
        found = answer.memories
        results.append(
            [Recalled(m.id, m.content, m.kind, float(getattr(m, "score", 0.0))) for m in found]
        )
        ran = SEARCH_MODE_NAMES.get(answer.mode, "")
        if ran and mode != "lexical":
            mode, reason = ran, answer.mode_reason
    return Recall(merge(results), mode, reason)


async def recall(
    memories: MemorySearch | None,
    owner: str,
    policy: MemoryPolicy,
    queries: Sequence[str],
    room: int,
) -> Recall:
    """The memories a step recalls by its policy, within `room` tokens (none when the
    policy is off or the memory service failed), and how its searches ran."""
    if policy.mode != "recall" or memories is None or room <= 0:
        return NOTHING
    found = await search(memories, owner, queries, policy)
    if found is None:
        return NOTHING
    chosen = choose(found.memories, policy, min(room, policy.max_tokens))
    return Recall(chosen, found.mode, found.reason)


def recall_message(recalled: Recall, message_id: str) -> Msg:
    """The audit record of the block: its text, the ids and scores it used, and how the
    search ran (memory_search: mode, and for lexical its reason)."""
    memories = recalled.memories
    metadata: dict[str, Any] = {
        "memory_recall": [{"id": m.id, "score": round(m.score, 6)} for m in memories]
    }
    if recalled.mode:
        how = {"mode": recalled.mode, **({"reason": recalled.reason} if recalled.reason else {})}
        metadata["memory_search"] = how
    return system(
        block_text(memories), id=message_id, kind=MessageKind.MEMORY_RECALL, metadata=metadata
    )


def recall_message_id(reply_message_id: str) -> str:
    """One per step, derived from its reply's id: a step tried again replaces it."""
    return f"{reply_message_id[:120]}.recall"
