"""Pure rules of the executor: which agent runs a step, client-tool names, how streamed
tool-call fragments assemble. Which server-side tools a step offers and may run is
shared.tools' rule. No I/O."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TypeVar

from shared.domain import ExecutorKind, MessageKind
from shared.errors import FailedPrecondition, InvalidArgument
from shared.messages import ToolCallBlock, ToolCallState, new_id

A = TypeVar("A")


def select_agent(executor: ExecutorKind, agents: Mapping[ExecutorKind, A]) -> A:
    """The agent hosting `executor`; FAILED_PRECONDITION when this executor has none."""
    agent = agents.get(executor)
    if agent is None:
        raise FailedPrecondition(
            f"{executor.value} executor not available", reason="EXECUTOR_NOT_AVAILABLE"
        )
    return agent


def check_client_tools(client: Sequence[str], server: Iterable[str]) -> None:
    """Client-side tool names are unique and never shadow a server-side tool."""
    seen: set[str] = set()
    server_names = set(server)
    for i, name in enumerate(client):
        if not name:
            raise InvalidArgument(f"client_tools[{i}].name", "must not be empty")
        if name in seen:
            raise InvalidArgument(f"client_tools[{i}].name", f"duplicate tool {name!r}")
        if name in server_names:
            raise InvalidArgument(
                f"client_tools[{i}].name", f"{name!r} is also a server-side tool of this run"
            )
        seen.add(name)


class ToolRoute(StrEnum):
    """Where a tool call goes (the worker decides with shared.tools.authorize)."""

    SERVER = "server"  # run here, result fed to the next model turn
    CLIENT = "client"  # the step ends; the client runs it
    FORBIDDEN = "forbidden"  # not executed; the model gets an error result
    # Marked requires_approval: never run without a person's decision, which this version
    # cannot ask for yet (issue #20); not executed, the model gets an error result.
    NEEDS_APPROVAL = "needs_approval"


def forbidden_tool_message(name: str, reason: str = "") -> str:
    why = f" ({reason})" if reason else ""
    return f"error: tool {name!r} is not available to this run{why}; it was not executed"


def turn_message_id(reply_message_id: str, turn: int) -> str:
    """The first model turn's message carries the reply id the orchestrator chose."""
    return reply_message_id if turn == 0 else new_id()


def turn_kind(has_tool_calls: bool) -> MessageKind:
    return MessageKind.TOOL_CALL if has_tool_calls else MessageKind.AGENT_REPLY


@dataclass
class _Call:
    id: str
    name: str
    input: list[str] = field(default_factory=list)


@dataclass
class ToolCallAssembler:
    """Merges streamed tool-call fragments by id (the input JSON concatenates).

    `add` says explicitly whether the fragment opened the call, so START is emitted once
    per call from a recorded fact, never inferred from a state (seed 002's duplicate-START bug).
    """

    _calls: dict[str, _Call] = field(default_factory=dict)

    def add(self, block: ToolCallBlock) -> tuple[str, bool]:
        """Record a fragment; returns (call id, whether this fragment started the call)."""
        call = self._calls.get(block.id)
        started = call is None
        if call is None:
            call = self._calls[block.id] = _Call(block.id, block.name)
        elif block.name and not call.name:
            call.name = block.name
        if block.input:
            call.input.append(block.input)
        return block.id, started

    def name_of(self, call_id: str) -> str:
        return self._calls[call_id].name

    def blocks(self) -> list[ToolCallBlock]:
        return [
            ToolCallBlock(id=c.id, name=c.name, input="".join(c.input), state=ToolCallState.PENDING)
            for c in self._calls.values()
        ]

    def __bool__(self) -> bool:
        return bool(self._calls)


# ---- the memory agent's watermark -----------------------------------------------------------

# Where a message sits among an owner's messages across threads: history's order of a
# cross-thread context (created_at, thread_id, position).
MessageKey = tuple[datetime, str, int]


def message_key(created_at: datetime, thread_id: str, position: int) -> MessageKey:
    return (created_at.astimezone(UTC), thread_id, position)


def watermark_position(key: MessageKey, message_id: str) -> str:
    """The watermark's opaque position for the last message processed."""
    created_at, thread_id, position = key
    return json.dumps(
        {
            "message_time": created_at.isoformat(),
            "thread_id": thread_id,
            "position": position,
            "message_id": message_id,
        },
        separators=(",", ":"),
    )


def watermark_key(position: str) -> MessageKey | None:
    """The key of a watermark's position; None for a never-advanced (or unreadable) one.

    An unreadable position is treated as never advanced: reprocessing is harmless (memory
    writes are idempotent), skipping messages would not be.
    """
    if not position:
        return None
    try:
        data = json.loads(position)
        created_at = datetime.fromisoformat(data["message_time"])
        if created_at.tzinfo is None:
            return None
        return message_key(created_at, str(data["thread_id"]), int(data["position"]))
    except (ValueError, KeyError, TypeError):
        return None
