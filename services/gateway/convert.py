"""Protobuf -> JSON of the gateway's answers (camelCase, optional fields omitted, never null).

Messages take the AG-UI shape (id, role, content; toolCalls / toolCallId) so a client can
feed /history straight back into a RunAgentInput, plus the agentmesh extras that
docs/protocols/agent/api-endpoints.md lists.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any, Literal

from agentmesh.history.v1 import history_service_pb2
from agentmesh.memory.v1 import memory_service_pb2
from agentmesh.type.v1 import content_pb2, execution_profile_pb2, message_pb2
from google.protobuf import timestamp_pb2

from shared.domain import RUN_STATE_FROM_PB, SEARCH_MODE_NAMES
from shared.messages import tool_result_message_id
from shared.profiles import MemoryPolicy, memory_from_pb
from shared.timestamps import rfc3339

ROLE_NAMES = {
    message_pb2.ROLE_USER: "user",
    message_pb2.ROLE_ASSISTANT: "assistant",
    message_pb2.ROLE_SYSTEM: "system",
}
RUNTIME_MODE_NAMES = {
    message_pb2.RUNTIME_MODE_CHAT: "chat",
    message_pb2.RUNTIME_MODE_AUTOMATION: "automation",
}
KIND_NAMES = {
    message_pb2.MESSAGE_KIND_USER_MESSAGE: "user_message",
    message_pb2.MESSAGE_KIND_AGENT_REPLY: "agent_reply",
    message_pb2.MESSAGE_KIND_TOOL_CALL: "tool_call",
    message_pb2.MESSAGE_KIND_TOOL_RESULT: "tool_result",
    message_pb2.MESSAGE_KIND_MEMORY_RECALL: "memory_recall",
    message_pb2.MESSAGE_KIND_ROUTE: "route",
}
EXECUTOR_NAMES = {
    execution_profile_pb2.EXECUTOR_WORKER: "worker",
    execution_profile_pb2.EXECUTOR_MEMORY: "memory",
}


def timestamp(ts: timestamp_pb2.Timestamp) -> str:
    """A Timestamp in the one format of every time the gateway answers (timestamps.rfc3339)."""
    return rfc3339(ts.ToDatetime())


def millis_time(ms: int) -> str:
    """A time the gateway's own store keeps as Unix milliseconds, in the format of `timestamp`."""
    ts = timestamp_pb2.Timestamp()
    ts.FromMilliseconds(ms)
    return timestamp(ts)


def _data_part(block: content_pb2.DataBlock) -> dict[str, Any]:
    mime = block.mime_type or "application/octet-stream"
    kind = mime.split("/", 1)[0]
    part_type = kind if kind in ("image", "audio", "video") else "document"
    if block.WhichOneof("source") == "url":
        source: dict[str, Any] = {"type": "url", "value": block.url, "mimeType": mime}
    else:
        source = {"type": "data", "value": base64.b64encode(block.data).decode(), "mimeType": mime}
    return {"type": part_type, "source": source}


def _tool_result_text(block: content_pb2.ToolResultBlock) -> str:
    if block.WhichOneof("output") == "text":
        return block.text
    return "".join(b.text.text for b in block.blocks.blocks if b.WhichOneof("block") == "text")


# Tool results that did not succeed: their AG-UI tool message carries `error` (the content).
_FAILED_RESULT_STATES = frozenset(
    {
        content_pb2.TOOL_RESULT_STATE_ERROR,
        content_pb2.TOOL_RESULT_STATE_INTERRUPTED,
        content_pb2.TOOL_RESULT_STATE_DENIED,
    }
)


