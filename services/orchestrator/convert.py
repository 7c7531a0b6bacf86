"""Protobuf <-> domain for the orchestrator: the StartRun request as a RunPlan, the requests
to history/router/executor, run events, and the stamping of every message a run writes."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from agentmesh.executor.v1 import executor_service_pb2
from agentmesh.history.v1 import history_service_pb2
from agentmesh.memory.v1 import memory_service_pb2
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from agentmesh.router.v1 import router_service_pb2
from agentmesh.type.v1 import approval_pb2, message_pb2, run_event_pb2

from services.memory import conversation
from services.orchestrator import core
from services.orchestrator.core import OpenSpans, RunPlan
from shared.approvals import Decision, decision_from_pb, decision_to_pb
from shared.domain import (
    EXECUTOR_TO_PB,
    RUN_STATE_FROM_PB,
    RUN_STATE_TO_PB,
    RUNTIME_MODE_TO_PB,
    MessageKind,
    RunState,
    runtime_mode_from_pb,
)
from shared.errors import InvalidArgument
from shared.ids import check_identifier, check_time_zone
from shared.messages import (
    Msg,
    Role,
    ToolCallBlock,
    Usage,
    msg_from_pb,
    msg_to_pb,
    system,
    usage_from_pb,
    usage_to_pb,
)
from shared.model.base import ToolSpec
from shared.profiles import ProfileRegistry, profile_from_pb, profile_to_pb
from shared.run_events import EventKind
from shared.tools import BUILTIN_KNOWN, KnownTools, check_client_tools

# Messages per LoadContext page when the memory agent's window is loaded.
OWNER_WINDOW_PAGE = 500

# ---- StartRun -> RunPlan ------------------------------------------------------------


def _time_zone(value: str, default: str) -> str:
    zone = value or default
    check_time_zone(zone, "time_zone")
    return zone


def _tool_spec(value: message_pb2.ToolSpec, field: str) -> ToolSpec:
    check_identifier(value.name, f"{field}.name")
    if not value.parameters_json:
        return ToolSpec(name=value.name, description=value.description)
    try:
        parameters = json.loads(value.parameters_json)
    except json.JSONDecodeError:
        parameters = None
    if not isinstance(parameters, dict):
        raise InvalidArgument(f"{field}.parameters_json", "must be a JSON Schema object")
    return ToolSpec(name=value.name, description=value.description, parameters=parameters)


def _tool_spec_to_pb(spec: ToolSpec) -> message_pb2.ToolSpec:
    return message_pb2.ToolSpec(
        name=spec.name, description=spec.description, parameters_json=json.dumps(spec.parameters)
    )


def plan_from_pb(
    request: pb.StartRunRequest,
    owner: str,
    registry: ProfileRegistry,
    *,
    max_message_chars: int,
    default_time_zone: str,
    known_tools: KnownTools = BUILTIN_KNOWN,
) -> RunPlan:
    thread_id = check_identifier(request.thread_id, "thread_id")
    run_id = check_identifier(request.run_id, "run_id")
    origin = runtime_mode_from_pb(request.origin, "origin")
    core.check_thread_for_origin(thread_id, origin)
    inputs = [msg_from_pb(m, f"messages[{i}]") for i, m in enumerate(request.messages)]
    core.check_inputs(inputs, max_message_chars)
    snapshot = profile_from_pb(request.profile, "profile") if request.HasField("profile") else None
    profile = core.resolve_profile(origin, request.profile_name, snapshot, registry)
    stamped = []
    for i, msg in enumerate(inputs):
        kind = core.input_kind(msg, f"messages[{i}]")
        stamped.append(
            dataclasses.replace(
                msg,
                id=msg.id or uuid.uuid4().hex,
                thread_id=thread_id,
                run_id=run_id,
                kind=kind,
                metadata={**msg.metadata, **core.message_metadata(origin, profile, kind)},
            )
        )
    client_tools = tuple(_tool_spec(t, f"tools[{i}]") for i, t in enumerate(request.tools))
    # Refused here, before anything of the run is stored (the executor checks it again).
    check_client_tools([t.name for t in client_tools], known_tools.has, "tools")
    return RunPlan(
        owner=owner,
        thread_id=thread_id,
        run_id=run_id,
        origin=origin,
        profile=profile,
        inputs=tuple(stamped),
        time_zone=_time_zone(request.time_zone, default_time_zone),
        server_tools=core.server_tools_for(origin, profile, request.declared_tools, known_tools),
        client_tools=client_tools,
        multitask_strategy=_strategy(request.multitask_strategy),
        decisions=tuple(
            decision_from_pb(d, f"tool_decisions[{i}]")
            for i, d in enumerate(request.tool_decisions)
        ),
    )


_STRATEGIES: dict[int, core.MultitaskStrategy] = {
    pb.MULTITASK_STRATEGY_UNSPECIFIED: core.MultitaskStrategy.ENQUEUE,
    pb.MULTITASK_STRATEGY_REJECT: core.MultitaskStrategy.REJECT,
    pb.MULTITASK_STRATEGY_ENQUEUE: core.MultitaskStrategy.ENQUEUE,
    pb.MULTITASK_STRATEGY_INTERRUPT: core.MultitaskStrategy.INTERRUPT,
    pb.MULTITASK_STRATEGY_ROLLBACK: core.MultitaskStrategy.ROLLBACK,
}
_STRATEGY_TO_HISTORY = {
    core.MultitaskStrategy.REJECT: history_service_pb2.MULTITASK_STRATEGY_REJECT,
    core.MultitaskStrategy.ENQUEUE: history_service_pb2.MULTITASK_STRATEGY_ENQUEUE,
    core.MultitaskStrategy.INTERRUPT: history_service_pb2.MULTITASK_STRATEGY_INTERRUPT,
    core.MultitaskStrategy.ROLLBACK: history_service_pb2.MULTITASK_STRATEGY_ROLLBACK,
}


def _strategy(value: int) -> core.MultitaskStrategy:
    try:
        return _STRATEGIES[value]
    except KeyError:
        raise InvalidArgument(
            "multitask_strategy", "must be REJECT, ENQUEUE, INTERRUPT or ROLLBACK"
        ) from None


# ---- requests to the peers ----------------------------------------------------------


def begin_run_request(
    plan: RunPlan, lease_holder: str = "", lease_seconds: float = 0.0
) -> history_service_pb2.BeginRunRequest:
    return history_service_pb2.BeginRunRequest(
        multitask_strategy=_STRATEGY_TO_HISTORY[plan.multitask_strategy],
        lease_holder=lease_holder,
        lease_seconds=lease_seconds,
        thread_id=plan.thread_id,
        runtime_mode=RUNTIME_MODE_TO_PB[plan.origin],
        run_id=plan.run_id,
        profile=profile_to_pb(plan.profile),
        input_messages=[msg_to_pb(m) for m in plan.inputs],
        context=history_service_pb2.ContextOptions(
            window=plan.profile.history_policy.window, time_zone=plan.time_zone
        ),
        answered_interrupt_ids=[d.tool_call_id for d in plan.decisions],
    )


def finish_run_request(
    plan: RunPlan,
    state: RunState,
    outputs: Sequence[Msg] = (),
    denials: Sequence[history_service_pb2.ToolDenial] = (),
    code: str = "",
    message: str = "",
    unstored: Usage | None = None,
) -> history_service_pb2.FinishRunRequest:
    """History's FinishRun of the run, ended `state` (with its error's code and message, and
    the usage of a model turn cut short, which no output message carries)."""
    request = history_service_pb2.FinishRunRequest(
        run_id=plan.run_id,
        state=RUN_STATE_TO_PB[state],
        output_messages=[msg_to_pb(m) for m in outputs],
        error_code=code,
        error_message=message,
        tool_denials=denials,
    )
    if unstored is not None:
        request.unstored_usage.CopyFrom(usage_to_pb(unstored))
    return request


def index_conversation_request(
    thread_id: str, messages: Sequence[Msg]
) -> memory_service_pb2.IndexConversationRequest:
    """The memory service's IndexConversation of a finished chat run's recallable messages
    (core.recallable), each cut to what the index keeps. A message's time is never later than
    now: the index forgets a thread by its newest message, never after history does."""
    out = memory_service_pb2.IndexConversationRequest()
    now = datetime.now(UTC)
    for m in messages[: conversation.MAX_MESSAGES_PER_CALL]:
        item = out.messages.add(
            message_id=m.id,
            thread_id=thread_id,
            role="user" if m.role is Role.USER else "assistant",
            text=m.text.strip()[: conversation.MAX_TEXT_CHARS],
        )
        item.create_time.FromDatetime(min(m.created_at, now))
    return out


def context_without_inputs(
    context: Sequence[message_pb2.Message], plan: RunPlan
) -> list[message_pb2.Message]:
    """The context history returned, minus the run's own input (sent apart, as the input)."""
    inputs = {m.id for m in plan.inputs}
    return [m for m in context if m.id not in inputs]


