"""The one projection of a run's gRPC events (agentmesh.type.v1.RunEvent) onto AG-UI events,
and their SSE encoding.

Each event is built as its ag_ui.core model (the AG-UI package owns the shape: camelCase
keys, optional fields without a value left out, as a strict client rejects JSON null there),
but for the pieces streamed one per token, which are the same data built directly (_delta).
The events travel on as data (the resume replays them) and are framed here with their
sequence number as the SSE id, which the resume needs and ag_ui.encoder.EventEncoder does
not write.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from ag_ui import core as agui
from agentmesh.type.v1 import approval_pb2, message_pb2, run_event_pb2
from google.protobuf import json_format
from starlette.responses import StreamingResponse
from starlette.types import Send

from services.gateway.convert import agui_messages, usage_json
from shared import run_events

Event = dict[str, Any]

_TEXT_ROLES: dict[int, Literal["user", "assistant", "system"]] = {
    message_pb2.ROLE_USER: "user",
    message_pb2.ROLE_ASSISTANT: "assistant",
    message_pb2.ROLE_SYSTEM: "system",
}


def frame(event: Event, sequence: int | None = None) -> bytes:
    """One SSE frame: `id: <sequence>` (for an event of the run's log), `data: <json>` and a
    blank line, LF only. Frames the gateway makes up (a resume's re-opened STARTs, an error
    of its own) carry no id, so a client's Last-Event-ID stays the last real event's."""
    # json.dumps escapes CR and LF inside strings, so the payload is always one line.
    payload = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    head = b"id: %d\n" % sequence if sequence is not None else b""
    return head + b"data: " + payload.encode() + b"\n\n"


# An SSE comment line: EventSource and AG-UI clients skip it; proxies see traffic.
HEARTBEAT = b": keepalive\n\n"


class LastChunk(bytes):
    """The stream's last bytes (its RUN_FINISHED or RUN_ERROR): nothing follows them."""


class EventStream(StreamingResponse):
    """A text/event-stream response whose LastChunk ends the body in the same write: the
    chunked body's terminator goes out with it, not in a write of its own (one write and
    one pass through the middlewares' send wrappers less per run)."""

    async def stream_response(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        ended = False
        async for chunk in self.body_iterator:
            if ended:
                continue  # nothing is sent after the last chunk (the iterator just ends)
            ended = isinstance(chunk, LastChunk)
            body = chunk if isinstance(chunk, bytes | memoryview) else chunk.encode(self.charset)
            await send({"type": "http.response.body", "body": body, "more_body": not ended})
        if not ended:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def _usage(p: run_event_pb2.RunFinished | run_event_pb2.RunError) -> list[agui.TokenUsage] | None:
    if p.HasField("usage") and (p.usage.input_tokens or p.usage.output_tokens):
        # usage_json owns the shape (the run record shows it too); `estimated` is an extra
        # field, which the ag_ui models keep.
        return [agui.TokenUsage.model_validate(u) for u in usage_json(p.usage)]
    return None


def _run_finished(ev: run_event_pb2.RunEvent) -> agui.RunFinishedEvent:
    p = ev.run_finished
    pending = list(p.pending_tool_call_ids)
    outcome: agui.RunFinishedOutcome
    if p.outcome == run_event_pb2.RUN_OUTCOME_INTERRUPT:
        # An interrupt outcome must name at least one interrupt; each pending client-side
        # tool call is one, answered by its tool call id.
        interrupts = [
            agui.Interrupt(id=tc, reason="tool_call", tool_call_id=tc) for tc in pending
        ] + [_approval(a) for a in p.approvals] or [
            agui.Interrupt(id=ev.run_id, reason="input_required")
        ]
        outcome = agui.RunFinishedInterruptOutcome(interrupts=interrupts)
    elif p.outcome == run_event_pb2.RUN_OUTCOME_CANCELLED:
        outcome = agui.RunFinishedCancelledOutcome()
    else:
        outcome = agui.RunFinishedSuccessOutcome(pending_tool_call_ids=pending or None)
    return agui.RunFinishedEvent(
        thread_id=ev.thread_id, run_id=ev.run_id, outcome=outcome, usage=_usage(p)
    )


# What a client answers an approval with (RunAgentInput `resume[i].payload`, run-agent-input.md).
APPROVAL_RESPONSE_SCHEMA: Event = {
    "type": "object",
    "properties": {
        "decision": {"enum": ["approve", "edit", "deny"]},
        "arguments": {"type": "object"},
    },
    "required": ["decision"],
}


def _approval(a: approval_pb2.ApprovalRequest) -> agui.Interrupt:
    """A server-side tool call waiting for a person's approval, as an AG-UI interrupt."""
    return agui.Interrupt(
        id=a.tool_call_id,
        reason="tool_approval",
        tool_call_id=a.tool_call_id,
        message=f"approve, edit or deny the call to {a.tool_name}",
        response_schema=APPROVAL_RESPONSE_SCHEMA,
        expires_at=a.expire_time.ToJsonString(),
        metadata={"toolName": a.tool_name, "arguments": a.arguments},
    )


def _run_error(ev: run_event_pb2.RunEvent) -> agui.RunErrorEvent:
    p = ev.run_error
    return agui.RunErrorEvent(
        message=p.message or "the run failed", code=p.code or None, usage=_usage(p)
    )


def _text_start(ev: run_event_pb2.RunEvent) -> agui.TextMessageStartEvent:
    p = ev.text_message_start
    return agui.TextMessageStartEvent(
        message_id=p.message_id, role=_TEXT_ROLES.get(p.role, "assistant")
    )


def _tool_call_start(ev: run_event_pb2.RunEvent) -> agui.ToolCallStartEvent:
    p = ev.tool_call_start
    return agui.ToolCallStartEvent(
        tool_call_id=p.tool_call_id,
        tool_call_name=p.tool_call_name,
        parent_message_id=p.parent_message_id or None,
    )


def _tool_call_result(ev: run_event_pb2.RunEvent) -> agui.ToolCallResultEvent:
    p = ev.tool_call_result
    return agui.ToolCallResultEvent(
        message_id=p.message_id, tool_call_id=p.tool_call_id, content=p.content, role="tool"
    )


def _messages_snapshot(ev: run_event_pb2.RunEvent) -> agui.MessagesSnapshotEvent:
    # agui_messages owns the projection of a stored message (/history shows it too).
    messages = [item for m in ev.messages_snapshot.messages for item in agui_messages(m)]
    return agui.MessagesSnapshotEvent.model_validate({"messages": messages})


def _custom(ev: run_event_pb2.RunEvent) -> agui.CustomEvent:
    p = ev.custom
    # CUSTOM.value is required; an unset value is sent as an empty object.
    value: Any = json_format.MessageToDict(p.value) if p.HasField("value") else {}
    return agui.CustomEvent(name=p.name, value=value)


# The events whose AG-UI fields are more than their span's id (and delta): the others are
# mapped from the table of event kinds (shared.run_events) alone.
_MAPPERS: dict[str, Callable[[run_event_pb2.RunEvent], agui.BaseEvent]] = {
    "run_started": lambda ev: agui.RunStartedEvent(thread_id=ev.thread_id, run_id=ev.run_id),
    "run_finished": _run_finished,
    "run_error": _run_error,
    "text_message_start": _text_start,
    "tool_call_start": _tool_call_start,
    "tool_call_result": _tool_call_result,
    "reasoning_message_start": lambda ev: agui.ReasoningMessageStartEvent(
        message_id=ev.reasoning_message_start.message_id
    ),
    "messages_snapshot": _messages_snapshot,
    "custom": _custom,
}

# The model of each of the other span events: the span's id is all they carry.
_SPAN_MODELS: dict[str, type[agui.BaseEvent]] = {
    model.model_fields["type"].default.value: model
    for model in (
        agui.StepStartedEvent,
        agui.StepFinishedEvent,
        agui.TextMessageEndEvent,
        agui.ToolCallEndEvent,
        agui.ReasoningStartEvent,
        agui.ReasoningEndEvent,
        agui.ReasoningMessageEndEvent,
    )
}

TERMINAL_TYPES = run_events.TERMINAL_AGUI_TYPES


def _delta(kind: run_events.EventKind, ev: run_event_pb2.RunEvent) -> Event | None:
    """A piece streamed into a span (TEXT_MESSAGE_CONTENT, TOOL_CALL_ARGS,
    REASONING_MESSAGE_CONTENT): one per token of a model's answer, so the stream's hot path
    is built as the data its ag_ui model gives, key order included (tests/gateway/test_sse.py
    holds the two equal): building and dumping the model doubled the gateway's CPU time per
    streamed event (about 17 against 8 us, a 20,000-word stream)."""
    body = getattr(ev, kind.payload)
    delta = getattr(body, kind.delta_field)
    if not delta:  # strict clients reject an empty delta
        return None
    out: Event = {"type": kind.agui_type}
    if ev.timestamp_ms:
        out["timestamp"] = ev.timestamp_ms
    out[kind.agui_id_key] = getattr(body, kind.id_field)
    out["delta"] = delta
    return out


def _span_edge(kind: run_events.EventKind, ev: run_event_pb2.RunEvent) -> agui.BaseEvent:
    """The start or end of a span that carries nothing but the span's id."""
    ident = getattr(getattr(ev, kind.payload), kind.id_field)
    return _SPAN_MODELS[kind.agui_type].model_validate({kind.agui_id_key: ident})


def to_agui(ev: run_event_pb2.RunEvent) -> Event | None:
    """The AG-UI event of `ev` as it is sent (built as its ag_ui.core model, but for the
    streamed pieces: _delta), or None when it has nothing to send (an empty delta, or a
    payload this gateway does not know: old clients reject unknown event types)."""
    which = ev.WhichOneof("payload")
    kind = run_events.BY_PAYLOAD.get(which) if which else None
    if kind is None:
        return None
    if kind.role is run_events.SpanRole.STREAMS:
        return _delta(kind, ev)
    mapper = _MAPPERS.get(kind.payload)
    event = mapper(ev) if mapper is not None else _span_edge(kind, ev)
    if ev.timestamp_ms:
        event.timestamp = ev.timestamp_ms
    return _data(event)


def _data(event: agui.BaseEvent) -> Event:
    """The event as it is sent: camelCase keys in the model's order, no JSON null for an
    optional field without a value (the ag_ui models leave it out)."""
    data: Event = event.model_dump(mode="json", by_alias=True)
    return data


def run_error(message: str, code: str) -> Event:
    return _data(agui.RunErrorEvent(message=message, code=code))