def agui_messages(m: message_pb2.Message) -> list[dict[str, Any]]:
    """One stored message as AG-UI messages (strict shape: no agentmesh extras): the one
    projection of a message for MESSAGES_SNAPSHOT, /history and the audit.

    A tool-result message becomes one AG-UI tool message per result block, with the id its
    TOOL_CALL_RESULT event had (shared.messages.tool_result_message_id); thinking and hint
    blocks are not part of a conversation's visible content and are left out.
    """
    results = [b.tool_result for b in m.content if b.WhichOneof("block") == "tool_result"]
    if results:
        out_results = []
        for i, r in enumerate(results):
            item: dict[str, Any] = {
                "id": tool_result_message_id(m.id, i),
                "role": "tool",
                "toolCallId": r.id,
                "content": _tool_result_text(r),
            }
            if r.state in _FAILED_RESULT_STATES:
                item["error"] = item["content"] or "the tool call did not succeed"
            out_results.append(item)
        return out_results
    role = ROLE_NAMES.get(m.role, "assistant")
    texts = [b.text.text for b in m.content if b.WhichOneof("block") == "text"]
    data = [b.data for b in m.content if b.WhichOneof("block") == "data"]
    calls = [b.tool_call for b in m.content if b.WhichOneof("block") == "tool_call"]
    out: dict[str, Any] = {"id": m.id, "role": role}
    if m.name:
        out["name"] = m.name
    if role == "user" and data:
        parts: list[dict[str, Any]] = []
        for b in m.content:
            which = b.WhichOneof("block")
            if which == "text":
                parts.append({"type": "text", "text": b.text.text})
            elif which == "data":
                parts.append(_data_part(b.data))
        out["content"] = parts
    elif role == "assistant":
        # AG-UI assistant content is a string, absent when the message only calls tools.
        if texts or not calls:
            out["content"] = "".join(texts)
        if calls:
            out["toolCalls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.input or "{}"},
                }
                for c in calls
            ]
    else:
        out["content"] = "".join(texts)
    return [out]


def stored_messages_within(messages: Sequence[message_pb2.Message], limit: int) -> int | None:
    """None when the AG-UI messages of `messages` are at most `limit`; otherwise how many
    of the stored messages (their longest prefix, at least one: a message's results are
    never split over pages) fit, so that a page of history never has more than `limit`
    messages as the client sees them (a stored message of n tool results is n of them)."""
    counts = [len(agui_messages(m)) for m in messages]
    if sum(counts) <= limit:
        return None
    fitting = total = 0
    for count in counts:
        if total + count > limit:
            break
        total += count
        fitting += 1
    return max(fitting, 1)


def _metadata(md: message_pb2.MessageMetadata) -> dict[str, Any]:
    out: dict[str, Any] = {"hiddenFromUser": md.hidden_from_user}
    if md.origin in RUNTIME_MODE_NAMES:
        out["origin"] = RUNTIME_MODE_NAMES[md.origin]
    if md.executor in EXECUTOR_NAMES:
        out["executor"] = EXECUTOR_NAMES[md.executor]
    if md.execution_profile_name:
        out["executionProfileName"] = md.execution_profile_name
    if md.extra_json and '"approvals"' in md.extra_json:
        # The decisions on approved / denied tool calls (shared.approvals): the audit's.
        approvals = json.loads(md.extra_json).get("approvals")
        if isinstance(approvals, list):
            out["approvals"] = approvals
    return out


def message_json(m: message_pb2.Message, *, audit: bool = False) -> list[dict[str, Any]]:
    """A stored message as the gateway's JSON: AG-UI fields plus the agentmesh extras."""
    extras: dict[str, Any] = {"metadata": _metadata(m.metadata)}
    if m.thread_id:
        extras["threadId"] = m.thread_id
    if m.run_id:
        extras["runId"] = m.run_id
    if m.kind in KIND_NAMES:
        extras["kind"] = KIND_NAMES[m.kind]
    if m.HasField("created_at"):
        extras["createdAt"] = timestamp(m.created_at)
    if m.finished_reason:
        # Why the model's text ended: `interrupted` / `error` mark what a cancelled / failed
        # run had streamed when it stopped (orchestrator core.partial_replies).
        extras["finishedReason"] = m.finished_reason
    if audit:
        extras["visibilityMask"] = m.visibility_mask
    if m.kind == message_pb2.MESSAGE_KIND_MEMORY_RECALL:
        # The memories the run recalled into its context: their ids and scores.
        extras["metadata"]["memoryRecall"] = _extra(m.metadata).get("memory_recall", [])
        # How its search ran (hybrid, or lexical and why), as GET /api/v1/memories?q= says.
        how = _extra(m.metadata).get("memory_search")
        if isinstance(how, dict) and how.get("mode"):
            reason = {"modeReason": how["reason"]} if how.get("reason") else {}
            extras["metadata"]["memorySearch"] = {"mode": how["mode"], **reason}
    if m.kind == message_pb2.MESSAGE_KIND_ROUTE:
        # The router's decision a model made, and that call's usage (part of the run's).
        route = dict(_extra(m.metadata).get("route", {}))
        if m.HasField("usage"):
            route["usage"] = usage_json(m.usage)
        extras["metadata"]["route"] = route
    return [item | extras for item in agui_messages(m)]


def _extra(md: message_pb2.MessageMetadata) -> dict[str, Any]:
    try:
        extra = json.loads(md.extra_json) if md.extra_json else {}
    except ValueError:
        return {}
    return extra if isinstance(extra, dict) else {}


