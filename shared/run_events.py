"""The one table of run-event kinds: for every payload of agentmesh.type.v1.RunEvent, its
AG-UI event type, the span it opens, closes or streams into, and whether the orchestrator
relays it from an executor. Everything that tracks open spans reads it (the orchestrator
closing what a cancelled run left open, the gateway re-opening what a resumed stream missed,
the tests' AG-UI checks), so adding an event type is one row here.

A span is what AG-UI requires to be closed before RUN_FINISHED: a step (named by its
stepName), a text message, a tool call, reasoning, a reasoning message (named by their id).
`SpanTracker` follows the open spans of one stream, in either vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentmesh.type.v1 import run_event_pb2


class SpanRole(StrEnum):
    OPENS = "opens"
    STREAMS = "streams"  # a delta into an open span
    CLOSES = "closes"


@dataclass(frozen=True)
class EventKind:
    payload: str  # the RunEvent oneof field
    agui_type: str  # the AG-UI event type it is sent as
    # The span it opens, streams into or closes, and the fields naming that span: in the
    # payload (protobuf) and in the AG-UI event.
    span: str = ""
    role: SpanRole | None = None
    id_field: str = ""
    agui_id_key: str = ""
    delta_field: str = ""  # for STREAMS: the payload field (and AG-UI key "delta") it adds
    # Relayed: an executor may send it and the orchestrator forwards it into the run's log
    # (the run's lifecycle, steps and snapshots are the orchestrator's own). The gateway
    # sends every kind of this table to SSE clients, and nothing else: old clients reject
    # unknown types.
    relayed: bool = False
    terminal: bool = False  # RUN_FINISHED / RUN_ERROR: nothing follows


def _span(
    payload: str, agui_type: str, span: str, role: SpanRole, id_field: str, agui_id_key: str
) -> EventKind:
    return EventKind(
        payload,
        agui_type,
        span=span,
        role=role,
        id_field=id_field,
        agui_id_key=agui_id_key,
        delta_field="delta" if role is SpanRole.STREAMS else "",
        relayed=span != "step",
    )


_O, _S, _C = SpanRole.OPENS, SpanRole.STREAMS, SpanRole.CLOSES
_MSG = ("message_id", "messageId")
_TOOL = ("tool_call_id", "toolCallId")
_STEP = ("step_name", "stepName")

EVENT_KINDS: tuple[EventKind, ...] = (
    EventKind("run_started", "RUN_STARTED"),
    EventKind("run_finished", "RUN_FINISHED", terminal=True),
    EventKind("run_error", "RUN_ERROR", terminal=True),
    _span("step_started", "STEP_STARTED", "step", _O, *_STEP),
    _span("step_finished", "STEP_FINISHED", "step", _C, *_STEP),
    _span("text_message_start", "TEXT_MESSAGE_START", "text", _O, *_MSG),
    _span("text_message_content", "TEXT_MESSAGE_CONTENT", "text", _S, *_MSG),
    _span("text_message_end", "TEXT_MESSAGE_END", "text", _C, *_MSG),
    _span("tool_call_start", "TOOL_CALL_START", "tool_call", _O, *_TOOL),
    _span("tool_call_args", "TOOL_CALL_ARGS", "tool_call", _S, *_TOOL),
    _span("tool_call_end", "TOOL_CALL_END", "tool_call", _C, *_TOOL),
    EventKind("tool_call_result", "TOOL_CALL_RESULT", relayed=True),
    _span("reasoning_start", "REASONING_START", "reasoning", _O, *_MSG),
    _span("reasoning_end", "REASONING_END", "reasoning", _C, *_MSG),
    _span("reasoning_message_start", "REASONING_MESSAGE_START", "reasoning_message", _O, *_MSG),
    _span("reasoning_message_content", "REASONING_MESSAGE_CONTENT", "reasoning_message", _S, *_MSG),
    _span("reasoning_message_end", "REASONING_MESSAGE_END", "reasoning_message", _C, *_MSG),
    EventKind("messages_snapshot", "MESSAGES_SNAPSHOT"),
    EventKind("custom", "CUSTOM", relayed=True),
)

BY_PAYLOAD: Mapping[str, EventKind] = {k.payload: k for k in EVENT_KINDS}
BY_AGUI_TYPE: Mapping[str, EventKind] = {k.agui_type: k for k in EVENT_KINDS}
RELAYED_PAYLOADS = frozenset(k.payload for k in EVENT_KINDS if k.relayed)
TERMINAL_AGUI_TYPES = frozenset(k.agui_type for k in EVENT_KINDS if k.terminal)


def _of_span(role: SpanRole) -> Mapping[str, EventKind]:
    return {k.span: k for k in EVENT_KINDS if k.role is role}


OPENER: Mapping[str, EventKind] = _of_span(SpanRole.OPENS)
CLOSER: Mapping[str, EventKind] = _of_span(SpanRole.CLOSES)
STREAMER: Mapping[str, EventKind] = _of_span(SpanRole.STREAMS)


@dataclass
class OpenSpan:
    kind: EventKind  # the kind that opened it
    ident: str
    start: object  # the opening event, as observed
    deltas: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.deltas)


@dataclass
class SpanTracker:
    """The open spans of one stream, in the order they opened (outermost first), with what
    was streamed into each. Feed it protobuf events (`observe_pb`) or AG-UI events
    (`observe_agui`)."""

    open: dict[tuple[str, str], OpenSpan] = field(default_factory=dict)
    # Spans (kinds) whose streamed text is kept once they closed too: a stopped run stores
    # the text it streamed (`texts`).
    keep: frozenset[str] = frozenset()
    streamed: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def _observe(self, kind: EventKind | None, ident: str, delta: str, start: object) -> None:
        if kind is None or kind.role is None:
            return
        key = (kind.span, ident)
        if kind.role is SpanRole.OPENS:
            self.open[key] = OpenSpan(kind, ident, start)
            if kind.span in self.keep:
                self.streamed.setdefault(key, [])
        elif kind.role is SpanRole.STREAMS:
            if kind.span in self.keep:
                self.streamed.setdefault(key, []).append(delta)
            span = self.open.get(key)
            if span is not None:
                span.deltas.append(delta)
        else:
            self.open.pop(key, None)

    def observe_pb(self, event: run_event_pb2.RunEvent) -> None:
        """Feed an agentmesh.type.v1.RunEvent."""
        payload = event.WhichOneof("payload")
        kind = BY_PAYLOAD.get(payload) if payload else None
        if kind is None or kind.role is None:
            return
        body = getattr(event, kind.payload)
        delta = getattr(body, kind.delta_field) if kind.delta_field else ""
        self._observe(kind, getattr(body, kind.id_field), delta, event)

    def observe_agui(self, event: Mapping[str, object]) -> None:
        """Feed an AG-UI event (a dict as sent)."""
        kind = BY_AGUI_TYPE.get(str(event.get("type")))
        if kind is None or kind.role is None:
            return
        delta = str(event.get("delta", "")) if kind.delta_field else ""
        self._observe(kind, str(event.get(kind.agui_id_key, "")), delta, event)

    def is_open(self, span: str, ident: str) -> bool:
        return (span, ident) in self.open

    def closing(self) -> list[tuple[EventKind, str]]:
        """(closing kind, span id) of what is open, innermost (last opened) first."""
        return [(CLOSER[s.kind.span], s.ident) for s in reversed(self.open.values())]

    def texts(self, span: str, skip: Iterable[str] = ()) -> list[tuple[str, str]]:
        """(id, text) of the non-empty text streamed into spans of `span` (one it keeps),
        except `skip`, in the order they opened."""
        skipped = set(skip)
        return [
            (ident, "".join(parts))
            for (s, ident), parts in self.streamed.items()
            if s == span and ident not in skipped and "".join(parts)
        ]
