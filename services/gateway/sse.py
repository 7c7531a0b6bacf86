"""The one projection of a run's gRPC events (agentmesh.type.v1.RunEvent) onto AG-UI events,
and their SSE encoding.

Hot path: plain dicts and json.dumps, no pydantic. Optional fields without a value are
left out (a strict client rejects JSON null there). tests/gateway/test_sse.py validates
every mapped event with the ag_ui pydantic models.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agentmesh.type.v1 import approval_pb2, message_pb2, run_event_pb2
from google.protobuf import json_format
from starlette.responses import StreamingResponse
from starlette.types import Send

from services.gateway.convert import agui_messages, usage_json
from shared import run_events

Event = dict[str, Any]

_TEXT_ROLES = {
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


def _run_finished(ev: run_event_pb2.RunEvent) -> Event:
    p = ev.run_finished
    out: Event = {"type": "RUN_FINISHED", "threadId": ev.thread_id, "runId": ev.run_id}
    pending = list(p.pending_tool_call_ids)
    if p.outcome == run_event_pb2.RUN_OUTCOME_INTERRUPT:
        # An interrupt outcome must name at least one interrupt; each pending client-side
        # tool call is one, answered by its tool call id.
        interrupts = [{"id": tc, "reason": "tool_call", "toolCallId": tc} for tc in pending] + [
            _approval(a) for a in p.approvals
        ] or [{"id": ev.run_id, "reason": "input_required"}]
        out["outcome"] = {"type": "interrupt", "interrupts": interrupts}
    elif p.outcome == run_event_pb2.RUN_OUTCOME_CANCELLED:
        out["outcome"] = {"type": "cancelled"}
    else:
        outcome: Event = {"type": "success"}
        if pending:
            outcome["pendingToolCallIds"] = pending
        out["outcome"] = outcome
    if p.HasField("usage") and (p.usage.input_tokens or p.usage.output_tokens):
        out["usage"] = usage_json(p.usage)
    return out


# What a client answers an approval with (RunAgentInput `resume[i].payload`, run-agent-input.md).
APPROVAL_RESPONSE_SCHEMA: Event = {
    "type": "object",
    "properties": {
        "decision": {"enum": ["approve", "edit", "deny"]},
        "arguments": {"type": "object"},
    },
    "required": ["decision"],
}


def _approval(a: approval_pb2.ApprovalRequest) -> Event:
    """A server-side tool call waiting for a person's approval, as an AG-UI interrupt."""
    return {
        "id": a.tool_call_id,
        "reason": "tool_approval",
        "toolCallId": a.tool_call_id,
        "message": f"approve, edit or deny the call to {a.tool_name}",
        "responseSchema": APPROVAL_RESPONSE_SCHEMA,
        "expiresAt": a.expire_time.ToJsonString(),
        "metadata": {"toolName": a.tool_name, "arguments": a.arguments},
    }


def _run_error(ev: run_event_pb2.RunEvent) -> Event:
    p = ev.run_error
    out: Event = {"type": "RUN_ERROR", "message": p.message or "the run failed"}
    if p.code:
        out["code"] = p.code
    if p.HasField("usage") and (p.usage.input_tokens or p.usage.output_tokens):
        out["usage"] = usage_json(p.usage)
    return out


def _text_start(ev: run_event_pb2.RunEvent) -> Event:
    p = ev.text_message_start
    return {
        "type": "TEXT_MESSAGE_START",
        "messageId": p.message_id,
        "role": _TEXT_ROLES.get(p.role, "assistant"),
    }


def _tool_call_start(ev: run_event_pb2.RunEvent) -> Event:
    p = ev.tool_call_start
    out: Event = {
        "type": "TOOL_CALL_START",
        "toolCallId": p.tool_call_id,
        "toolCallName": p.tool_call_name,
    }
    if p.parent_message_id:
        out["parentMessageId"] = p.parent_message_id
    return out


def _tool_call_result(ev: run_event_pb2.RunEvent) -> Event:
    p = ev.tool_call_result
    return {
        "type": "TOOL_CALL_RESULT",
        "messageId": p.message_id,
        "toolCallId": p.tool_call_id,
        "content": p.content,
        "role": "tool",
    }


def _messages_snapshot(ev: run_event_pb2.RunEvent) -> Event:
    messages = [item for m in ev.messages_snapshot.messages for item in agui_messages(m)]
    return {"type": "MESSAGES_SNAPSHOT", "messages": messages}


def _custom(ev: run_event_pb2.RunEvent) -> Event:
    p = ev.custom
    # CUSTOM.value is required; an unset value is sent as an empty object.
    value: Any = json_format.MessageToDict(p.value) if p.HasField("value") else {}
    return {"type": "CUSTOM", "name": p.name, "value": value}


# The events whose AG-UI fields are more than their span's id (and delta): the others are
# mapped from the table of event kinds (shared.run_events) alone.
_MAPPERS: dict[str, Callable[[run_event_pb2.RunEvent], Event | None]] = {
    "run_started": lambda ev: {"type": "RUN_STARTED", "threadId": ev.thread_id, "runId": ev.run_id},
    "run_finished": _run_finished,
    "run_error": _run_error,
    "text_message_start": _text_start,
    "tool_call_start": _tool_call_start,
    "tool_call_result": _tool_call_result,
    "reasoning_message_start": lambda ev: {
        "type": "REASONING_MESSAGE_START",
        "messageId": ev.reasoning_message_start.message_id,
        "role": "reasoning",
    },
    "messages_snapshot": _messages_snapshot,
    "custom": _custom,
}

TERMINAL_TYPES = run_events.TERMINAL_AGUI_TYPES


def _span_event(kind: run_events.EventKind, ev: run_event_pb2.RunEvent) -> Event | None:
    body = getattr(ev, kind.payload)
    out: Event = {"type": kind.agui_type, kind.agui_id_key: getattr(body, kind.id_field)}
    if kind.delta_field:
        delta = getattr(body, kind.delta_field)
        if not delta:  # strict clients reject an empty delta
            return None
        out["delta"] = delta
    return out


def to_agui(ev: run_event_pb2.RunEvent) -> Event | None:
    """The AG-UI event of `ev`, or None when it has nothing to send (an empty delta, or a
    payload this gateway does not know: old clients reject unknown event types)."""
    which = ev.WhichOneof("payload")
    kind = run_events.BY_PAYLOAD.get(which) if which else None
    if kind is None:
        return None
    mapper = _MAPPERS.get(kind.payload)
    out = mapper(ev) if mapper is not None else _span_event(kind, ev)
    if out is not None and ev.timestamp_ms:
        out["timestamp"] = ev.timestamp_ms
    return out


def run_error(message: str, code: str) -> Event:
    return {"type": "RUN_ERROR", "message": message, "code": code}
