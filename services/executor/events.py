"""What an agent step produces, in domain terms: stream events, finished messages, the result.

The servicer turns these into ExecuteResponse items; the orchestrator numbers the events.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.messages import Msg, Usage


@dataclass(frozen=True)
class TextStart:
    message_id: str


@dataclass(frozen=True)
class TextDelta:
    message_id: str
    delta: str


@dataclass(frozen=True)
class TextEnd:
    message_id: str


@dataclass(frozen=True)
class ToolCallStart:
    tool_call_id: str
    name: str
    parent_message_id: str


@dataclass(frozen=True)
class ToolCallArgs:
    tool_call_id: str
    delta: str


@dataclass(frozen=True)
class ToolCallEnd:
    tool_call_id: str


@dataclass(frozen=True)
class ToolCallResult:
    message_id: str
    tool_call_id: str
    content: str


StepEvent = TextStart | TextDelta | TextEnd | ToolCallStart | ToolCallArgs | ToolCallEnd | ToolCallResult


@dataclass(frozen=True)
class StepResult:
    """How a step ended: the last item of a step that did not fail."""

    finished_reason: str
    usage: Usage = Usage()
    # Client-side tool calls the step ended on: the run waits for the client's results.
    pending_tool_call_ids: tuple[str, ...] = ()


# A finished message (reply, tool calls, tool results) to be stored by the orchestrator.
StepItem = StepEvent | Msg | StepResult
