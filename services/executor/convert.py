"""Protobuf <-> domain for the executor: ExecuteRequest -> StepRequest, step items -> responses."""

from __future__ import annotations

import json

from agentmesh.executor.v1 import executor_service_pb2 as pb
from agentmesh.type.v1 import approval_pb2, message_pb2, run_event_pb2

from services.executor.agents.base import StepRequest
from services.executor.events import (
    StepItem,
    StepResult,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallResult,
    ToolCallStart,
    ToolDenied,
    TurnUsage,
)
from services.executor.tools import SourceState, SourceStatus, ToolRegistry, requires_approval
from shared.approvals import decision_from_pb
from shared.domain import EXECUTOR_FROM_PB
from shared.errors import InvalidArgument
from shared.ids import check_identifier
from shared.messages import Msg, msg_from_pb, msg_to_pb, usage_to_pb
from shared.model.base import ToolSpec
from shared.profiles import profile_from_pb


def tool_spec_from_pb(value: message_pb2.ToolSpec, field: str) -> ToolSpec:
    if not value.parameters_json:
        return ToolSpec(name=value.name, description=value.description)
    try:
        parameters = json.loads(value.parameters_json)
    except json.JSONDecodeError:
        raise InvalidArgument(f"{field}.parameters_json", "must be a JSON Schema object") from None
    if not isinstance(parameters, dict):
        raise InvalidArgument(f"{field}.parameters_json", "must be a JSON Schema object")
    return ToolSpec(name=value.name, description=value.description, parameters=parameters)


def step_from_pb(request: pb.ExecuteRequest, owner: str) -> StepRequest:
    executor = EXECUTOR_FROM_PB.get(request.executor)
    if executor is None:
        raise InvalidArgument("executor", "must be worker or memory")
    for name in ("run_id", "thread_id", "reply_message_id"):
        value = getattr(request, name)
        check_identifier(value, name)
    if not request.HasField("input_message"):
        raise InvalidArgument("input_message", "is required")
    if request.sequence_horizon < 0:
        raise InvalidArgument("sequence_horizon", "must not be negative")
    return StepRequest(
        run_id=request.run_id,
        thread_id=request.thread_id,
        owner=owner,
        executor=executor,
        profile=profile_from_pb(request.profile, "profile"),
        context=tuple(
            msg_from_pb(m, f"context_messages[{i}]") for i, m in enumerate(request.context_messages)
        ),
        input=msg_from_pb(request.input_message, "input_message"),
        tools=tuple(t.name for t in request.tools),
        client_tools=tuple(
            tool_spec_from_pb(t, f"client_tools[{i}]") for i, t in enumerate(request.client_tools)
        ),
        time_zone=request.time_zone,
        reply_message_id=request.reply_message_id,
        declared_tools=tuple(request.declared_tools),
        sequence_horizon=request.sequence_horizon,
        decisions=tuple(
            decision_from_pb(d, f"tool_decisions[{i}]")
            for i, d in enumerate(request.tool_decisions)
        ),
    )


DENIAL_REASON_TO_PB = {
    "not_declared": pb.TOOL_DENIAL_REASON_NOT_DECLARED,
    "not_in_profile": pb.TOOL_DENIAL_REASON_NOT_IN_PROFILE,
    "not_registered": pb.TOOL_DENIAL_REASON_NOT_REGISTERED,
    "denied_by_user": pb.TOOL_DENIAL_REASON_DENIED_BY_USER,
    "cancelled_by_user": pb.TOOL_DENIAL_REASON_CANCELLED_BY_USER,
    "approval_expired": pb.TOOL_DENIAL_REASON_APPROVAL_EXPIRED,
    "approval_unanswered": pb.TOOL_DENIAL_REASON_APPROVAL_UNANSWERED,
}


