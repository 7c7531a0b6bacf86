"""Conversation recall's rules, without I/O: what a message of the conversation index is and
which requests are valid.

The index holds an owner's chat messages that the visibility mask lets into a model's
context (mask & CONTEXT_ASSEMBLY: chat user messages and agent replies; never an automation
input), fed by the orchestrator once a chat run finished with its messages kept
(services/orchestrator), so something said once and never extracted as a memory can still be
found from another thread. It is searched exactly as memories are (services.memory.core:
the same tokens, full-text index, vectors and fusion), and it forgets with the messages: a
deleted thread (DeleteConversation, called by the gateway), an owner deleted
(DeleteOwnerData), and a thread older than the retention period (the service's sweep, on
the newest indexed message of each thread: never later than history expires the thread).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from shared.errors import InvalidArgument
from shared.ids import check_identifier, id_problem
from shared.text import check_storable

ROLES = ("user", "assistant")
# A message longer than this is indexed by its beginning (the orchestrator cuts it).
MAX_TEXT_CHARS = 20_000
MAX_MESSAGES_PER_CALL = 100
MAX_EXCLUDED_IDS = 1000


@dataclass(frozen=True)
class Message:
    """One indexed chat message; `score` is a search result's relevance (0 elsewhere)."""

    id: str  # the message's id in history
    thread_id: str
    role: str
    text: str
    create_time: datetime
    score: float = 0.0

    @property
    def update_time(self) -> datetime:
        """Fusion's tie-break (core.Ranked): a message never changes once written."""
        return self.create_time


def validate_message(
    field: str, message_id: str, thread_id: str, role: str, text: str, create_time: datetime
) -> Message:
    check_identifier(message_id, f"{field}.message_id")
    check_identifier(thread_id, f"{field}.thread_id")
    if role not in ROLES:
        raise InvalidArgument(f"{field}.role", f"must be one of {', '.join(ROLES)}")
    body = check_storable(text, f"{field}.text").strip()
    if not body:
        raise InvalidArgument(f"{field}.text", "must not be empty")
    if len(body) > MAX_TEXT_CHARS:
        raise InvalidArgument(f"{field}.text", f"must be at most {MAX_TEXT_CHARS} characters")
    return Message(message_id, thread_id, role, body, create_time)


def check_batch_size(count: int) -> None:
    if count > MAX_MESSAGES_PER_CALL:
        raise InvalidArgument("messages", f"must hold at most {MAX_MESSAGES_PER_CALL} messages")


def validate_excluded(ids: Sequence[str]) -> tuple[str, ...]:
    if len(ids) > MAX_EXCLUDED_IDS:
        raise InvalidArgument("exclude_message_ids", f"must hold at most {MAX_EXCLUDED_IDS} ids")
    for message_id in ids:
        problem = id_problem(message_id)
        if problem is not None:
            raise InvalidArgument("exclude_message_ids", f"each id {problem}")
    return tuple(dict.fromkeys(ids))
