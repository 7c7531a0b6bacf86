"""The whole suite with outside tools (AGENTMESH_TOOLS_FILE): a chat run on a profile that
allows `notes.*` and `time.*` calls the MCP servers the executor started, streams the call
and its result, and stores them; the scripted model asks for the tool."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest

from services.launcher import Suite
from tests.e2e.conftest import token
from tests.tools.suite import PROFILE, chat, outside_tools_suite


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    with outside_tools_suite(tmp_path_factory.mktemp("outside")) as s:
        yield s


def test_a_chat_run_calls_an_mcp_tool_of_the_deployment_and_streams_its_result(
    suite: Suite,
) -> None:
    said = 'use the time.get_current_time tool with {"timezone": "Asia/Tokyo"}'
    events = chat(suite, "alice", f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}", said)
    types = [e["type"] for e in events]
    assert types[-1] == "RUN_FINISHED", events[-1]
    [start] = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert start["toolCallName"] == "time.get_current_time"
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == start["toolCallId"]
    assert json.loads(str(result["content"]))["timezone"] == "Asia/Tokyo"


def test_each_owner_sees_only_their_own_notes_through_the_mcp_tool(suite: Suite) -> None:
    def run(owner: str, said: str) -> str:
        events = chat(suite, owner, f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}", said)
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
        [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
        return str(result["content"])

    owner = f"dave-{uuid.uuid4().hex[:6]}"
    assert run(owner, 'use the notes.add_note tool with {"text": "the red door"}').startswith(
        "saved"
    )
    assert run(owner, "use the notes.list_notes tool") == "the red door"
    assert run(f"erin-{uuid.uuid4().hex[:6]}", "use the notes.list_notes tool") == "no notes"


def tools(suite: Suite, owner: str, query: str = "") -> httpx.Response:
    return httpx.get(
        f"{suite.gateway_url}/api/v1/tools{query}",
        headers={"Authorization": f"Bearer {token(owner)}"},
        timeout=30,
    )


def test_the_tools_endpoint_lists_the_registry_with_schemas_and_a_profiles_effective_set(
    suite: Suite,
) -> None:
    resp = tools(suite, "alice", f"?profile={PROFILE}")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    by_name = {t["name"]: t for t in body["tools"]}
    assert {"memory_search", "memory_write", "notes.add_note", "time.get_current_time"} <= set(
        by_name
    )
    assert by_name["notes.add_note"]["source"] == "mcp:notes"
    # The owner argument is the executor's to fill: not in the schema offered.
    assert set(by_name["notes.add_note"]["parameters"]["properties"]) == {"text"}
    assert by_name["memory_search"]["source"] == "builtin"
    assert body["profile"] == PROFILE
    assert "time.get_current_time" in body["effective"] and "memory_search" not in body["effective"]
    assert (
        by_name["time.get_current_time"]["effective"] and not by_name["memory_write"]["effective"]
    )
    # Each configured source and where it stands, for operators.
    sources = {s["name"]: s for s in body["sources"]}
    assert list(sources) == ["mcp:notes", "mcp:time"]
    notes = sources["mcp:notes"]
    assert notes["state"] == "connected" and notes["consecutiveFailures"] == 0
    assert notes["toolCount"] == sum(t["source"] == "mcp:notes" for t in body["tools"])
    assert "lastError" not in notes and "lastSuccessTime" in notes
    # ... and the same sources on /readyz, where operators look first.
    ready = httpx.get(f"{suite.gateway_url}/readyz", timeout=30)
    assert ready.status_code == 200, ready.text
    on_readyz = ready.json()["toolSources"]
    assert on_readyz["status"] == "ready"
    assert [(s["name"], s["state"]) for s in on_readyz["sources"]] == [
        (s["name"], s["state"]) for s in body["sources"]
    ]


def test_the_tools_endpoint_defaults_to_chat_default_and_refuses_bad_profiles(suite: Suite) -> None:
    body = tools(suite, "alice").json()
    assert body["profile"] == "chat_default" and body["effective"] == ["memory_search"]
    for query in ("?profile=nope", "?profile=automation_memory_default"):
        resp = tools(suite, "alice", query)
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["details"][0]["field"] == "profile"
    resp = tools(suite, "alice", "?profil=x")
    assert resp.status_code == 400 and resp.json()["error"]["details"][0]["field"] == "profil"
    assert httpx.get(f"{suite.gateway_url}/api/v1/tools", timeout=30).status_code == 401
