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

With the policy's `conversation`, the owner's past chat messages are searched too (the
memory service's SearchConversation, ranked as memories are), without the messages already
in the step's context; memories and messages share one ranking by score and the same
top_k and budget. A message is shown as an excerpt with its date and who said it, under
its own header; the audit record lists it with source "conversation" and its thread.

A memory service that cannot answer does not fail the run: the step goes on without the
block (logged); a user's chat is worth more than the memories it would have seen.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

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
CONVERSATION_HEADER = (
    "From the user's earlier conversations (excerpts found for this message; use them when "
    "they are relevant):"
)
# The memory agent searches with each of its newest user messages, at most this many.
MAX_QUERIES = 10
# A recalled message is shown by its beginning.
MAX_EXCERPT_CHARS = 500
# The memory service's bound of the messages a search leaves out (the newest are sent).
MAX_EXCLUDED = 1000
# Recalled.kind of a chat message (a memory's is its kind: fact, preference, ...).
CONVERSATION = "conversation"


@dataclass(frozen=True)
class Recalled:
    id: str
    content: str
    kind: str
    score: float
    # A chat message (kind CONVERSATION): its thread, who said it and when.
    thread_id: str = ""
    role: str = ""
    said_at: datetime | None = None


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


@runtime_checkable
class ConversationSearch(Protocol):
    async def search_conversation(
        self, owner: str, query: str, page_size: int, exclude: Sequence[str]
    ) -> list[Any]: ...


def _line(item: Recalled) -> str:
    if item.kind != CONVERSATION:
        return f"- {item.content}"
    excerpt = item.content[:MAX_EXCERPT_CHARS] + (
        "…" if len(item.content) > MAX_EXCERPT_CHARS else ""
    )
    who = "the user" if item.role == "user" else "you"
    when = f"{item.said_at.date().isoformat()}, " if item.said_at is not None else ""
    return f"- ({when}{who} said) {excerpt}"


def block_text(recalled: Sequence[Recalled]) -> str:
    """What the model reads: the header, then one line per memory; then the recalled chat
    messages under their own header. Empty without either."""
    memories = [r for r in recalled if r.kind != CONVERSATION]
    said = [r for r in recalled if r.kind == CONVERSATION]
    lines: list[str] = []
    if memories:
        lines += [HEADER, *map(_line, memories)]
    if said:
        lines += [CONVERSATION_HEADER, *map(_line, said)]
    return "\n".join(lines)


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


async def search_conversation(
    messages: ConversationSearch,
    owner: str,
    queries: Sequence[str],
    policy: MemoryPolicy,
    exclude: Sequence[str],
) -> list[Recalled] | None:
    """The owner's past chat messages for `queries`, ranked, none of `exclude`; None when
    the memory service failed."""
    texts = [q.strip()[:MAX_QUERY_CHARS] for q in queries if q.strip()][-MAX_QUERIES:]
    left_out = list(dict.fromkeys(exclude))[-MAX_EXCLUDED:]
    results: list[list[Recalled]] = []
    for text in texts:
        try:
            hits = await messages.search_conversation(owner, text, policy.top_k, left_out)
        except DomainError as err:
            if isinstance(err, InvalidArgument):
                continue
            log.warning(
                "recall: the conversation search did not answer; the step runs without it",
                extra={"fields": {"error": err.reason}},
            )
            return None
        results.append([_said(h) for h in hits])
    return merge(results)


def _said(hit: Any) -> Recalled:
    """A SearchConversation hit (memory service ConversationHit) as a recalled item."""
    m = hit.message
    when = m.create_time.ToDatetime(tzinfo=UTC) if m.HasField("create_time") else None
    return Recalled(m.message_id, m.text, CONVERSATION, float(hit.score), m.thread_id, m.role, when)


async def recall(
    memories: MemorySearch | None,
    owner: str,
    policy: MemoryPolicy,
    queries: Sequence[str],
    room: int,
    in_context: Sequence[str] = (),
) -> Recall:
    """The memories (and with the policy's `conversation`, the past chat messages, none of
    `in_context`) a step recalls by its policy, within `room` tokens (none when the policy
    is off or the memory service failed), and how its memory searches ran."""
    if policy.mode != "recall" or memories is None or room <= 0:
        return NOTHING
    said: list[Recalled] | None = None
    if policy.conversation and isinstance(memories, ConversationSearch):
        # Side by side: the run waits for the slower of the two, not their sum.
        found, said = await asyncio.gather(
            search(memories, owner, queries, policy),
            search_conversation(memories, owner, queries, policy, in_context),
        )
    else:
        found = await search(memories, owner, queries, policy)
    ranked = merge([[] if found is None else found.memories, said or []])
    chosen = choose(ranked, policy, min(room, policy.max_tokens))
    if found is None:  # the memory search failed: its mode is unknown
        return Recall(chosen)
    return Recall(chosen, found.mode, found.reason)


def recall_message(recalled: Recall, message_id: str) -> Msg:
    """The audit record of the block: its text, the ids and scores it used, and how the
    search ran (memory_search: mode, and for lexical its reason)."""
    memories = recalled.memories
    metadata: dict[str, Any] = {"memory_recall": [_audited(m) for m in memories]}
    if recalled.mode:
        how = {"mode": recalled.mode, **({"reason": recalled.reason} if recalled.reason else {})}
        metadata["memory_search"] = how
    return system(
        block_text(memories), id=message_id, kind=MessageKind.MEMORY_RECALL, metadata=metadata
    )


def _audited(item: Recalled) -> dict[str, Any]:
    """An item of the audit record: a memory's id and score; a chat message's also its
    source and thread."""
    entry: dict[str, Any] = {"id": item.id, "score": round(item.score, 6)}
    if item.kind == CONVERSATION:
        entry.update(source=CONVERSATION, threadId=item.thread_id)
    return entry


def recall_message_id(reply_message_id: str) -> str:
    """One per step, derived from its reply's id: a step tried again replaces it."""
    return f"{reply_message_id[:120]}.recall"