def _event(item: StepItem) -> run_event_pb2.RunEvent:
    match item:
        case TextStart(message_id=mid):
            return run_event_pb2.RunEvent(
                text_message_start=run_event_pb2.TextMessageStart(
                    message_id=mid, role=message_pb2.ROLE_ASSISTANT
                )
            )
        case TextDelta(message_id=mid, delta=delta):
            return run_event_pb2.RunEvent(
                text_message_content=run_event_pb2.TextMessageContent(message_id=mid, delta=delta)
            )
        case TextEnd(message_id=mid):
            return run_event_pb2.RunEvent(
                text_message_end=run_event_pb2.TextMessageEnd(message_id=mid)
            )
        case ToolCallStart(tool_call_id=cid, name=name, parent_message_id=parent):
            return run_event_pb2.RunEvent(
                tool_call_start=run_event_pb2.ToolCallStart(
                    tool_call_id=cid, tool_call_name=name, parent_message_id=parent
                )
            )
        case ToolCallArgs(tool_call_id=cid, delta=delta):
            return run_event_pb2.RunEvent(
                tool_call_args=run_event_pb2.ToolCallArgs(tool_call_id=cid, delta=delta)
            )
        case ToolCallEnd(tool_call_id=cid):
            return run_event_pb2.RunEvent(tool_call_end=run_event_pb2.ToolCallEnd(tool_call_id=cid))
        case ToolCallResult(message_id=mid, tool_call_id=cid, content=content):
            return run_event_pb2.RunEvent(
                tool_call_result=run_event_pb2.ToolCallResult(
                    message_id=mid, tool_call_id=cid, content=content
                )
            )
    raise TypeError(f"not a step event: {item!r}")


def item_to_pb(item: StepItem) -> pb.ExecuteResponse:
    if isinstance(item, ToolDenied):
        return pb.ExecuteResponse(
            tool_denial=pb.ToolDenial(
                tool_call_id=item.tool_call_id,
                tool_name=item.tool_name,
                arguments_sha256=item.arguments_sha256,
                reason=DENIAL_REASON_TO_PB[item.reason],
            )
        )
    if isinstance(item, Msg):
        return pb.ExecuteResponse(message=msg_to_pb(item))
    if isinstance(item, TurnUsage):
        return pb.ExecuteResponse(turn_usage=usage_to_pb(item.usage))
    if isinstance(item, StepResult):
        result = pb.StepResult(
            pending_tool_call_ids=list(item.pending_tool_call_ids),
            finished_reason=item.finished_reason,
            approvals=[
                approval_pb2.ApprovalRequest(
                    tool_call_id=a.tool_call_id, tool_name=a.tool_name, arguments=a.arguments
                )
                for a in item.approvals
            ],
        )
        result.usage.input_tokens = item.usage.input_tokens
        result.usage.output_tokens = item.usage.output_tokens
        result.usage.estimated = item.usage.estimated
        return pb.ExecuteResponse(result=result)
    return pb.ExecuteResponse(event=_event(item))


def registered_tool_to_pb(tools: ToolRegistry, name: str) -> message_pb2.RegisteredTool:
    """A registered tool as ListTools lists it: its spec (the schema offered to models),
    its source and whether it always needs approval."""
    tool = tools.get(name)
    spec = tools.spec(name)
    return message_pb2.RegisteredTool(
        spec=message_pb2.ToolSpec(
            name=spec.name,
            description=spec.description,
            parameters_json=json.dumps(dict(spec.parameters), ensure_ascii=False),
        ),
        source=str(getattr(tool, "source", "builtin")),
        requires_approval=tool is not None and requires_approval(tool),
    )


SOURCE_STATE_TO_PB = {
    SourceState.PENDING: message_pb2.TOOL_SOURCE_STATE_PENDING,
    SourceState.CONNECTED: message_pb2.TOOL_SOURCE_STATE_CONNECTED,
    SourceState.FAILED: message_pb2.TOOL_SOURCE_STATE_FAILED,
}


def source_status_to_pb(status: SourceStatus) -> message_pb2.ToolSourceStatus:
    out = message_pb2.ToolSourceStatus(
        name=status.name,
        state=SOURCE_STATE_TO_PB[status.state],
        tool_count=status.tool_count,
        last_error=status.last_error,
        consecutive_failures=status.consecutive_failures,
    )
    for field, when in (
        (out.last_error_time, status.last_error_at),
        (out.last_success_time, status.last_success_at),
        (out.next_attempt_time, status.next_attempt_at),
    ):
        if when is not None:
            field.FromDatetime(when)
    return out
