"""Protobuf <-> the history service's domain types, and request validation."""

from __future__ import annotations

import calendar
import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from agentmesh.history.v1 import history_service_pb2 as pb
from agentmesh.type.v1 import content_pb2, message_pb2
from google.protobuf import json_format, timestamp_pb2

from services.history import context, core, runs
from services.history.audit import AuditFilter
from services.history.context import ContextKey, ContextOptions
from services.history.core import (
    Message,
    MultitaskStrategy,
    NewMessage,
    Run,
    RunState,
    Thread,
    ToolDenial,
    UsageDay,
)
from services.history.deletions import Deletion, DeletionKind, DeletionState
from services.history.runs import BeginRequest, Begun, FinishRequest
from shared import timestamps, wire
from shared.domain import (
    EXECUTOR_FROM_PB,
    EXECUTOR_TO_PB,
    MESSAGE_KIND_TO_PB,
    RUN_STATE_FROM_PB,
    RUN_STATE_TO_PB,
    RUNTIME_MODE_FROM_PB,
    RUNTIME_MODE_TO_PB,
    ExecutorKind,
    RuntimeMode,
    message_kind_from_pb,
    runtime_mode_from_pb,
)
from shared.errors import InvalidArgument
from shared.ids import OWNER_RULE, check_identifier, is_owner_id, optional_identifier
from shared.messages import Usage
from shared.profiles import profile_from_pb, profile_to_pb

MAX_NAME = 200

ROLE_FROM_PB = {
    message_pb2.ROLE_USER: "user",
    message_pb2.ROLE_ASSISTANT: "assistant",
    message_pb2.ROLE_SYSTEM: "system",
}
ROLE_TO_PB = {v: k for k, v in ROLE_FROM_PB.items()}


# --- validation of scalar fields ----------------------------------------------------------


# Ids are chosen by callers (AG-UI clients, the orchestrator): the one rule of shared.ids.
identifier = check_identifier


def optional_mode(value: int, field: str) -> RuntimeMode | None:
    if value == message_pb2.RUNTIME_MODE_UNSPECIFIED:
        return None
    try:
        return RUNTIME_MODE_FROM_PB[value]
    except KeyError:
        raise InvalidArgument(field, "must be chat or automation") from None


def optional_executor(value: int, field: str) -> ExecutorKind | None:
    if value == 0:
        return None
    try:
        return EXECUTOR_FROM_PB[value]
    except KeyError:
        raise InvalidArgument(field, "must be worker or memory") from None


def run_state(value: int, field: str = "state") -> RunState:
    try:
        return RUN_STATE_FROM_PB[value]
    except KeyError:
        raise InvalidArgument(field, "must be a RunState value") from None


def timestamp(ts: timestamp_pb2.Timestamp, field: str) -> datetime:
    return timestamps.from_pb(ts, field)


# --- messages -----------------------------------------------------------------------------


def new_message(m: message_pb2.Message, field: str) -> NewMessage:
    identifier(m.id, f"{field}.id")
    if m.role not in ROLE_FROM_PB:
        raise InvalidArgument(f"{field}.role", "must be user, assistant or system")
    if len(m.name) > MAX_NAME:
        raise InvalidArgument(f"{field}.name", f"must be at most {MAX_NAME} characters")
    meta = m.metadata
    profile_name = meta.execution_profile_name
    if len(profile_name) > 100:
        raise InvalidArgument(f"{field}.metadata.execution_profile_name", "is too long")
    return NewMessage(
        id=m.id,
        role=ROLE_FROM_PB[m.role],
        kind=message_kind_from_pb(m.kind, f"{field}.kind"),
        content=tuple(
            json_format.MessageToDict(b, preserving_proto_field_name=True) for b in m.content
        ),
        name=m.name,
        run_id=optional_identifier(m.run_id, f"{field}.run_id"),
        origin=optional_mode(meta.origin, f"{field}.metadata.origin"),
        executor=optional_executor(meta.executor, f"{field}.metadata.executor"),
        execution_profile_name=profile_name,
        extra=_extra(meta, f"{field}.metadata"),
        input_tokens=m.usage.input_tokens,
        output_tokens=m.usage.output_tokens,
        finished_reason=m.finished_reason[:64],
    )


