"""The AG-UI RunAgentInput the gateway accepts, and its conversion to StartRunRequest.

docs/protocols/agent/run-agent-input.md is the prose version of this module. Only the LAST
message (which must be a user message) is new input: it is what the run persists; earlier
messages are the client's copy of the conversation, which the services already hold.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from agentmesh.orchestrator.v1 import orchestrator_service_pb2
from agentmesh.type.v1 import approval_pb2, content_pb2, message_pb2
from google.protobuf import json_format, struct_pb2
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from services.gateway.errors import ApiError, invalid
from services.gateway.strict import field_path, json_object
from shared.ids import id_problem, is_time_zone

# Client-side tools a run may declare (what model APIs accept in one request).
MAX_TOOLS = 128
_MEDIA_PARTS = ("image", "audio", "video", "document")


class _Camel(BaseModel):
    # Unknown keys are accepted (AG-UI grows; an old gateway must not reject a new client);
    # the known ones have their JSON type exactly (strict: no "1" for 1, no 1 for "1").
    model_config = ConfigDict(
        extra="allow", alias_generator=to_camel, populate_by_name=False, strict=True
    )


class ToolIn(_Camel):
    name: str
    description: str = ""
    parameters: Any = None


class ContextIn(_Camel):
    description: str
    value: str


class RunAgentInputIn(_Camel):
    """AG-UI RunAgentInput (camelCase on the wire)."""

    thread_id: str
    run_id: str
    messages: list[dict[str, Any]] = Field(
        description="The conversation; the last entry is the new user message."
    )
    protocol_version: str | None = None
    parent_run_id: str | None = None
    tools: list[ToolIn] | None = Field(default=None, max_length=MAX_TOOLS)
    context: list[ContextIn] | None = None
    state: Any = None
    forwarded_props: Any = None
    resume: list[Any] | None = None


def _check_id(field: str, value: str) -> None:
    problem = id_problem(value)
    if problem is not None:
        raise invalid(field, problem)


def parse_body(body: bytes) -> RunAgentInputIn:
    data = json_object(body, "an AG-UI RunAgentInput")
    try:
        parsed = RunAgentInputIn.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = field_path(first["loc"]) or "body"
        description = "is required" if first["type"] == "missing" else first["msg"]
        raise invalid(field, description) from None
    _check_id("threadId", parsed.thread_id)
    _check_id("runId", parsed.run_id)
    if parsed.parent_run_id is not None:
        _check_id("parentRunId", parsed.parent_run_id)
    if not parsed.messages:
        raise invalid("messages", "must end with the new user message (the list is empty)")
    for i, tool in enumerate(parsed.tools or []):
        if not tool.name:
            raise invalid(f"tools[{i}].name", "must not be empty")
    return parsed


def _decode_base64(field: str, value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(field, "is not valid base64") from None


def _part_block(field: str, part: Any) -> content_pb2.ContentBlock | None:
    """One AG-UI input content part as a content block (None for an empty text part)."""
    if not isinstance(part, dict):
        raise invalid(field, "must be an object with a type")
    kind = part.get("type")
    if kind == "text":
        text = part.get("text")
        if not isinstance(text, str):
            raise invalid(f"{field}.text", "must be a string")
        return content_pb2.ContentBlock(text=content_pb2.TextBlock(text=text)) if text else None
    if kind in _MEDIA_PARTS:
        source = part.get("source")
        if not isinstance(source, dict):
            raise invalid(f"{field}.source", "must be an object {type, value, mimeType}")
        value = source.get("value")
        mime = source.get("mimeType") or ""
        if not isinstance(value, str) or not value:
            raise invalid(f"{field}.source.value", "must be a non-empty string")
        if not isinstance(mime, str):
            raise invalid(f"{field}.source.mimeType", "must be a string")
        if source.get("type") == "data":
            if not mime:
                raise invalid(f"{field}.source.mimeType", "is required for inline data")
            data = _decode_base64(f"{field}.source.value", value)
            block = content_pb2.DataBlock(mime_type=mime, data=data)
        elif source.get("type") == "url":
            block = content_pb2.DataBlock(mime_type=mime, url=value)
        else:
            raise invalid(f"{field}.source.type", "must be data or url")
        return content_pb2.ContentBlock(data=block)
    if kind == "binary":  # the AG-UI 0.x spelling of an inline or linked file
        mime = part.get("mimeType")
        if not isinstance(mime, str) or not mime:
            raise invalid(f"{field}.mimeType", "is required")
        filename = part.get("filename")
        name = filename if isinstance(filename, str) else ""
        if isinstance(part.get("data"), str) and part["data"]:
            data = _decode_base64(f"{field}.data", part["data"])
            return content_pb2.ContentBlock(
                data=content_pb2.DataBlock(mime_type=mime, data=data, name=name)
            )
        if isinstance(part.get("url"), str) and part["url"]:
            return content_pb2.ContentBlock(
                data=content_pb2.DataBlock(mime_type=mime, url=part["url"], name=name)
            )
        raise invalid(field, "a binary part needs data (base64) or url")
    raise invalid(f"{field}.type", "must be text, image, audio, video, document or binary")


def user_message(parsed: RunAgentInputIn, max_chars: int) -> message_pb2.Message:
    """The last message of the input, which must be the new user message."""
    index = len(parsed.messages) - 1
    field = f"messages[{index}]"
    for i, m in enumerate(parsed.messages):
        if not isinstance(m, dict):
            raise invalid(f"messages[{i}]", "must be an object")
    last = parsed.messages[index]
    if last.get("role") != "user":
        raise invalid(f"{field}.role", "the last message must be the new user message (role user)")
    msg_id = last.get("id")
    if not isinstance(msg_id, str):
        raise invalid(f"{field}.id", "is required (a string)")
    _check_id(f"{field}.id", msg_id)
    content = last.get("content")
    blocks: list[content_pb2.ContentBlock] = []
    if isinstance(content, str):
        if content:
            blocks.append(content_pb2.ContentBlock(text=content_pb2.TextBlock(text=content)))
    elif isinstance(content, list):
        for j, part in enumerate(content):
            block = _part_block(f"{field}.content[{j}]", part)
            if block is not None:
                blocks.append(block)
    else:
        raise invalid(f"{field}.content", "must be a string or a list of content parts")
    texts = [b.text.text for b in blocks if b.WhichOneof("block") == "text"]
    if not any(t.strip() for t in texts) and len(texts) == len(blocks):
        raise invalid(f"{field}.content", "must not be empty")
    if sum(len(t) for t in texts) > max_chars:
        raise invalid(f"{field}.content", f"must be at most {max_chars} characters")
    given = last.get("name")
    name = given if isinstance(given, str) else ""
    return message_pb2.Message(
        id=msg_id,
        role=message_pb2.ROLE_USER,
        kind=message_pb2.MESSAGE_KIND_USER_MESSAGE,
        name=name,
        content=blocks,
        thread_id=parsed.thread_id,
        run_id=parsed.run_id,
    )


def _json_value(field: str, value: Any) -> struct_pb2.Value:
    try:
        return json_format.ParseDict(value, struct_pb2.Value())
    except (json_format.ParseError, TypeError, ValueError) as exc:
        raise invalid(field, f"cannot be carried as a JSON value ({exc})") from None


def time_zone(header: str | None) -> str:
    """The IANA zone of X-Timezone, or "" (the services' default) when absent or unknown."""
    return header if header and is_time_zone(header) else ""


PROFILE_FIELD = "forwardedProps.agentmesh.profile"
MAX_PROFILE_NAME = 100


def requested_profile(forwarded_props: Any) -> str:
    """The execution profile a chat caller names in forwardedProps.agentmesh.profile ("" =
    chat_default). The orchestrator decides whether the caller may use it (worker profiles
    only); other forwardedProps keys pass through untouched."""
    if not isinstance(forwarded_props, dict) or "agentmesh" not in forwarded_props:
        return ""
    ours = forwarded_props["agentmesh"]
    if not isinstance(ours, dict):
        raise invalid("forwardedProps.agentmesh", "must be an object")
    name = ours.get("profile", "")
    if not isinstance(name, str):
        raise invalid(PROFILE_FIELD, "must be a string (an execution profile name)")
    if len(name) > MAX_PROFILE_NAME:
        raise invalid(PROFILE_FIELD, f"must be at most {MAX_PROFILE_NAME} characters")
    return name


STRATEGY_FIELD = "forwardedProps.agentmesh.multitaskStrategy"
CANCEL_ON_DISCONNECT_FIELD = "forwardedProps.agentmesh.cancelOnDisconnect"
STRATEGIES = {
    "reject": orchestrator_service_pb2.MULTITASK_STRATEGY_REJECT,
    "enqueue": orchestrator_service_pb2.MULTITASK_STRATEGY_ENQUEUE,
    "interrupt": orchestrator_service_pb2.MULTITASK_STRATEGY_INTERRUPT,
    "rollback": orchestrator_service_pb2.MULTITASK_STRATEGY_ROLLBACK,
}


def _ours(forwarded_props: Any) -> dict[str, Any]:
    if not isinstance(forwarded_props, dict) or "agentmesh" not in forwarded_props:
        return {}
    ours = forwarded_props["agentmesh"]
    if not isinstance(ours, dict):
        raise invalid("forwardedProps.agentmesh", "must be an object")
    return ours


def multitask_strategy(
    forwarded_props: Any,
) -> orchestrator_service_pb2.MultitaskStrategy.ValueType:
    """forwardedProps.agentmesh.multitaskStrategy: what a run does on a thread that has an
    active run (reject | enqueue | interrupt | rollback; default enqueue)."""
    value = _ours(forwarded_props).get("multitaskStrategy", "enqueue")
    if value not in STRATEGIES:
        raise invalid(STRATEGY_FIELD, "must be reject, enqueue, interrupt or rollback")
    return STRATEGIES[value]


def cancel_on_disconnect(forwarded_props: Any) -> bool:
    """forwardedProps.agentmesh.cancelOnDisconnect: cancel the run when this request's
    client goes away before the run ends (default false: the run goes on and is stored)."""
    value = _ours(forwarded_props).get("cancelOnDisconnect", False)
    if not isinstance(value, bool):
        raise invalid(CANCEL_ON_DISCONNECT_FIELD, "must be true or false")
    return value


MAX_RESUME = 32
_DECISIONS = {
    "approve": approval_pb2.TOOL_DECISION_KIND_APPROVE,
    "edit": approval_pb2.TOOL_DECISION_KIND_EDIT,
    "deny": approval_pb2.TOOL_DECISION_KIND_DENY,
}


def tool_decisions(resume: list[Any] | None, max_chars: int) -> list[approval_pb2.ToolDecision]:
    """AG-UI `resume`: the answers to the thread's waiting tool approvals (run-agent-input.md,
    "Resuming an interrupt"). Only the shape is checked here, each field's JSON type before
    its value (the body's strings, numbers and nesting are checked by strict.json_value);
    the orchestrator checks each names a waiting, unexpired approval of the caller's thread,
    before anything is stored. Edited arguments are at most `max_chars` characters of JSON,
    as a message's text is."""
    if not resume:
        return []
    if len(resume) > MAX_RESUME:
        raise invalid("resume", f"must hold at most {MAX_RESUME} entries")
    out = []
    for i, entry in enumerate(resume):
        at = f"resume[{i}]"
        if not isinstance(entry, dict):
            raise invalid(at, "must be an object {interruptId, status, payload}")
        interrupt_id = entry.get("interruptId")
        if not isinstance(interrupt_id, str):
            raise invalid(f"{at}.interruptId", "is required (the interrupt's id, a string)")
        _check_id(f"{at}.interruptId", interrupt_id)
        status = entry.get("status")
        if not isinstance(status, str):
            raise invalid(f"{at}.status", "must be resolved or cancelled (a string)")
        if status == "cancelled":
            cancel = approval_pb2.TOOL_DECISION_KIND_CANCEL
            out.append(approval_pb2.ToolDecision(tool_call_id=interrupt_id, kind=cancel))
            continue
        if status != "resolved":
            raise invalid(f"{at}.status", "must be resolved or cancelled")
        payload = entry.get("payload")
        if not isinstance(payload, dict):
            raise invalid(f"{at}.payload", 'must be an object {"decision": approve|edit|deny}')
        unknown = sorted(set(payload) - {"decision", "arguments"})
        if unknown:
            raise invalid(f"{at}.payload.{unknown[0]}", "is not a key of an approval answer")
        decision = payload.get("decision")
        if not isinstance(decision, str) or decision not in _DECISIONS:
            raise invalid(f"{at}.payload.decision", "must be approve, edit or deny")
        arguments = payload.get("arguments")
        if decision == "edit" and not isinstance(arguments, dict):
            raise invalid(f"{at}.payload.arguments", "must be an object (the edited arguments)")
        if decision != "edit" and "arguments" in payload:
            raise invalid(f"{at}.payload.arguments", "is only for the edit decision")
        edited = ""
        if decision == "edit":
            edited = json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
            if len(edited) > max_chars:
                raise invalid(
                    f"{at}.payload.arguments", f"must be at most {max_chars} characters as JSON"
                )
        out.append(
            approval_pb2.ToolDecision(
                tool_call_id=interrupt_id, kind=_DECISIONS[decision], arguments=edited
            )
        )
    return out


def start_run_request(
    parsed: RunAgentInputIn, *, max_chars: int, tz: str
) -> orchestrator_service_pb2.StartRunRequest:
    req = orchestrator_service_pb2.StartRunRequest(
        thread_id=parsed.thread_id,
        run_id=parsed.run_id,
        messages=[user_message(parsed, max_chars)],
        tools=[
            message_pb2.ToolSpec(
                name=t.name,
                description=t.description,
                parameters_json="" if t.parameters is None else json.dumps(t.parameters),
            )
            for t in parsed.tools or []
        ],
        context=[
            message_pb2.ContextItem(description=c.description, value=c.value)
            for c in parsed.context or []
        ],
        origin=message_pb2.RUNTIME_MODE_CHAT,
        time_zone=tz,
        batch_events=True,
        parent_run_id=parsed.parent_run_id or "",
        profile_name=requested_profile(parsed.forwarded_props),
        multitask_strategy=multitask_strategy(parsed.forwarded_props),
        tool_decisions=tool_decisions(parsed.resume, max_chars),
    )
    if parsed.state is not None:
        req.state.CopyFrom(_json_value("state", parsed.state))
    if parsed.forwarded_props is not None:
        req.forwarded_props.CopyFrom(_json_value("forwardedProps", parsed.forwarded_props))
    return req


def check_body_size(declared: str | None, limit: int) -> None:
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)


def too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        "PAYLOAD_TOO_LARGE",
        f"the request body is larger than {limit} bytes",
        violations=[("body", f"must be at most {limit} bytes")],
    )
