"""Server-side tools: what a tool is, and the registry of those this executor can run.

A tool runs on behalf of the run's owner (ToolContext.owner): a tool that reads or writes
anything owner-scoped passes that owner on and never takes one from its arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from shared.model.base import ToolSpec


@dataclass(frozen=True)
class ToolContext:
    owner: str
    run_id: str
    thread_id: str
    time_zone: str
    # The messages the step works from (the memory agent's sources of a memory).
    source_message_ids: tuple[str, ...] = ()
    # Their texts, in the same order: a memory cites those that state it
    # (services.executor.core.stating_messages).
    source_texts: tuple[str, ...] = ()


class ToolError(Exception):
    """A failure whose message is meant for the model (bad arguments, nothing found, ...)."""


class Tool(Protocol):
    name: str
    description: str
    # JSON Schema of the arguments.
    parameters: Mapping[str, Any]

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Run the tool; the text returned is the tool result the model sees."""
        ...


class ToolRegistry:
    """The tools registered in this process (the system allowlist of the tool policy)."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"tool {tool.name!r} registered twice")
            self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def spec(self, name: str) -> ToolSpec:
        tool = self._tools[name]
        return ToolSpec(name=tool.name, description=tool.description, parameters=tool.parameters)