def _extra(meta: message_pb2.MessageMetadata, field: str) -> dict[str, Any]:
    """extra_json (lossless) wins; the older Struct `extra` is read when it is absent."""
    if meta.extra_json:
        try:
            value = json.loads(meta.extra_json)
        except ValueError:
            raise InvalidArgument(f"{field}.extra_json", "is not valid JSON") from None
        if not isinstance(value, dict):
            raise InvalidArgument(f"{field}.extra_json", "must be a JSON object")
        return value
    return json_format.MessageToDict(meta.extra) if meta.HasField("extra") else {}


def new_messages(items: Sequence[message_pb2.Message], field: str) -> list[NewMessage]:
    return [new_message(m, f"{field}[{i}]") for i, m in enumerate(items)]


def _block(data: Any) -> Any:
    # Plain text is nearly every block: its JSON dict is also a valid constructor argument,
    # which is several times cheaper than ParseDict (that is needed for enums and bytes).
    text = data.get("text") if len(data) == 1 else None
    if isinstance(text, dict) and set(text) <= {"text"}:
        return data
    return json_format.ParseDict(data, content_pb2.ContentBlock())


def _ts(value: datetime) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(
        seconds=calendar.timegm(value.utctimetuple()), nanos=value.microsecond * 1000
    )


def message_to_pb(m: Message) -> message_pb2.Message:
    # One constructor call with nested dicts: this runs for every message of every page.
    # (protobuf takes a dict for a message field; its stubs name only the message type.)
    out = message_pb2.Message(
        id=m.id,
        role=ROLE_TO_PB[m.role],
        name=m.name,
        content=[_block(b) for b in m.content],
        metadata={  # type: ignore[arg-type]
            "hidden_from_user": m.hidden_from_user,
            "origin": RUNTIME_MODE_TO_PB[m.origin],
            "executor": EXECUTOR_TO_PB[m.executor] if m.executor else 0,
            "execution_profile_name": m.execution_profile_name,
        },
        created_at={  # type: ignore[arg-type]
            "seconds": calendar.timegm(m.created_at.utctimetuple()),
            "nanos": m.created_at.microsecond * 1000,
        },
        finished_reason=m.finished_reason,
        thread_id=m.thread_id,
        run_id=m.run_id,
        kind=MESSAGE_KIND_TO_PB[m.kind],
        visibility_mask=m.visibility_mask,
        position=m.position,
        owner_sequence=m.sequence,
    )
    if m.input_tokens or m.output_tokens:
        out.usage.input_tokens = m.input_tokens
        out.usage.output_tokens = m.output_tokens
    if m.extra:
        out.metadata.extra_json = json.dumps(m.extra, separators=(",", ":"), ensure_ascii=False)
        # Readers of the older field still find the data there (numbers as doubles).
        out.metadata.extra.update(dict(m.extra))
    return out


def add_serialized(parent: Any, field: str, serialized: Iterable[bytes]) -> None:
    """Append stored serving copies to the repeated Message field `field` of `parent`, framed
    into one buffer that upb parses in one call (shared/wire.py): several times cheaper than
    add() and a parse per item."""
    number = parent.DESCRIPTOR.fields_by_name[field].number
    parent.MergeFromString(wire.repeated(number, serialized))


def thread_to_pb(t: Thread) -> pb.Thread:
    return pb.Thread(
        id=t.id,
        runtime_mode=RUNTIME_MODE_TO_PB[t.runtime_mode],
        create_time=_ts(t.create_time),
        update_time=_ts(t.update_time),
        message_count=t.message_count,
        shown_message_count=t.shown_count,
    )


def messages_usage(items: Sequence[message_pb2.Message], field: str) -> Usage:
    """What a run's output messages say it used: their usage summed (estimated when any
    part was)."""
    total = Usage()
    for i, m in enumerate(items):
        if m.HasField("usage"):
            total += usage(m.usage, f"{field}[{i}].usage")
    return total


