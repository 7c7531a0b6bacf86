"""Pure rules of the executor: which agent runs a step, where a tool call goes, the memory
agent's provenance and watermark. Which server-side tools a step offers and may run is
shared.tools' rule; how streamed tool-call fragments assemble, services.executor.toolcalls'.
No I/O."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from enum import StrEnum
from typing import TypeVar

from shared.domain import ExecutorKind, MessageKind
from shared.errors import FailedPrecondition
from shared.messages import Msg, new_id

A = TypeVar("A")


def select_agent(executor: ExecutorKind, agents: Mapping[ExecutorKind, A]) -> A:
    """The agent hosting `executor`; FAILED_PRECONDITION when this executor has none."""
    agent = agents.get(executor)
    if agent is None:
        raise FailedPrecondition(
            f"{executor.value} executor not available", reason="EXECUTOR_NOT_AVAILABLE"
        )
    return agent


class ToolRoute(StrEnum):
    """Where a tool call goes (services.executor.agents.loop.ToolLoop.route decides with
    shared.tools.authorize)."""

    SERVER = "server"  # run here, result fed to the next model turn
    CLIENT = "client"  # the step ends; the client runs it
    FORBIDDEN = "forbidden"  # not executed; the model gets an error result
    # Marked requires_approval: never run without a person's decision; the step ends and
    # the call waits for it (shared.approvals).
    NEEDS_APPROVAL = "needs_approval"


def forbidden_tool_message(name: str, reason: str = "") -> str:
    why = f" ({reason})" if reason else ""
    return f"error: tool {name!r} is not available to this run{why}; it was not executed"


def turn_message_id(reply_message_id: str, turn: int) -> str:
    """The first model turn's message carries the reply id the orchestrator chose."""
    return reply_message_id if turn == 0 else new_id()


def turn_kind(has_tool_calls: bool) -> MessageKind:
    return MessageKind.TOOL_CALL if has_tool_calls else MessageKind.AGENT_REPLY


# ---- the memory agent's provenance --------------------------------------------------------

_WORD_RE = re.compile(r"[^\W_]+")


def _cjk(c: str) -> bool:
    return "\u3040" <= c <= "\u30ff" or "\u3400" <= c <= "\u9fff" or "\uac00" <= c <= "\ud7af"


def _features(text: str) -> set[str]:
    """What two texts about one fact share: the words of two letters or more (casefolded),
    and the character pairs of CJK runs (written without spaces)."""
    out: set[str] = set()
    for word in _WORD_RE.findall(unicodedata.normalize("NFKC", text).casefold()):
        run = "".join(c if _cjk(c) else " " for c in word)
        for piece in run.split():
            out.update(piece[i : i + 2] for i in range(max(1, len(piece) - 1)))
        rest = "".join(" " if _cjk(c) else c for c in word).split()
        out.update(w for w in rest if len(w) > 1)
    return out


def stating_messages(
    fact: str, ids: Sequence[str], texts: Sequence[str], *, newest: bool = False
) -> tuple[str, ...]:
    """The messages (of `ids`, oldest first, texts `texts`) that state `fact`: those sharing
    the most words (CJK: character pairs) with it; with `newest`, only the newest of them
    (a forget: the request comes after the messages that told the fact). When none shares
    any, all of them: the fact came from the window and no one message can be told."""
    fact_features = _features(fact)
    scores = [len(fact_features & _features(t)) for t in texts]
    best = max(scores, default=0)
    if best == 0 or len(ids) != len(texts):
        return tuple(ids)
    chosen = tuple(i for i, score in zip(ids, scores, strict=True) if score == best)
    return chosen[-1:] if newest else chosen


# ---- the memory agent's watermark -----------------------------------------------------------

# The tools by which a memory run acts on what it reads: what it can do with a request.
ACTING_MEMORY_TOOLS = ("memory_forget", "memory_write")


def watermark_name(thread_id: str, offered: Iterable[str]) -> str:
    """The watermark of a memory run: one per consumer and capability. A job runs on a
    thread of its own, so the thread names the job; the memory tools it may call say what
    it can act on. So a job that may only write never moves the watermark of one that may
    forget too: each reads every message once itself, and no request is used up by a job
    that cannot act on it (a job whose tools change starts a new watermark and reads its
    window again: its writes are idempotent)."""
    acting = ",".join(t for t in ACTING_MEMORY_TOOLS if t in set(offered))
    digest = hashlib.sha256(f"{thread_id}\n{acting}".encode()).hexdigest()[:40]
    return f"memory_agent.{digest}"


def watermark_position(sequence: int, message_id: str) -> str:
    """The watermark's opaque position: the owner commit sequence processed up to."""
    return json.dumps({"sequence": sequence, "message_id": message_id}, separators=(",", ":"))


def watermark_sequence(position: str) -> int | None:
    """The sequence of a watermark's position; None for a never-advanced one, or one that
    is unreadable or of the old form (by message time): reprocessing is harmless (memory
    writes are idempotent), skipping messages would not be."""
    if not position:
        return None
    try:
        sequence = json.loads(position)["sequence"]
    except (ValueError, KeyError, TypeError):
        return None
    return sequence if isinstance(sequence, int) and not isinstance(sequence, bool) else None


@dataclass(frozen=True)
class Unread:
    """What a memory run reads, and where its watermark goes once it has."""

    messages: list[Msg]
    # The sequence the watermark moves to.
    upto: int


def unread(context: Sequence[Msg], after: int | None, horizon: int) -> Unread:
    """The messages after the watermark `after`, oldest commit first, and where the
    watermark moves once they are processed.

    `horizon` (history's: every message of the owner numbered up to it had committed before
    the context was read) bounds both: a message numbered above it is left to the next run
    (it committed while the context was read, and a message numbered below it might not
    have been visible yet), and the watermark moves to the horizon. So a message that
    commits late is never skipped: it has a higher number than any committed before it.
    Without a horizon (0): every newer message, and the watermark moves to the newest.
    Messages stored before sequences existed (0) are read by a watermark's first run only.
    """
    fresh = [
        m
        for m in context
        if (after is None or m.sequence > after) and (not horizon or m.sequence <= horizon)
    ]
    fresh.sort(key=lambda m: (m.sequence, m.created_at.astimezone(UTC), m.thread_id, m.position))
    upto = horizon or max((m.sequence for m in fresh), default=after or 0)
    return Unread(fresh, max(upto, after or 0))