def messages_json(messages: Any, *, audit: bool = False) -> list[dict[str, Any]]:
    return [item for m in messages for item in message_json(m, audit=audit)]


def thread_json(t: history_service_pb2.Thread) -> dict[str, Any]:
    # What /history lists of the thread (hidden messages are not counted).
    out: dict[str, Any] = {"id": t.id, "messageCount": t.shown_message_count}
    if t.runtime_mode in RUNTIME_MODE_NAMES:
        out["runtimeMode"] = RUNTIME_MODE_NAMES[t.runtime_mode]
    if t.HasField("create_time"):
        out["createTime"] = timestamp(t.create_time)
    if t.HasField("update_time"):
        out["updateTime"] = timestamp(t.update_time)
    return out


def profile_json(p: execution_profile_pb2.ExecutionProfile) -> dict[str, Any]:
    out: dict[str, Any] = {"name": p.name, "enableRouter": p.enable_router}
    if p.executor in EXECUTOR_NAMES:
        out["executor"] = EXECUTOR_NAMES[p.executor]
    if p.HasField("tool_policy"):
        out["toolPolicy"] = {"mode": "intersection", "allowlist": list(p.tool_policy.allowlist)}
        if p.tool_policy.requires_approval:
            out["toolPolicy"]["requiresApproval"] = list(p.tool_policy.requires_approval)
    if p.HasField("history_policy") and p.history_policy.window:
        out["historyPolicy"] = {"window": p.history_policy.window}
    if p.HasField("memory"):
        policy = MemoryPolicy.model_validate(memory_from_pb(p.memory))
        out["memory"] = {
            "mode": policy.mode,
            "topK": policy.top_k,
            "minRelevance": policy.min_relevance,
            "maxTokens": policy.max_tokens,
        }
        if policy.conversation:
            out["memory"]["conversation"] = True
    return out


def usage_json(u: message_pb2.Usage) -> list[dict[str, Any]]:
    """A run's usage as RUN_FINISHED and the run record show it (sse-events.md)."""
    return [
        {
            "inputTokens": u.input_tokens,
            "outputTokens": u.output_tokens,
            "totalTokens": u.input_tokens + u.output_tokens,
            # The model's endpoint reported none: agentmesh counted them (an estimate).
            **({"estimated": True} if u.estimated else {}),
        }
    ]


def run_json(r: history_service_pb2.Run) -> dict[str, Any]:
    out: dict[str, Any] = {"id": r.id, "threadId": r.thread_id}
    if r.state in RUN_STATE_FROM_PB:
        out["state"] = RUN_STATE_FROM_PB[r.state].value
    if r.origin in RUNTIME_MODE_NAMES:
        out["origin"] = RUNTIME_MODE_NAMES[r.origin]
    if r.HasField("profile"):
        out["profile"] = profile_json(r.profile)
    times: tuple[tuple[str, Literal["create_time", "start_time", "finish_time"]], ...] = (
        ("createTime", "create_time"),
        ("startTime", "start_time"),
        ("finishTime", "finish_time"),
    )
    for key, field in times:
        if r.HasField(field):
            out[key] = timestamp(getattr(r, field))
    if r.error_code or r.error_message:
        out["error"] = {"code": r.error_code, "message": r.error_message}
    # Shown once true (api-endpoints.md): a cancel was asked for; a rollback run hid it.
    if r.cancel_requested:
        out["cancelRequested"] = True
    if r.rolled_back:
        out["rolledBack"] = True
    if r.HasField("usage") and (r.usage.input_tokens or r.usage.output_tokens):
        out["usage"] = usage_json(r.usage)
    return out


def memory_json(m: memory_service_pb2.Memory, *, scored: bool = False) -> dict[str, Any]:
    """A memory as the API answers it; `scored` (a search result) adds its relevance, 0..1."""
    out: dict[str, Any] = {"id": m.id, "content": m.content, "version": m.version}
    if scored:
        out["score"] = m.score
    if m.kind:
        out["kind"] = m.kind
    if m.source_run_id:
        out["sourceRunId"] = m.source_run_id
    if m.source_message_ids:
        out["sourceMessageIds"] = list(m.source_message_ids)
    if m.HasField("create_time"):
        out["createTime"] = timestamp(m.create_time)
    if m.HasField("update_time"):
        out["updateTime"] = timestamp(m.update_time)
    return out


def search_mode_json(reply: memory_service_pb2.SearchMemoriesResponse) -> dict[str, str]:
    """How a memory search ran: `mode` hybrid or lexical, and for lexical `modeReason`."""
    mode = SEARCH_MODE_NAMES.get(reply.mode)
    if mode is None:
        return {}
    return {"mode": mode, **({"modeReason": reply.mode_reason} if reply.mode_reason else {})}


