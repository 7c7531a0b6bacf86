"""The memory agent moves the watermark only past messages it really processed: output it
cannot use (prose from a small model, calls none of which ran) fails the step and says so."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from services.executor.agents.base import StepRequest
from services.executor.agents.memory import MemoryAgent
from services.executor.events import StepResult, ToolCallResult, ToolCallStart
from services.executor.memory_tools import Watermark
from services.executor.tools import ToolContext, ToolRegistry
from shared.domain import ExecutorKind
from shared.errors import FailedPrecondition
from shared.messages import user
from shared.profiles import AUTOMATION_MEMORY_DEFAULT
from tests.executor.models import TurnsModel, call, text


class Marks:
    def __init__(self) -> None:
        self.position = ""
        self.advanced = 0

    async def watermark(self, owner: str, name: str) -> Watermark:
        return Watermark(self.position)

    async def advance(
        self, owner: str, name: str, expected: str, position: str, time: object
    ) -> bool:
        self.position, self.advanced = position, self.advanced + 1
        return True


class WriteTool:
    name = "memory_write"
    description = "Save a memory."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"content": {"type": "string"}},
    }

    def __init__(self) -> None:
        self.saved: list[str] = []

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        self.saved.append(str(arguments["content"]))
        return "saved"


def memory_step() -> StepRequest:
    told = user("I love green tea", id="m1", thread_id="chat-1", position=1)
    return StepRequest(
        run_id="job-1",
        thread_id="job-thread",
        owner="alice",
        executor=ExecutorKind.MEMORY,
        profile=AUTOMATION_MEMORY_DEFAULT,
        context=(told,),
        input=user("extract"),
        tools=("memory_write",),
        client_tools=(),
        time_zone="Asia/Shanghai",
        reply_message_id="reply-1",
    )


async def run(model: TurnsModel) -> tuple[Marks, WriteTool, list[Any]]:
    marks, tool = Marks(), WriteTool()
    agent = MemoryAgent(
        model, ToolRegistry((tool,)), marks, max_tool_rounds=2, tool_timeout_seconds=5
    )
    items = [item async for item in agent.run(memory_step())]
    return marks, tool, items


async def test_prose_instead_of_tool_calls_fails_and_leaves_the_watermark() -> None:
    marks, tool = Marks(), WriteTool()
    agent = MemoryAgent(
        TurnsModel([text("Sure! Green tea is a lovely drink.")]),
        ToolRegistry((tool,)),
        marks,
        max_tool_rounds=2,
        tool_timeout_seconds=5,
    )
    with pytest.raises(FailedPrecondition) as err:
        [item async for item in agent.run(memory_step())]
    assert (
        err.value.reason == "MEMORY_OUTPUT_UNUSABLE"
        and "watermark did not move" in err.value.message
    )
    assert marks.advanced == 0 and tool.saved == []


async def test_calls_none_of_which_ran_fail_and_leave_the_watermark() -> None:
    marks, tool = Marks(), WriteTool()
    agent = MemoryAgent(
        TurnsModel([call("c1", "memory_write", '{"content": "tea'), text("done")]),
        ToolRegistry((tool,)),
        marks,
        max_tool_rounds=2,
        tool_timeout_seconds=5,
    )
    with pytest.raises(FailedPrecondition, match="none of its tool calls could be run"):
        [item async for item in agent.run(memory_step())]
    assert marks.advanced == 0


async def test_saying_there_is_nothing_to_save_moves_the_watermark() -> None:
    marks, tool, items = await run(TurnsModel([text("NO_MEMORIES")]))
    assert marks.advanced == 1 and tool.saved == [] and isinstance(items[-1], StepResult)


async def test_a_fact_saved_moves_the_watermark() -> None:
    marks, tool, items = await run(
        TurnsModel(
            [call("c1", "memory_write", '{"content": "User likes green tea"}'), text("Saved.")]
        )
    )
    assert marks.advanced == 1 and tool.saved == ["User likes green tea"]
    assert isinstance(items[-1], StepResult)


async def test_a_provider_that_numbers_each_turn_s_calls_from_call_0_runs_every_turn() -> None:
    """A provider without call ids names every turn's first call call_0: each turn's call is
    its own, streamed, run and answered."""
    marks, tool, items = await run(
        TurnsModel(
            [
                call("call_0", "memory_write", '{"content": "User likes green tea"}'),
                call("call_0", "memory_write", '{"content": "User drinks it daily"}'),
                text("Saved."),
            ]
        )
    )
    assert tool.saved == ["User likes green tea", "User drinks it daily"]
    assert [e.tool_call_id for e in items if isinstance(e, ToolCallStart)] == ["call_0"] * 2
    assert len([e for e in items if isinstance(e, ToolCallResult)]) == 2
    assert marks.advanced == 1 and isinstance(items[-1], StepResult)