def usage(u: message_pb2.Usage, field: str) -> Usage:
    if u.input_tokens < 0 or u.output_tokens < 0:
        raise InvalidArgument(field, "token counts must not be negative")
    return Usage(u.input_tokens, u.output_tokens, u.estimated)


def run_to_pb(r: Run) -> pb.Run:
    out = pb.Run(
        id=r.id,
        thread_id=r.thread_id,
        state=RUN_STATE_TO_PB[r.state],
        profile=profile_to_pb(r.profile),
        origin=RUNTIME_MODE_TO_PB[r.origin],
        create_time=_ts(r.create_time),
        error_code=r.error_code,
        error_message=r.error_message,
    )
    if r.start_time is not None:
        out.start_time.CopyFrom(_ts(r.start_time))
    if r.finish_time is not None:
        out.finish_time.CopyFrom(_ts(r.finish_time))
    out.cancel_requested = r.cancel_requested
    out.rolled_back = r.rolled_back
    if r.lease_expire_time is not None and r.active:
        out.lease_expire_time.CopyFrom(_ts(r.lease_expire_time))
    if r.input_tokens or r.output_tokens:
        out.usage.input_tokens = r.input_tokens
        out.usage.output_tokens = r.output_tokens
        out.usage.estimated = r.usage_estimated
    return out


STRATEGY_FROM_PB: dict[int, MultitaskStrategy] = {
    pb.MULTITASK_STRATEGY_UNSPECIFIED: MultitaskStrategy.ENQUEUE,
    pb.MULTITASK_STRATEGY_REJECT: MultitaskStrategy.REJECT,
    pb.MULTITASK_STRATEGY_ENQUEUE: MultitaskStrategy.ENQUEUE,
    pb.MULTITASK_STRATEGY_INTERRUPT: MultitaskStrategy.INTERRUPT,
    pb.MULTITASK_STRATEGY_ROLLBACK: MultitaskStrategy.ROLLBACK,
}


def multitask_strategy(value: int, field: str = "multitask_strategy") -> MultitaskStrategy:
    try:
        return STRATEGY_FROM_PB[value]
    except KeyError:
        raise InvalidArgument(field, "must be REJECT, ENQUEUE, INTERRUPT or ROLLBACK") from None


DENIAL_REASON_FROM_PB = {
    pb.TOOL_DENIAL_REASON_NOT_DECLARED: "not_declared",
    pb.TOOL_DENIAL_REASON_NOT_IN_PROFILE: "not_in_profile",
    pb.TOOL_DENIAL_REASON_NOT_REGISTERED: "not_registered",
    pb.TOOL_DENIAL_REASON_DENIED_BY_USER: "denied_by_user",
    pb.TOOL_DENIAL_REASON_CANCELLED_BY_USER: "cancelled_by_user",
    pb.TOOL_DENIAL_REASON_APPROVAL_EXPIRED: "approval_expired",
    pb.TOOL_DENIAL_REASON_APPROVAL_UNANSWERED: "approval_unanswered",
}
DENIAL_REASON_TO_PB = {v: k for k, v in DENIAL_REASON_FROM_PB.items()}


def new_denials(items: Sequence[pb.ToolDenial], field: str) -> list[tuple[str, str, str, str]]:
    """(call id, tool, digest, reason) of FinishRun's tool_denials, validated."""
    out = []
    for i, d in enumerate(items):
        reason = DENIAL_REASON_FROM_PB.get(d.reason, "")
        core.check_denial(d.tool_call_id, d.tool_name, d.arguments_sha256, reason, f"{field}[{i}]")
        out.append((d.tool_call_id, d.tool_name, d.arguments_sha256, reason))
    return out


