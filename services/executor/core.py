"""Pure rules of the executor: which agent runs a step, which tools a step offers, where a
tool call goes, how streamed tool-call fragments assemble. No I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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


def offered_server_tools(authorised: Iterable[str], registered: Iterable[str]) -> tuple[str, ...]:
    """Server-side tools the model is offered: those the run authorised that this process runs."""
    known = set(registered)
    seen: set[str] = set()
    offered = []
    for name in authorised:
        if name in known and name not in seen:
            seen.add(name)
            offered.append(name)
    return tuple(offered)


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
    SERVER = "server"  # run here, result fed to the next model turn
    CLIENT = "client"  # the step ends; the client runs it
    FORBIDDEN = "forbidden"  # not executed; the model gets an error result


def route_tool_call(name: str, server: Iterable[str], client: Iterable[str]) -> ToolRoute:
    if name in set(server):
        return ToolRoute.SERVER
    if name in set(client):
        return ToolRoute.CLIENT
    return ToolRoute.FORBIDDEN


def forbidden_tool_message(name: str) -> str:
    return f"error: tool {name!r} is not available to this run; it was not executed"


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
