"""Threads, history, runs and audit through the gateway (history peer double)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from agentmesh.history.v1 import history_service_pb2
from agentmesh.type.v1 import content_pb2, message_pb2

from shared.settings import Settings
from tests.gateway.conftest import Peers, bearer
from tests.gateway.peers import text_message

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
U, A = message_pb2.ROLE_USER, message_pb2.ROLE_ASSISTANT


@pytest.fixture(scope="module")
def seeded(peers: Peers) -> Peers:
    h = peers.history
    h.seed(
        "hana",
        "th-1",
        [
            text_message("m1", "th-1", U, "I love green tea"),
            text_message("m2", "th-1", A, "Noted!", seconds=1_700_000_001),
            text_message("m3", "th-1", U, "hidden input", mask=0),
        ],
    )
    h.seed("hana", "th-2", [])
    h.seed("omar", "th-secret", [text_message("o1", "th-secret", U, "mine")])
    run = history_service_pb2.Run(
        id="run-h",
        thread_id="th-1",
        state=history_service_pb2.RUN_STATE_SUCCEEDED,
        origin=message_pb2.RUNTIME_MODE_CHAT,
    )
    run.profile.name = "chat_default"
    run.profile.enable_router = True
    run.profile.executor = 1
    run.create_time.FromSeconds(1_700_000_000)
    h.runs[("hana", "run-h")] = run
    rolled = history_service_pb2.Run(
        id="run-rolled",
        thread_id="th-1",
        state=history_service_pb2.RUN_STATE_CANCELLED,
        origin=message_pb2.RUNTIME_MODE_CHAT,
        cancel_requested=True,
        rolled_back=True,
    )
    h.runs[("hana", "run-rolled")] = rolled
    return peers


async def test_threads_lists_only_the_callers_threads(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    resp = await http.get("/api/v1/agent/threads", headers=bearer(gw_settings, "hana"))
    assert resp.status_code == 200
    body = resp.json()
    assert [t["id"] for t in body["threads"]] == ["th-1", "th-2"]
    assert body["threads"][0]["runtimeMode"] == "chat"
    assert RFC3339.match(body["threads"][0]["createTime"])
    assert "nextPageToken" not in body


async def test_history_returns_messages_in_the_documented_shape(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    resp = await http.get("/api/v1/agent/threads/th-1/history", headers=bearer(gw_settings, "hana"))
    assert resp.status_code == 200
    messages = resp.json()["messages"]
    assert [m["id"] for m in messages] == ["m1", "m2"]
    first = messages[0]
    assert first["role"] == "user" and first["content"] == "I love green tea"
    assert first["threadId"] == "th-1" and first["runId"] == "run-1"
    assert first["kind"] == "user_message"
    assert RFC3339.match(first["createdAt"])
    assert first["metadata"] == {
        "hiddenFromUser": False,
        "origin": "chat",
        "executor": "worker",
        "executionProfileName": "chat_default",
    }
    assert "visibilityMask" not in first


async def test_history_of_another_owners_thread_is_404_like_a_missing_one(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    other = await http.get(
        "/api/v1/agent/threads/th-secret/history", headers=bearer(gw_settings, "hana")
    )
    missing = await http.get(
        "/api/v1/agent/threads/th-none/history", headers=bearer(gw_settings, "hana")
    )
    assert other.status_code == missing.status_code == 404

    def strip(r: httpx.Response) -> dict[str, Any]:
        return {k: v for k, v in r.json()["error"].items() if k not in ("requestId", "message")}

    assert strip(other) == strip(missing) == {"code": "NOT_FOUND"}
    assert "omar" not in other.text


async def test_history_passes_paging_and_direction(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    resp = await http.get(
        "/api/v1/agent/threads/th-1/history?page_size=1&direction=backward",
        headers=bearer(gw_settings, "hana"),
    )
    body = resp.json()
    assert [m["id"] for m in body["messages"]] == ["m2"]
    assert body["nextPageToken"] == "p2"
    req = seeded.history.calls[-1].request
    assert (req.page_size, req.direction) == (1, history_service_pb2.DIRECTION_BACKWARD)
    nxt = await http.get(
        "/api/v1/agent/threads/th-1/history?page_size=1&direction=backward&page_token=p2",
        headers=bearer(gw_settings, "hana"),
    )
    assert [m["id"] for m in nxt.json()["messages"]] == ["m1"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("page_size=-1", "page_size"),
        ("page_size=1001", "page_size"),
        ("page_size=abc", "page_size"),
        ("direction=sideways", "direction"),
        ("pagesize=5", "pagesize"),
        ("page_token=forged", "page_token"),
    ],
)
async def test_bad_history_parameters_are_400_naming_the_parameter(
    query: str,
    field: str,
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    resp = await http.get(
        f"/api/v1/agent/threads/th-1/history?{query}", headers=bearer(gw_settings, "hana")
    )
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["details"][0]["field"] == field


async def test_get_run_returns_the_run_record(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    resp = await http.get("/api/v1/agent/runs/run-h", headers=bearer(gw_settings, "hana"))
    assert resp.status_code == 200
    body = resp.json()
    assert body["state"] == "succeeded" and body["origin"] == "chat"
    assert body["profile"] == {"name": "chat_default", "enableRouter": True, "executor": "worker"}


async def test_get_run_shows_a_requested_cancel_and_a_rollback(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    rolled = await http.get("/api/v1/agent/runs/run-rolled", headers=bearer(gw_settings, "hana"))
    plain = await http.get("/api/v1/agent/runs/run-h", headers=bearer(gw_settings, "hana"))
    assert rolled.status_code == 200, rolled.text
    assert rolled.json()["cancelRequested"] is True and rolled.json()["rolledBack"] is True
    # Absent, never null or false, on a run that was neither (no JSON null in optional fields).
    assert "cancelRequested" not in plain.json() and "rolledBack" not in plain.json()


async def test_get_run_of_another_owner_is_404(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    resp = await http.get("/api/v1/agent/runs/run-h", headers=bearer(gw_settings, "omar"))
    assert resp.status_code == 404


async def test_audit_lists_hidden_messages_with_admin_scope_and_filters(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    resp = await http.get(
        "/api/v1/admin/audit?owner_id=hana&origin=automation&executor=memory"
        "&execution_profile_name=automation_memory_default&thread_id=th-1"
        "&start_time=2024-01-01T00:00:00Z&end_time=2024-01-02T00:00:00%2B08:00&page_size=10",
        headers=bearer(gw_settings, "root", admin=True),
    )
    assert resp.status_code == 200, resp.text
    messages = resp.json()["messages"]
    assert {m["id"] for m in messages} == {"m1", "m2", "m3"}
    hidden = next(m for m in messages if m["id"] == "m3")
    assert hidden["visibilityMask"] == 0 and hidden["metadata"]["hiddenFromUser"] is True
    call = seeded.history.calls[-1]
    assert call.metadata["x-agentmesh-scope"] == "admin"
    f = call.request.filter
    assert (call.request.owner_id, f.origin, f.executor) == (
        "hana",
        message_pb2.RUNTIME_MODE_AUTOMATION,
        2,
    )
    assert (f.execution_profile_name, f.thread_id) == ("automation_memory_default", "th-1")
    assert f.start_time.ToJsonString() == "2024-01-01T00:00:00Z"
    assert f.end_time.ToJsonString() == "2024-01-01T16:00:00Z"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("", "owner_id"),
        ("owner_id=a%20b", "owner_id"),
        ("owner_id=hana%0A", "owner_id"),
        ("owner_id=hana&origin=email", "origin"),
        ("owner_id=hana&executor=planner", "executor"),
        ("owner_id=hana&start_time=yesterday", "start_time"),
        ("owner_id=hana&start_time=2024-01-02T00:00:00Z&end_time=2024-01-01T00:00:00Z", "end_time"),
        ("owner_id=hana&hidden=true", "hidden"),
    ],
)
async def test_bad_audit_filters_are_400(
    query: str,
    field: str,
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    resp = await http.get(
        f"/api/v1/admin/audit?{query}", headers=bearer(gw_settings, "root", admin=True)
    )
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["details"][0]["field"] == field


def test_tool_messages_take_the_agui_shape() -> None:
    from services.gateway.convert import message_json

    call = message_pb2.Message(
        id="a1",
        role=A,
        kind=message_pb2.MESSAGE_KIND_TOOL_CALL,
        content=[
            content_pb2.ContentBlock(
                tool_call=content_pb2.ToolCallBlock(id="tc", name="memory_write", input='{"x":1}')
            )
        ],
    )
    result = message_pb2.Message(
        id="t1",
        role=A,
        kind=message_pb2.MESSAGE_KIND_TOOL_RESULT,
        content=[
            content_pb2.ContentBlock(
                tool_result=content_pb2.ToolResultBlock(id="tc", name="memory_write", text="done")
            )
        ],
    )
    [c] = message_json(call)
    [r] = message_json(result)
    assert c["toolCalls"] == [
        {
            "id": "tc",
            "type": "function",
            "function": {"name": "memory_write", "arguments": '{"x":1}'},
        }
    ]
    assert "content" not in c and c["kind"] == "tool_call"
    assert (r["role"], r["toolCallId"], r["content"]) == ("tool", "tc", "done")


async def test_audit_lists_refused_tool_calls_with_a_digest_only(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    denial = history_service_pb2.ToolDenial(
        owner_id="hana",
        run_id="run-h",
        thread_id="th-1",
        tool_call_id="c1",
        tool_name="memory_write",
        arguments_sha256="ab" * 32,
        reason=history_service_pb2.TOOL_DENIAL_REASON_NOT_IN_PROFILE,
        origin=message_pb2.RUNTIME_MODE_CHAT,
        executor=1,
        execution_profile_name="chat_default",
    )
    denial.create_time.FromSeconds(1_700_000_000)
    seeded.history.denials.append(denial)
    resp = await http.get(
        "/api/v1/admin/audit?owner_id=hana", headers=bearer(gw_settings, "root", admin=True)
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["toolDenials"] == [
        {
            "ownerId": "hana",
            "runId": "run-h",
            "threadId": "th-1",
            "toolCallId": "c1",
            "toolName": "memory_write",
            "argumentsSha256": "ab" * 32,
            "reason": "not_in_profile",
            "origin": "chat",
            "executor": "worker",
            "executionProfileName": "chat_default",
            "createTime": "2023-11-14T22:13:20.000000Z",
        }
    ]
