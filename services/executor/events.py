"""What an agent step produces, in domain terms: stream events, finished messages, the result.

One vocabulary for both agents; the servicer turns these into ExecuteResponse items (the
only place that speaks the run-event protobuf), and the orchestrator numbers the events.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.approvals import Pending
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


@dataclass(frozen=True)
class ToolDenied:
    """A tool call the step refused (shared.tools.authorize): the orchestrator audits it."""

    tool_call_id: str
    tool_name: str
    arguments_sha256: str
    reason: str  # a shared.tools.DenialReason value


# The tool-call events come from services.executor.toolcalls.ToolCallTracker, the one owner
# of "START was emitted" (each at most once per call, END after START).
StepEvent = (
    TextStart | TextDelta | TextEnd | ToolCallStart | ToolCallArgs | ToolCallEnd | ToolCallResult
)


@dataclass(frozen=True)
class StepResult:
    """How a step ended: the last item of a step that did not fail."""

    finished_reason: str
    usage: Usage = field(default_factory=Usage)
    # Client-side tool calls the step ended on: the run waits for the client's results.
    pending_tool_call_ids: tuple[str, ...] = ()
    # Server-side calls the step ended on: they wait for a person's approval.
    approvals: tuple[Pending, ...] = ()


@dataclass(frozen=True)
class TurnUsage:
    """The usage of the model turn under way, so far: as the turn starts (its input tokens,
    estimated, no output) and when the model reports usage before the turn ends. The turn's
    message carries its final usage; this lets the orchestrator count a turn that a cancel
    or a broken stream cuts short (the run still reports what it used)."""

    usage: Usage


# A finished message (reply, tool calls, tool results) to be stored by the orchestrator.
StepItem = StepEvent | ToolDenied | Msg | StepResult | TurnUsage