def route_request(
    plan: RunPlan,
    context: Sequence[message_pb2.Message],
    server_tools: Sequence[str],
    client_tools: Sequence[ToolSpec],
) -> router_service_pb2.RouteRequest:
    return router_service_pb2.RouteRequest(
        run_id=plan.run_id,
        profile=profile_to_pb(plan.profile),
        context_messages=context,
        input_message=msg_to_pb(plan.input),
        tools=[message_pb2.ToolSpec(name=n) for n in server_tools]
        + [_tool_spec_to_pb(t) for t in client_tools],
    )


def execute_request(
    plan: RunPlan,
    context: Sequence[message_pb2.Message],
    server_tools: Sequence[str],
    client_tools: Sequence[ToolSpec],
    reply_message_id: str,
    decisions: Sequence[Decision] = (),
) -> executor_service_pb2.ExecuteRequest:
    return executor_service_pb2.ExecuteRequest(
        run_id=plan.run_id,
        thread_id=plan.thread_id,
        executor=EXECUTOR_TO_PB[plan.profile.executor],
        profile=profile_to_pb(plan.profile),
        context_messages=context,
        input_message=msg_to_pb(plan.input),
        # The executor knows the specs of its server-side tools; the names authorise them.
        tools=[message_pb2.ToolSpec(name=n) for n in server_tools],
        client_tools=[_tool_spec_to_pb(t) for t in client_tools],
        time_zone=plan.time_zone,
        reply_message_id=reply_message_id,
        # After the router: what it dropped counts as not declared for this step.
        declared_tools=list(server_tools),
        batch_items=True,
        tool_decisions=[decision_to_pb(d) for d in decisions],
    )