def denial_to_pb(d: ToolDenial) -> pb.ToolDenial:
    return pb.ToolDenial(
        tool_call_id=d.tool_call_id,
        tool_name=d.tool_name,
        arguments_sha256=d.arguments_sha256,
        reason=DENIAL_REASON_TO_PB[d.reason],
        owner_id=d.owner_id,
        run_id=d.run_id,
        thread_id=d.thread_id,
        origin=RUNTIME_MODE_TO_PB[d.origin],
        executor=EXECUTOR_TO_PB[d.executor],
        execution_profile_name=d.execution_profile_name,
        create_time=_ts(d.created_at),
    )


# --- threads and messages -----------------------------------------------------------------


def append_request(
    request: pb.AppendMessagesRequest,
) -> tuple[str, RuntimeMode | None, list[NewMessage]]:
    """An AppendMessages request's thread, mode (None: the thread's, which must exist) and
    messages. Without a mode, the first message's origin names it."""
    thread_id = identifier(request.thread_id, "thread_id")
    items = new_messages(request.messages, "messages")
    if not items:
        raise InvalidArgument("messages", "must hold at least one message")
    mode = optional_mode(request.runtime_mode, "runtime_mode")
    if mode is None:
        mode = next((m.origin for m in items if m.origin is not None), None)
    return thread_id, mode, items


def backward(direction: int) -> bool:
    """Whether a ListHistory pages backward (newest first)."""
    if direction not in (pb.DIRECTION_UNSPECIFIED, pb.DIRECTION_FORWARD, pb.DIRECTION_BACKWARD):
        raise InvalidArgument("direction", "must be FORWARD or BACKWARD")
    return direction == pb.DIRECTION_BACKWARD


# --- runs -------------------------------------------------------------------------------


def begin_request(request: pb.BeginRunRequest, owner: str, now: datetime) -> BeginRequest:
    thread_id = identifier(request.thread_id, "thread_id")
    run_id = identifier(request.run_id, "run_id")
    mode = runtime_mode_from_pb(request.runtime_mode, "runtime_mode")
    profile = profile_from_pb(request.profile, "profile")
    inputs = new_messages(request.input_messages, "input_messages")
    options = context_options(request.context, profile.history_policy.window)
    strategy = multitask_strategy(request.multitask_strategy)
    answers = [
        identifier(call_id, f"answered_interrupt_ids[{i}]")
        for i, call_id in enumerate(request.answered_interrupt_ids)
    ]
    lease = runs.begin_lease(request.lease_holder, request.lease_seconds, now)
    begin = runs.Begin(owner, run_id, thread_id, mode, profile, strategy, lease, now)
    return BeginRequest(begin, inputs, answers, options)


def begun_to_pb(begun: Begun) -> pb.BeginRunResponse:
    run = run_to_pb(begun.run)
    run.ahead_run_ids.extend(begun.ahead)
    return pb.BeginRunResponse(
        thread=thread_to_pb(begun.thread),
        run=run,
        context_messages=[message_to_pb(m) for m in begun.context],
    )


def finish_request(request: pb.FinishRunRequest, owner: str, now: datetime) -> FinishRequest:
    run_id = identifier(request.run_id, "run_id")
    end = runs.run_end(run_state(request.state), request.error_code, request.error_message)
    outputs = new_messages(request.output_messages, "output_messages")
    denials = new_denials(request.tool_denials, "tool_denials")
    spent = messages_usage(request.output_messages, "output_messages")
    if request.HasField("unstored_usage"):
        spent += usage(request.unstored_usage, "unstored_usage")
    return FinishRequest(owner, runs.plan_finish(run_id, end, spent, now), outputs, denials)


def expired_run_to_pb(r: Run) -> pb.Run:
    """A run ExpireRunLeases ended (an admin call, across owners): with its owner."""
    out = run_to_pb(r)
    out.owner_id = r.owner_id
    return out


# --- the audit ---------------------------------------------------------------------------


def audited_owner(owner: str) -> str:
    """The owner an admin names to audit."""
    if not is_owner_id(owner):
        raise InvalidArgument("owner_id", OWNER_RULE)
    return owner


