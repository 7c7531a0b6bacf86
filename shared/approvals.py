"""Approval of tool calls (human in the loop): what is pending in a thread, and what a run's
decisions on it are. One rule for the orchestrator (which checks a resume before anything
is stored) and the executor (which runs or refuses the calls).

A server-side call of a tool that requires approval (its source's `requires_approval`, or
the profile's `tool_policy.requires_approval`) is stored with state `asking` and no result;
the run ends with outcome interrupt, one AG-UI interrupt per call (id = the tool call id).
The thread's next run answers each with `resume` (approve, edit, deny); an approval not
answered by the next run, or answered after it expired, is recorded as denied. Nothing runs
without an approval.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from agentmesh.type.v1 import approval_pb2

from shared.errors import InvalidArgument
from shared.messages import Msg, ToolCallState
from shared.tools import DenialReason


class DecisionKind(StrEnum):
    APPROVE = "approve"
    EDIT = "edit"
    DENY = "deny"
    EXPIRE = "expire"
    UNANSWERED = "unanswered"
    CANCEL = "cancel"


RUNS = frozenset({DecisionKind.APPROVE, DecisionKind.EDIT})

KIND_TO_PB = {
    DecisionKind.APPROVE: approval_pb2.TOOL_DECISION_KIND_APPROVE,
    DecisionKind.EDIT: approval_pb2.TOOL_DECISION_KIND_EDIT,
    DecisionKind.DENY: approval_pb2.TOOL_DECISION_KIND_DENY,
    DecisionKind.EXPIRE: approval_pb2.TOOL_DECISION_KIND_EXPIRE,
    DecisionKind.UNANSWERED: approval_pb2.TOOL_DECISION_KIND_UNANSWERED,
    DecisionKind.CANCEL: approval_pb2.TOOL_DECISION_KIND_CANCEL,
}
KIND_FROM_PB = {v: k for k, v in KIND_TO_PB.items()}

# What the model reads, and the result stores, for a call that did not run.
NOT_RUN = {
    DecisionKind.DENY: "error: the user denied this tool call; it was not executed",
    DecisionKind.EXPIRE: "error: nobody approved this tool call in time; it was not executed",
    DecisionKind.UNANSWERED: (
        "error: the user did not answer the approval of this tool call; it was not executed"
    ),
    DecisionKind.CANCEL: "error: the user cancelled this tool call; it was not executed",
}
# How the audit lists a call a person's decision kept from running, beside policy denials.
PERSON_DENIALS = {
    DecisionKind.DENY: DenialReason.DENIED_BY_USER,
    DecisionKind.CANCEL: DenialReason.CANCELLED_BY_USER,
    DecisionKind.EXPIRE: DenialReason.APPROVAL_EXPIRED,
    DecisionKind.UNANSWERED: DenialReason.APPROVAL_UNANSWERED,
}


@dataclass(frozen=True)
class Decision:
    tool_call_id: str
    kind: DecisionKind
    # EDIT: the arguments (a JSON object, as text) to run the call with.
    arguments: str = ""
    decided_by: str = ""


@dataclass(frozen=True)
class Pending:
    """A call waiting for approval: stored `asking`, without a result."""

    tool_call_id: str
    tool_name: str
    arguments: str
    asked_at: datetime

    def expires_at(self, ttl: timedelta) -> datetime:
        return self.asked_at + ttl


def pending_approvals(messages: Iterable[Msg]) -> dict[str, Pending]:
    """The thread's calls waiting for approval, by tool call id, oldest first."""
    messages = list(messages)
    answered = {r.id for m in messages for r in m.tool_results}
    return {
        c.id: Pending(c.id, c.name, c.input or "{}", m.created_at)
        for m in messages
        for c in m.tool_calls
        if c.state is ToolCallState.ASKING and c.id not in answered
    }


def check(
    given: Sequence[Decision],
    pending: Mapping[str, Pending],
    *,
    now: datetime,
    ttl: timedelta,
    field: str = "resume",
) -> None:
    """A run's decisions, before anything of it is stored: each answers a waiting,
    unexpired approval of the thread, once; INVALID_ARGUMENT naming `<field>[i].interruptId`
    otherwise (an id of another owner's thread is not found, like any unknown id)."""
    seen: set[str] = set()
    for i, d in enumerate(given):
        where = f"{field}[{i}].interruptId"
        p = pending.get(d.tool_call_id)
        if p is None:
            raise InvalidArgument(where, "no approval of this thread is waiting with this id")
        if d.tool_call_id in seen:
            raise InvalidArgument(where, "answers the same interrupt twice")
        if now >= p.expires_at(ttl):
            raise InvalidArgument(
                where, f"the approval expired at {p.expires_at(ttl).isoformat()}; it was denied"
            )
        seen.add(d.tool_call_id)


def settle(
    given: Sequence[Decision],
    pending: Mapping[str, Pending],
    *,
    now: datetime,
    ttl: timedelta,
    owner: str,
) -> list[Decision]:
    """Every waiting approval's decision for the run that admitted `given` (checked): the
    given ones, stamped with who decided; the others expired or unanswered, so nothing
    waits past the thread's next run. A given one that expired meanwhile is expired."""
    out: list[Decision] = []
    chosen = {d.tool_call_id: d for d in given}
    for call_id, p in pending.items():
        d = chosen.get(call_id)
        if now >= p.expires_at(ttl):
            out.append(Decision(call_id, DecisionKind.EXPIRE))
        elif d is None:
            out.append(Decision(call_id, DecisionKind.UNANSWERED))
        else:
            out.append(Decision(call_id, d.kind, d.arguments, owner))
    return out


def check_edited_arguments(arguments: str, field: str) -> str:
    """EDIT's arguments: a JSON object (as compact text)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        raise InvalidArgument(field, "must be a JSON object") from None
    if not isinstance(value, dict):
        raise InvalidArgument(field, "must be a JSON object")
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def decision_to_pb(d: Decision) -> approval_pb2.ToolDecision:
    return approval_pb2.ToolDecision(
        tool_call_id=d.tool_call_id,
        kind=KIND_TO_PB[d.kind],
        arguments=d.arguments,
        decided_by=d.decided_by,
    )


def decision_from_pb(pb: approval_pb2.ToolDecision, field: str) -> Decision:
    kind = KIND_FROM_PB.get(pb.kind)
    if kind is None:
        raise InvalidArgument(f"{field}.kind", "must be approve, edit, deny, expire or unanswered")
    if not pb.tool_call_id:
        raise InvalidArgument(f"{field}.tool_call_id", "is required")
    arguments = ""
    if kind is DecisionKind.EDIT:
        arguments = check_edited_arguments(pb.arguments, f"{field}.arguments")
    return Decision(pb.tool_call_id, kind, arguments, pb.decided_by)


def approval_record(d: Decision, tool_name: str, arguments_sha256: str) -> dict[str, str]:
    """What the result message of decided calls keeps for the audit, one per call, under
    metadata `approvals`: the decision, who made it, a digest of the arguments that ran
    (never the arguments)."""
    return {
        "toolCallId": d.tool_call_id,
        "toolName": tool_name,
        "decision": d.kind.value,
        "decidedBy": d.decided_by,
        "argumentsSha256": arguments_sha256,
    }