def owner_window_request(plan: RunPlan, page_token: str) -> history_service_pb2.LoadContextRequest:
    """A page of the owner's chat messages (all threads) in the profile's window."""
    return history_service_pb2.LoadContextRequest(
        across_threads=True,
        context=history_service_pb2.ContextOptions(
            window=plan.profile.history_policy.window, time_zone=plan.time_zone
        ),
        page_size=OWNER_WINDOW_PAGE,
        page_token=page_token,
    )


def thread_context_request(
    plan: RunPlan, page_token: str
) -> history_service_pb2.LoadContextRequest:
    """A page of the run's thread as its context (the profile's window): where the
    approvals a resume answers wait."""
    return history_service_pb2.LoadContextRequest(
        thread_id=plan.thread_id,
        context=history_service_pb2.ContextOptions(
            window=plan.profile.history_policy.window, time_zone=plan.time_zone
        ),
        page_size=OWNER_WINDOW_PAGE,
        page_token=page_token,
    )


def approvals_of(
    result: executor_service_pb2.StepResult, outputs: Sequence[Msg], ttl: timedelta
) -> list[approval_pb2.ApprovalRequest]:
    """The step's waiting approvals, each expiring `ttl` after its stored call (the time
    the next run checks against)."""
    asked_at = {
        b.id: m.created_at for m in outputs for b in m.content if isinstance(b, ToolCallBlock)
    }
    out = []
    for a in result.approvals:
        request = approval_pb2.ApprovalRequest()
        request.CopyFrom(a)
        request.expire_time.FromDatetime(asked_at.get(a.tool_call_id, datetime.now(UTC)) + ttl)
        out.append(request)
    return out


def tool_denial(item: executor_service_pb2.ToolDenial) -> history_service_pb2.ToolDenial:
    """An executor's refused call as the audit record history stores. The two packages'
    reason codes are the same numbers: relayed as they are (a newer executor's too)."""
    return history_service_pb2.ToolDenial(
        tool_call_id=item.tool_call_id,
        tool_name=item.tool_name,
        arguments_sha256=item.arguments_sha256,
        reason=history_service_pb2.ToolDenialReason.ValueType(item.reason),
    )


# ---- messages the run writes --------------------------------------------------------


def stamp_output(message: message_pb2.Message, plan: RunPlan) -> Msg:
    """An executor's finished message, with the run's ids, kind and metadata."""
    return core.stamped(msg_from_pb(message, "message"), plan)


def route_message(decision: router_service_pb2.RouteResponse, plan: RunPlan) -> Msg | None:
    """The record of a router decision a model made (None when the rule decided): the tools
    it kept and why, with the routing call's usage, which thereby counts in the run's
    (history sums its output messages' usage). Audit only (kind route, mask 0)."""
    if not decision.HasField("usage"):
        return None
    tools = list(decision.tool_names)
    text = f"Route: {', '.join(tools) if tools else 'no tools'}. {decision.reason}"
    msg = system(
        text,
        id=uuid.uuid4().hex,
        kind=MessageKind.ROUTE,
        metadata={"route": {"tools": tools, "reason": decision.reason}},
        usage=usage_from_pb(decision.usage),
    )
    return core.stamped(msg, plan)