def audit_filter(f: pb.AuditFilter) -> AuditFilter:
    if len(f.execution_profile_name) > 100:
        raise InvalidArgument("filter.execution_profile_name", "must be at most 100 characters")
    start = end = None
    if f.HasField("start_time"):
        start = timestamp(f.start_time, "filter.start_time")
    if f.HasField("end_time"):
        end = timestamp(f.end_time, "filter.end_time")
    if start is not None and end is not None and end <= start:
        raise InvalidArgument("filter.end_time", "must be after filter.start_time")
    return AuditFilter(
        origin=optional_mode(f.origin, "filter.origin"),
        executor=optional_executor(f.executor, "filter.executor"),
        execution_profile_name=f.execution_profile_name,
        thread_id=optional_identifier(f.thread_id, "filter.thread_id"),
        start_time=start,
        end_time=end,
    )


# --- context options ----------------------------------------------------------------------


def context_options(opts: pb.ContextOptions, default_window: str = "all") -> ContextOptions:
    window = context.parse_window(opts.window or default_window, "context.window")
    zone = context.parse_zone(opts.time_zone, "context.time_zone")
    if opts.max_chars < 0:
        raise InvalidArgument("context.max_chars", "must be 0 (no budget) or positive")
    return ContextOptions(window, zone, opts.max_chars)


def context_thread(thread_id: str, across_threads: bool) -> str | None:
    """The thread of a LoadContext, or None for a context across the owner's threads."""
    if not across_threads:
        return identifier(thread_id, "thread_id")
    if thread_id:
        raise InvalidArgument("thread_id", "must be empty when across_threads is set")
    return None


def context_scope(
    owner: str, thread_id: str | None, request: pb.LoadContextRequest, options: ContextOptions
) -> list[Any]:
    """What a LoadContext page token is good for: the same owner, thread and options."""
    return [
        "context",
        owner,
        thread_id,
        request.across_threads,
        request.context.window or "all",
        options.zone.key,
        options.max_chars,
    ]


def context_key(serving_copy: bytes) -> ContextKey:
    """The context key of a stored serving copy (the columns it was stored from)."""
    m = message_pb2.Message.FromString(serving_copy)
    return ContextKey(m.created_at.ToDatetime(tzinfo=UTC), m.thread_id, m.position)


_DELETION_KIND_TO_PB = {
    DeletionKind.THREAD: pb.DELETION_KIND_THREAD,
    DeletionKind.OWNER: pb.DELETION_KIND_OWNER,
    DeletionKind.RETENTION: pb.DELETION_KIND_RETENTION,
}
_DELETION_STATE_TO_PB = {
    DeletionState.RUNNING: pb.DELETION_STATE_RUNNING,
    DeletionState.SUCCEEDED: pb.DELETION_STATE_SUCCEEDED,
}


def deletion_to_pb(d: Deletion) -> pb.Deletion:
    out = pb.Deletion(
        id=d.id,
        owner_id=d.owner_id,
        kind=_DELETION_KIND_TO_PB[d.kind],
        thread_id=d.thread_id,
        state=_DELETION_STATE_TO_PB[d.state],
        create_time=_ts(d.create_time),
        requested_by=d.requested_by,
    )
    if d.finish_time is not None:
        out.finish_time.CopyFrom(_ts(d.finish_time))
    for s in d.steps:
        step = out.steps.add(
            service=s.service, done=s.done, attempts=s.attempts, last_error=s.last_error
        )
        step.deleted_counts.update(s.deleted_counts)
        if s.update_time is not None:
            step.update_time.CopyFrom(_ts(s.update_time))
    return out


def usage_day_to_pb(d: UsageDay) -> pb.OwnerUsageDay:
    return pb.OwnerUsageDay(
        day=d.day,
        runs=d.runs,
        failed_runs=d.failed_runs,
        automation_runs=d.automation_runs,
        input_tokens=d.input_tokens,
        output_tokens=d.output_tokens,
        duration_ms=d.duration_ms,
        tokens_estimated=d.tokens_estimated,
    )
