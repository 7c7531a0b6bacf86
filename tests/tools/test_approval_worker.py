"""Approval in the worker: a call of a tool that requires approval is stored waiting and
ends the step; the thread's next step runs it (as made, or edited) or refuses it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from services.executor.agents.base import StepRequest
from services.executor.agents.worker import WorkerAgent
from services.executor.events import StepItem, StepResult, ToolCallResult
from services.executor.tools import ToolContext, ToolRegistry
from shared.approvals import Decision, DecisionKind
from shared.domain import ExecutorKind
from shared.errors import InvalidArgument
from shared.messages import Msg, ToolCallState, ToolResultBlock, ToolResultState, user
from shared.profiles import ExecutionProfile, ToolPolicy, parse_profile
from shared.tools import arguments_digest
from tests.executor.models import TurnsModel, call, text


class Transfer:
    name = "bank.transfer"
    description = "Moves money."
    parameters: Mapping[str, Any] = {"type": "object", "properties": {"amount": {"type": "number"}}}

    def __init__(self, requires_approval: bool = True) -> None:
        self.requires_approval = requires_approval
        self.calls: list[tuple[Mapping[str, Any], str]] = []

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        self.calls.append((arguments, context.owner))
        return f"moved {arguments.get('amount')}"


def profile(*approval: str) -> ExecutionProfile:
    return ExecutionProfile(
        name="bank",
        enable_router=False,
        executor=ExecutorKind.WORKER,
        tool_policy=ToolPolicy(allowlist=("bank.*",), requires_approval=approval),
    )


def step(
    p: ExecutionProfile, context: tuple[Msg, ...] = (), decisions: tuple[Decision, ...] = ()
) -> StepRequest:
    return StepRequest(
        run_id="run-1",
        thread_id="thread-1",
        owner="alice",
        executor=ExecutorKind.WORKER,
        profile=p,
        context=context,
        input=user("go"),
        tools=("bank.*",),
        client_tools=(),
        time_zone="UTC",
        reply_message_id="reply-1",
        decisions=decisions,
    )


async def run(agent: WorkerAgent, request: StepRequest) -> list[StepItem]:
    return [i async for i in agent.run(request)]


def results(items: list[StepItem]) -> list[ToolResultBlock]:
    return [
        b for i in items if isinstance(i, Msg) for b in i.content if isinstance(b, ToolResultBlock)
    ]


async def asked(tool: Transfer, p: ExecutionProfile) -> tuple[list[StepItem], Msg]:
    model = TurnsModel([call("c1", "bank.transfer", '{"amount": 5}'), text("done")])
    items = await run(
        WorkerAgent(model, ToolRegistry([tool]), max_tool_rounds=3, tool_timeout_seconds=5), step(p)
    )
    [stored] = [i for i in items if isinstance(i, Msg) and i.tool_calls]
    return items, stored


async def test_a_call_needing_approval_is_stored_waiting_and_ends_the_step_unrun() -> None:
    tool = Transfer()
    items, stored = await asked(tool, profile())
    assert tool.calls == []
    assert stored.tool_calls[0].state is ToolCallState.ASKING
    assert results(items) == []
    result = items[-1]
    assert isinstance(result, StepResult) and result.finished_reason == "tool_calls"
    [pending] = result.approvals
    assert (pending.tool_call_id, pending.tool_name, pending.arguments) == (
        "c1",
        "bank.transfer",
        '{"amount": 5}',
    )


async def test_the_profile_can_require_approval_of_a_tool_its_source_does_not_mark() -> None:
    tool = Transfer(requires_approval=False)
    items, _ = await asked(tool, profile("bank.*"))
    assert tool.calls == [] and isinstance(items[-1], StepResult) and items[-1].approvals


async def decided(kind: DecisionKind, arguments: str = "") -> tuple[Transfer, list[StepItem]]:
    tool = Transfer()
    _, stored = await asked(tool, profile())
    agent = WorkerAgent(
        TurnsModel([text("ok")]), ToolRegistry([tool]), max_tool_rounds=3, tool_timeout_seconds=5
    )
    decision = Decision("c1", kind, arguments, "alice")
    items = await run(agent, step(profile(), (stored,), (decision,)))
    return tool, items


async def test_an_approved_call_runs_as_made_and_the_decision_is_kept() -> None:
    tool, items = await decided(DecisionKind.APPROVE)
    assert tool.calls == [({"amount": 5}, "alice")]
    [result] = results(items)
    assert result.state is ToolResultState.SUCCESS and result.output == "moved 5"
    assert any(isinstance(i, ToolCallResult) and i.tool_call_id == "c1" for i in items)
    [message] = [i for i in items if isinstance(i, Msg) and i.tool_results]
    assert message.metadata["approvals"] == [
        {
            "toolCallId": "c1",
            "toolName": "bank.transfer",
            "decision": "approve",
            "decidedBy": "alice",
            "argumentsSha256": arguments_digest('{"amount": 5}'),
        }
    ]


async def test_an_edited_call_runs_with_the_edited_arguments() -> None:
    tool, items = await decided(DecisionKind.EDIT, '{"amount":1}')
    assert tool.calls == [({"amount": 1}, "alice")]
    assert [r.output for r in results(items)] == ["moved 1"]


async def test_denied_expired_and_unanswered_calls_never_run() -> None:
    for kind in (DecisionKind.DENY, DecisionKind.EXPIRE, DecisionKind.UNANSWERED):
        tool, items = await decided(kind)
        assert tool.calls == []
        [result] = results(items)
        assert result.state is ToolResultState.DENIED and "not executed" in str(result.output)


async def test_an_approval_is_checked_against_the_policy_again() -> None:
    tool = Transfer()
    _, stored = await asked(tool, profile())
    narrowed = profile().model_copy(update={"tool_policy": ToolPolicy(allowlist=("bank.balance",))})
    agent = WorkerAgent(
        TurnsModel([text("ok")]), ToolRegistry([tool]), max_tool_rounds=3, tool_timeout_seconds=5
    )
    items = await run(
        agent, step(narrowed, (stored,), (Decision("c1", DecisionKind.APPROVE, "", "alice"),))
    )
    assert tool.calls == []
    [result] = results(items)
    assert result.state is ToolResultState.DENIED


def test_the_memory_agent_has_no_tool_that_needs_approval() -> None:
    registry = ToolRegistry([Transfer()])
    assert registry.names() == ["bank.transfer"]
    assert registry.without_approval().names() == []


def test_a_memory_profile_cannot_require_approval() -> None:
    data = {
        "name": "m",
        "enable_router": False,
        "executor": "memory",
        "tool_policy": {"allowlist": ["memory_write"], "requires_approval": ["memory_write"]},
    }
    with pytest.raises(InvalidArgument, match=r"^p\.tool_policy\.requires_approval: "):
        parse_profile(data, field="p")