def memory_change_json(c: memory_service_pb2.MemoryChange) -> dict[str, Any]:
    out: dict[str, Any] = {
        "action": c.action,
        "memoryId": c.memory_id,
        "content": c.content,
        "actor": c.actor,
    }
    if c.kind:
        out["kind"] = c.kind
    if c.previous_content:
        out["previousContent"] = c.previous_content
    if c.source_run_id:
        out["sourceRunId"] = c.source_run_id
    if c.source_message_ids:
        out["sourceMessageIds"] = list(c.source_message_ids)
    if c.reason:
        out["reason"] = c.reason
    if c.HasField("create_time"):
        out["createTime"] = timestamp(c.create_time)
    return out


DENIAL_REASON_NAMES = {
    history_service_pb2.TOOL_DENIAL_REASON_NOT_DECLARED: "not_declared",
    history_service_pb2.TOOL_DENIAL_REASON_NOT_IN_PROFILE: "not_in_profile",
    history_service_pb2.TOOL_DENIAL_REASON_NOT_REGISTERED: "not_registered",
    history_service_pb2.TOOL_DENIAL_REASON_DENIED_BY_USER: "denied_by_user",
    history_service_pb2.TOOL_DENIAL_REASON_CANCELLED_BY_USER: "cancelled_by_user",
    history_service_pb2.TOOL_DENIAL_REASON_APPROVAL_EXPIRED: "approval_expired",
    history_service_pb2.TOOL_DENIAL_REASON_APPROVAL_UNANSWERED: "approval_unanswered",
}


def tool_denial_json(d: history_service_pb2.ToolDenial) -> dict[str, Any]:
    """An audit record of a refused tool call (the arguments only as their sha256)."""
    out: dict[str, Any] = {
        "ownerId": d.owner_id,
        "runId": d.run_id,
        "threadId": d.thread_id,
        "toolCallId": d.tool_call_id,
        "toolName": d.tool_name,
        "argumentsSha256": d.arguments_sha256,
    }
    if d.reason in DENIAL_REASON_NAMES:
        out["reason"] = DENIAL_REASON_NAMES[d.reason]
    if d.origin in RUNTIME_MODE_NAMES:
        out["origin"] = RUNTIME_MODE_NAMES[d.origin]
    if d.executor in EXECUTOR_NAMES:
        out["executor"] = EXECUTOR_NAMES[d.executor]
    if d.execution_profile_name:
        out["executionProfileName"] = d.execution_profile_name
    if d.HasField("create_time"):
        out["createTime"] = timestamp(d.create_time)
    return out


SOURCE_STATES = {
    message_pb2.TOOL_SOURCE_STATE_PENDING: "pending",
    message_pb2.TOOL_SOURCE_STATE_CONNECTED: "connected",
    message_pb2.TOOL_SOURCE_STATE_FAILED: "failed",
}


def tool_sources_json(sources: Sequence[message_pb2.ToolSourceStatus]) -> dict[str, Any]:
    """The configured outside tool sources as /readyz shows them: `ready` unless one failed
    (`degraded`, naming them; each entry says its last error and when), every source as
    GET /api/v1/tools shows it. A tool source never makes the deployment unready."""
    failed = [s.name for s in sources if s.state == message_pb2.TOOL_SOURCE_STATE_FAILED]
    out: dict[str, Any] = {"status": "degraded" if failed else "ready"}
    if failed:
        out["reason"] = "failed: " + ", ".join(failed)
    out["sources"] = [source_status_json(s) for s in sources]
    return out


def source_status_json(s: message_pb2.ToolSourceStatus) -> dict[str, Any]:
    """An outside tool source's state (GET /api/v1/tools `sources`, /readyz `toolSources`);
    unset fields omitted."""
    out: dict[str, Any] = {
        "name": s.name,
        "state": SOURCE_STATES.get(s.state, "pending"),
        "toolCount": s.tool_count,
        "consecutiveFailures": s.consecutive_failures,
    }
    if s.last_error:
        out["lastError"] = s.last_error
    if s.HasField("last_error_time"):
        out["lastErrorTime"] = timestamp(s.last_error_time)
    if s.HasField("last_success_time"):
        out["lastSuccessTime"] = timestamp(s.last_success_time)
    if s.HasField("next_attempt_time"):
        out["nextAttemptTime"] = timestamp(s.next_attempt_time)
    return out
