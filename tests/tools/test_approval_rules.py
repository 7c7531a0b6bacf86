"""The approval rules (shared.approvals) and the interrupt's AG-UI shape."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from ag_ui._generated.models import Event
from agentmesh.type.v1 import approval_pb2, run_event_pb2
from pydantic import TypeAdapter

from services.gateway import sse
from shared.approvals import Decision, DecisionKind, Pending, check, pending_approvals, settle
from shared.errors import InvalidArgument
from shared.messages import ToolCallBlock, ToolCallState, ToolResultBlock, assistant

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TTL = timedelta(minutes=10)


def waiting(*ids: str) -> dict[str, Pending]:
    return {i: Pending(i, "bank.transfer", "{}", T0) for i in ids}


def test_only_asking_calls_without_a_result_are_waiting() -> None:
    asking = ToolCallBlock("a", "bank.transfer", '{"x":1}', ToolCallState.ASKING)
    answered = ToolCallBlock("b", "bank.transfer", "{}", ToolCallState.ASKING)
    finished = ToolCallBlock("c", "bank.transfer", "{}", ToolCallState.FINISHED)
    messages = [
        assistant([asking, answered, finished], created_at=T0),
        assistant([ToolResultBlock("b", "bank.transfer", "ok")]),
    ]
    assert pending_approvals(messages) == {"a": Pending("a", "bank.transfer", '{"x":1}', T0)}


@pytest.mark.parametrize(
    ("given", "now", "problem"),
    [
        ([Decision("zz", DecisionKind.APPROVE)], T0, "no approval"),
        ([Decision("a", DecisionKind.APPROVE), Decision("a", DecisionKind.DENY)], T0, "twice"),
        ([Decision("a", DecisionKind.APPROVE)], T0 + TTL, "expired"),
    ],
)
def test_a_bad_decision_is_refused_naming_its_entry(
    given: list[Decision], now: datetime, problem: str
) -> None:
    with pytest.raises(InvalidArgument, match=problem) as err:
        check(given, waiting("a"), now=now, ttl=TTL)
    assert err.value.message.startswith(f"resume[{len(given) - 1}].interruptId: ")


def test_settle_answers_every_waiting_approval_and_stamps_who_decided() -> None:
    given = [Decision("a", DecisionKind.EDIT, '{"x":2}', "mallory")]
    out = settle(given, waiting("a", "b"), now=T0, ttl=TTL, owner="alice")
    assert out == [
        Decision("a", DecisionKind.EDIT, '{"x":2}', "alice"),
        Decision("b", DecisionKind.UNANSWERED),
    ]
    assert settle(given, waiting("a"), now=T0 + TTL, ttl=TTL, owner="alice") == [
        Decision("a", DecisionKind.EXPIRE)
    ]


def test_the_approval_interrupt_is_a_valid_ag_ui_interrupt() -> None:
    request = approval_pb2.ApprovalRequest(
        tool_call_id="c1", tool_name="bank.transfer", arguments='{"x":1}'
    )
    request.expire_time.FromDatetime(T0)
    finished = run_event_pb2.RunFinished(
        outcome=run_event_pb2.RUN_OUTCOME_INTERRUPT, approvals=[request]
    )
    out = sse.to_agui(
        run_event_pb2.RunEvent(sequence=1, thread_id="t", run_id="r", run_finished=finished)
    )
    assert out is not None
    TypeAdapter(Event).validate_python(out)
    [interrupt] = out["outcome"]["interrupts"]
    assert interrupt["id"] == interrupt["toolCallId"] == "c1"
    assert (
        interrupt["reason"] == "tool_approval" and interrupt["expiresAt"] == "2026-01-01T00:00:00Z"
    )
    assert interrupt["metadata"] == {"toolName": "bank.transfer", "arguments": '{"x":1}'}
