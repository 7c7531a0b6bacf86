"""The real local model with outside tools: a chat run on a profile allowing the notes and
time MCP servers. The model is offered their namespaced tools with their schemas; SmolLM2-135M
rarely calls a tool well (and the OpenAI adapter has no tool_choice to force one), so this
asserts shapes: the endpoint accepted the namespaced tools (no RUN_ERROR), every call it made
was answered by the MCP server or refused by the policy, and the run ended."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from services.launcher import LocalModelServer, Suite
from tests.realmodel.conftest import assert_well_formed
from tests.tools.suite import chat, outside_tools_suite

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def tools_suite(
    tmp_path_factory: pytest.TempPathFactory, model_server: LocalModelServer
) -> Iterator[Suite]:
    env = {
        **model_server.env(),
        "AGENTMESH_RPC_TIMEOUT_SECONDS": "10",
        "AGENTMESH_RUN_TIMEOUT_SECONDS": "240",
    }
    with outside_tools_suite(tmp_path_factory.mktemp("outside"), **env) as s:
        yield s


def test_the_real_model_is_offered_mcp_tools_and_every_call_it_makes_is_answered(
    tools_suite: Suite,
) -> None:
    said = "What time is it in Tokyo? Call the time.get_current_time tool with timezone Asia/Tokyo."
    events = chat(
        tools_suite, "ivy", f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}", said
    )
    assert_well_formed(events)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    starts = {e["toolCallId"]: e["toolCallName"] for e in events if e["type"] == "TOOL_CALL_START"}
    answered = {e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_RESULT"}
    assert set(starts) == answered, (starts, answered)
