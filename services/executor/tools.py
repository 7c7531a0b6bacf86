"""Server-side tools: what a tool is, and the registry of those this executor can run.

A tool runs on behalf of the run's owner (ToolContext.owner): a tool that reads or writes
anything owner-scoped passes that owner on and never takes one from its arguments.

The registry holds the built-ins and the outside sources' tools (services.executor.
tool_sources): an MCP server's tools are those it listed, so the set can grow while the
executor runs (a server that was down at start-up).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
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


# The longest last error a status keeps.
MAX_STATUS_ERROR_CHARS = 300


class SourceState(StrEnum):
    PENDING = "pending"
    CONNECTED = "connected"
    FAILED = "failed"


@dataclass
class SourceStatus:
    """Where one outside source stands, as ListTools reports it to operators."""

    name: str
    state: SourceState = SourceState.PENDING
    tool_count: int = 0
    last_error: str = ""
    last_error_at: datetime | None = None
    last_success_at: datetime | None = None
    next_attempt_at: datetime | None = None
    consecutive_failures: int = 0

    def succeeded(self, tool_count: int) -> None:
        self.state = SourceState.CONNECTED
        self.tool_count = tool_count
        self.last_success_at = datetime.now(UTC)
        self.next_attempt_at = None
        self.consecutive_failures = 0

    def failed(
        self,
        error: str,
        *,
        retry_seconds: float = 0.0,
        max_retry_seconds: float = 0.0,
    ) -> float:
        """Records a failed attempt; the seconds until the next try: `retry_seconds`,
        doubling with each failure in a row, at most `max_retry_seconds` (0: the source is
        not retried on its own, an HTTP tool is tried at its next call)."""
        self.state = SourceState.FAILED
        self.last_error = error[:MAX_STATUS_ERROR_CHARS]
        self.last_error_at = datetime.now(UTC)
        self.consecutive_failures += 1
        delay: float = min(
            retry_seconds * 2.0 ** (self.consecutive_failures - 1), max_retry_seconds
        )
        self.next_attempt_at = self.last_error_at + timedelta(seconds=delay) if delay else None
        return delay


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


class ToolSource(Protocol):
    """Tools from outside (MCP servers, HTTP tools): their current list, and where each
    configured source stands."""

    def tools(self) -> Sequence[Tool]: ...

    def refresh(self) -> None: ...

    def statuses(self) -> Sequence[SourceStatus]: ...


def requires_approval(tool: Tool) -> bool:
    """Whether the tool's source marks it as needing a person's approval per call."""
    return bool(getattr(tool, "requires_approval", False))


def timeout_of(tool: Tool, default: float) -> float:
    """The tool's own deadline (its source's timeout_seconds), else `default`."""
    own = getattr(tool, "timeout_seconds", None)
    return float(own) if own else default


class ToolRegistry:
    """The tools registered in this process (the system allowlist of the tool policy)."""

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        source: ToolSource | None = None,
        *,
        approval: bool = True,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self._source = source
        # False: tools that need a person's approval are left out (an agent with no person).
        self._approval = approval
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"tool {tool.name!r} registered twice")
            self._tools[tool.name] = tool

    def without_approval(self) -> ToolRegistry:
        """The same tools, less those that need a person's approval."""
        return ToolRegistry(self._tools.values(), self._source, approval=False)

    def _all(self) -> dict[str, Tool]:
        tools = self._tools
        if self._source is not None:
            # A built-in keeps its name: an outside tool cannot shadow it.
            tools = {**{t.name: t for t in self._source.tools()}, **self._tools}
        if not self._approval:
            tools = {n: t for n, t in tools.items() if not requires_approval(t)}
        return tools

    def refresh(self) -> None:
        """Ask the sources to list again what they could not list (in the background)."""
        if self._source is not None:
            self._source.refresh()

    def source_statuses(self) -> Sequence[SourceStatus]:
        """Where each configured outside source stands (none without sources)."""
        return self._source.statuses() if self._source is not None else ()

    def builtin_names(self) -> list[str]:
        return sorted(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._all().get(name)

    def names(self) -> list[str]:
        return sorted(self._all())

    def spec(self, name: str) -> ToolSpec:
        tool = self._all()[name]
        return ToolSpec(name=tool.name, description=tool.description, parameters=tool.parameters)