# ---- events -------------------------------------------------------------------------


def run_started() -> run_event_pb2.RunEvent:
    return run_event_pb2.RunEvent(run_started=run_event_pb2.RunStarted())


def run_finished(
    outcome: run_event_pb2.RunOutcome.ValueType,
    pending_tool_call_ids: Sequence[str] = (),
    usage: message_pb2.Usage | None = None,
    approvals: Sequence[approval_pb2.ApprovalRequest] = (),
) -> run_event_pb2.RunEvent:
    finished = run_event_pb2.RunFinished(
        outcome=outcome, pending_tool_call_ids=list(pending_tool_call_ids), approvals=approvals
    )
    if usage is not None:
        finished.usage.CopyFrom(usage)
    return run_event_pb2.RunEvent(run_finished=finished)


def custom(name: str, value: dict[str, Any]) -> run_event_pb2.RunEvent:
    event = run_event_pb2.RunEvent(custom=run_event_pb2.Custom(name=name))
    event.custom.value.struct_value.update(value)
    return event


def record_state(value: int) -> RunState:
    """The state of a record history answered with. One this version does not know is taken
    as running: not an end, so the run goes on (a newer history adds states, never ends)."""
    return RUN_STATE_FROM_PB.get(value, RunState.RUNNING)


# How a run's end reaches its stream (AG-UI): RUN_FINISHED with this outcome; a failed run
# ends with RUN_ERROR instead (run_error).
_AGUI_OUTCOMES = {
    RunState.SUCCEEDED: run_event_pb2.RUN_OUTCOME_SUCCESS,
    RunState.INTERRUPTED: run_event_pb2.RUN_OUTCOME_INTERRUPT,
    RunState.CANCELLED: run_event_pb2.RUN_OUTCOME_CANCELLED,
}


def run_end(
    outcome: RunState,
    pending_tool_call_ids: Sequence[str] = (),
    usage: message_pb2.Usage | None = None,
    approvals: Sequence[approval_pb2.ApprovalRequest] = (),
) -> run_event_pb2.RunEvent:
    """RUN_FINISHED of a run that ended `outcome` (succeeded, interrupted or cancelled)."""
    try:
        agui = _AGUI_OUTCOMES[outcome]
    except KeyError:
        raise ValueError(f"a run that ended {outcome.value} ends with RUN_ERROR") from None
    return run_finished(agui, pending_tool_call_ids, usage, approvals)


def end_of(record: history_service_pb2.Run) -> run_event_pb2.RunEvent:
    """The terminal event of a run that already ended (a StartRun retry of a finished run)."""
    state = record_state(record.state)
    usage = record.usage if record.HasField("usage") else None
    if state is RunState.FAILED:
        return run_error(
            record.error_code or "INTERNAL", record.error_message or "the run failed", usage
        )
    return run_end(state if state in _AGUI_OUTCOMES else RunState.SUCCEEDED, usage=usage)


def run_error(
    code: str, message: str, usage: message_pb2.Usage | None = None
) -> run_event_pb2.RunEvent:
    """RUN_ERROR, with the usage of a run that called a model before it failed."""
    error = run_event_pb2.RunError(code=code, message=message)
    if usage is not None and (usage.input_tokens or usage.output_tokens):
        error.usage.CopyFrom(usage)
    return run_event_pb2.RunEvent(run_error=error)


def step_started(name: str) -> run_event_pb2.RunEvent:
    return run_event_pb2.RunEvent(step_started=run_event_pb2.StepStarted(step_name=name))


def step_finished(name: str) -> run_event_pb2.RunEvent:
    return run_event_pb2.RunEvent(step_finished=run_event_pb2.StepFinished(step_name=name))


def closing_event(kind: EventKind, ident: str) -> run_event_pb2.RunEvent:
    """The event of `kind` (a CLOSES kind of shared.run_events) that closes span `ident`."""
    event = run_event_pb2.RunEvent()
    body = getattr(event, kind.payload)
    body.SetInParent()
    setattr(body, kind.id_field, ident)
    return event


def observe(spans: OpenSpans, event: run_event_pb2.RunEvent) -> None:
    """Feed an event to the run's open-span tracker."""
    spans.observe_pb(event)
