"""Data lifecycle through the gateway, on the real suite: deleting a thread, deleting an owner
in every service (a job that resumes after a service was down), and the owner's export."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from agentmesh.history.v1 import history_service_pb2 as history_pb
from agentmesh.history.v1 import history_service_pb2_grpc as history_grpc
from agentmesh.memory.v1 import memory_service_pb2 as memory_pb
from agentmesh.memory.v1 import memory_service_pb2_grpc as memory_grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as orchestrator_pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2_grpc as orchestrator_grpc
from agentmesh.type.v1 import message_pb2

from services.launcher import Suite
from shared.identity import call_metadata
from shared.profiles import CHAT_DEFAULT, profile_to_pb
from tests.conftest import USES_POSTGRES, drop_schemas
from tests.e2e.conftest import make_suite, parse_sse, run_body, token


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("lifecycle")
    prefix = f"e{uuid.uuid4().hex[:10]}_"
    # The gateway's resumer drives unfinished owner deletions every second. One process per
    # service: the tests stop one service (memory, history, the gateway) and start it again.
    s = make_suite(tmp, prefix, shape="split", AGENTMESH_LIFECYCLE_SWEEP_SECONDS="1")
    try:
        s.start(timeout=90)
        yield s
    finally:
        s.stop()
        if USES_POSTGRES:
            asyncio.run(drop_schemas(prefix))


def _owner(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _auth(owner: str, *, admin: bool = False) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(owner, admin=admin)}"}


def _call(suite: Suite, method: str, path: str, owner: str, **kw: Any) -> httpx.Response:
    admin = kw.pop("admin", False)
    return httpx.request(
        method, f"{suite.gateway_url}{path}", headers=_auth(owner, admin=admin), timeout=30, **kw
    )


def _chat(suite: Suite, owner: str, thread_id: str, text: str) -> str:
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    resp = _call(suite, "POST", "/api/v1/agent/runs", owner, json=run_body(thread_id, run_id, text))
    assert resp.status_code == 200, resp.text
    assert parse_sse(resp.content)[-1]["type"] == "RUN_FINISHED"
    return run_id


def _remember(suite: Suite, owner: str, content: str) -> None:
    with grpc.insecure_channel(suite.address("memory")) as ch:
        memory_grpc.MemoryServiceStub(ch).WriteMemory(
            memory_pb.WriteMemoryRequest(content=content, kind="preference"),
            metadata=call_metadata(owner),
            timeout=10,
        )


def _seed(suite: Suite, owner: str) -> str:
    """A thread with a chat, a memory and the default memory job with one triggered run;
    the chat's run id."""
    run_id = _chat(suite, owner, "t-one", "hello there")
    _remember(suite, owner, "User likes green tea")
    registered = _call(suite, "POST", "/api/v1/users", owner)
    assert registered.status_code == 200, registered.text
    [job] = registered.json()["jobs"]
    triggered = _call(suite, "POST", f"/api/v1/automation/jobs/{job['id']}:trigger", owner)
    assert triggered.status_code == 202, triggered.text
    return run_id


def _export(suite: Suite, owner: str) -> dict[str, Any]:
    resp = _call(suite, "GET", "/api/v1/users/me/export", owner)
    assert resp.status_code == 200, resp.text
    data: dict[str, Any] = resp.json()
    return data


def _wait_deletion(
    suite: Suite, owner: str, deletion_id: str, within: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        resp = _call(suite, "GET", f"/api/v1/users/me/deletions/{deletion_id}", owner)
        assert resp.status_code == 200, resp.text
        body: dict[str, Any] = resp.json()
        if body["state"] == "succeeded" or time.monotonic() > deadline:
            return body
        time.sleep(0.3)


def _stream(suite: Suite, owner: str, run_id: str) -> list[Any]:
    with grpc.insecure_channel(suite.address("orchestrator")) as ch:
        call = orchestrator_grpc.OrchestratorServiceStub(ch).StreamRun(
            orchestrator_pb.StreamRunRequest(run_id=run_id),
            metadata=call_metadata(owner),
            timeout=10,
        )
        return list(call)


def test_deleting_a_thread_removes_it_and_answers_its_record(suite: Suite) -> None:
    owner, other = _owner("dora"), _owner("eve")
    run_id = _chat(suite, owner, "t-del", "first")
    assert _stream(suite, owner, run_id), "the finished run's events are kept before"
    _chat(suite, owner, "t-del", "second")
    _chat(suite, owner, "t-keep", "keep me")

    # Another owner cannot delete it (the thread does not exist for them).
    assert _call(suite, "DELETE", "/api/v1/agent/threads/t-del", other).status_code == 404
    resp = _call(suite, "DELETE", "/api/v1/agent/threads/t-del", owner)
    assert resp.status_code == 200, resp.text
    record = resp.json()
    assert record["kind"] == "thread" and record["state"] == "succeeded"
    assert record["threadId"] == "t-del" and record["requestedBy"] == owner
    assert record["steps"][0]["deletedCounts"] == {
        "messages": 4,
        "runs": 2,
        "threads": 1,
        "tool_denials": 0,
    }
    assert "first" not in resp.text

    history = _call(suite, "GET", "/api/v1/agent/threads/t-del/history", owner)
    assert history.status_code == 404
    assert _call(suite, "GET", f"/api/v1/agent/runs/{run_id}", owner).status_code == 404
    # Its event log went too: the orchestrator has no stream to replay.
    with pytest.raises(grpc.RpcError) as err:
        _stream(suite, owner, run_id)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    threads = _call(suite, "GET", "/api/v1/agent/threads", owner).json()["threads"]
    assert [t["id"] for t in threads] == ["t-keep"]
    again = _call(suite, "DELETE", "/api/v1/agent/threads/t-del", owner)
    assert again.status_code == 404

    got = _call(suite, "GET", f"/api/v1/users/me/deletions/{record['id']}", owner)
    assert got.status_code == 200 and got.json() == record
    theirs = _call(suite, "GET", f"/api/v1/users/me/deletions/{record['id']}", other)
    assert theirs.status_code == 404
    listed = _call(suite, "GET", "/api/v1/users/me/deletions", owner).json()["deletions"]
    assert listed == [record]
    assert _call(suite, "GET", "/api/v1/users/me/deletions", other).json()["deletions"] == []


def test_a_thread_with_a_run_in_flight_is_a_409_naming_the_run(suite: Suite) -> None:
    owner = _owner("ned")
    _chat(suite, owner, "t-busy", "before")
    # A run begun in history and not finished: what a run in flight looks like to it.
    with grpc.insecure_channel(suite.address("history")) as ch:
        stub = history_grpc.HistoryServiceStub(ch)
        stub.BeginRun(
            history_pb.BeginRunRequest(
                thread_id="t-busy",
                runtime_mode=message_pb2.RUNTIME_MODE_CHAT,
                run_id="r-live",
                profile=profile_to_pb(CHAT_DEFAULT),
                lease_holder="test",
                lease_seconds=600,
            ),
            metadata=call_metadata(owner),
            timeout=10,
        )
        resp = _call(suite, "DELETE", "/api/v1/agent/threads/t-busy", owner)
        assert resp.status_code == 409, resp.text
        error = resp.json()["error"]
        assert (error["reason"], error["activeRunId"]) == ("THREAD_BUSY", "r-live")
        assert (
            len(
                _call(suite, "GET", "/api/v1/agent/threads/t-busy/history", owner).json()[
                    "messages"
                ]
            )
            == 2
        )
        stub.FinishRun(
            history_pb.FinishRunRequest(run_id="r-live", state=history_pb.RUN_STATE_CANCELLED),
            metadata=call_metadata(owner),
            timeout=10,
        )
    assert _call(suite, "DELETE", "/api/v1/agent/threads/t-busy", owner).status_code == 200


def test_the_export_holds_the_owners_data_and_nobody_elses(suite: Suite) -> None:
    owner, other = _owner("fay"), _owner("gil")
    run_id = _seed(suite, owner)
    _chat(suite, other, "t-other", "not yours")
    hooks = {}
    for who in (owner, other):
        made = _call(
            suite,
            "POST",
            "/api/v1/webhooks/endpoints",
            who,
            json={"url": f"https://hooks.example.com/{who}", "description": "my app"},
        )
        assert made.status_code == 201, made.text
        hooks[who] = made.json()

    data = _export(suite, owner)
    # The gateway's own data of the owner: its webhook endpoints, never their secrets.
    [endpoint] = data["webhookEndpoints"]
    assert endpoint["id"] == hooks[owner]["id"]
    assert endpoint["url"] == f"https://hooks.example.com/{owner}"
    assert "secret" not in endpoint and hooks[owner]["secret"] not in str(data)
    assert data["ownerId"] == owner
    assert {t["id"] for t in data["threads"]} >= {"t-one"}
    texts = str(data["messages"])
    assert "hello there" in texts and "not yours" not in texts
    assert run_id in [r["id"] for r in data["runs"]]
    assert [m["content"] for m in data["memories"]] == ["User likes green tea"]
    [job] = data["jobs"]
    assert job["runs"], "the triggered run is exported with its job"


def test_deleting_an_owner_empties_every_service_and_keeps_the_record(suite: Suite) -> None:
    owner, other = _owner("hal"), _owner("ivy")
    _seed(suite, owner)
    _seed(suite, other)

    resp = _call(suite, "DELETE", "/api/v1/users/me", owner)
    assert resp.status_code == 202, resp.text
    started = resp.json()
    assert started["kind"] == "owner"
    assert [s["service"] for s in started["steps"]] == [
        "scheduler",
        "memory",
        "history",
        "orchestrator",
        "gateway",
    ]
    # The triggered automation run may still be in flight: history then waits for it.
    final = _wait_deletion(suite, owner, started["id"])
    assert final["state"] == "succeeded", final
    counts = {s["service"]: s["deletedCounts"] for s in final["steps"]}
    assert counts["scheduler"]["jobs"] == 1
    assert counts["memory"]["memories"] == 1
    assert counts["history"]["threads"] >= 1
    assert counts["orchestrator"]["event_logs"] >= 1  # the chat run's stream
    # Usage is history's run records now: the gateway holds no usage rows of its own.
    assert counts["gateway"] == {
        "webhookEndpoints": 0,
        "webhookDeliveries": 0,
        "webhook_endpoint_health": 0,
        "apiKeys": 0,
        "quotaOverrides": 0,
        "usage_days": 0,
    }

    emptied = _export(suite, owner)
    assert [emptied[k] for k in ("threads", "runs", "messages", "memories", "jobs")] == [[]] * 5
    kept = _export(suite, other)
    assert kept["threads"] and kept["memories"] and kept["jobs"]
    # The usage ledger keeps the deleted owner's sums per day (for billing and the quota):
    # their runs stay counted, with no content (api-endpoints.md, owner deletion).
    assert _call(suite, "GET", "/api/v1/usage", owner).json()["total"]["runs"] >= 1
    assert _call(suite, "GET", "/api/v1/usage", other).json()["total"]["runs"] >= 1
    # The record stays readable after the data is gone, and shows no content.
    record = _call(suite, "GET", f"/api/v1/users/me/deletions/{started['id']}", owner)
    assert record.status_code == 200 and "green tea" not in record.text


def test_an_owner_deletion_resumes_after_a_service_was_down(suite: Suite) -> None:
    owner = _owner("jon")
    _chat(suite, owner, "t-one", "hello")
    _remember(suite, owner, "User likes oolong")
    suite.stop_service("memory", grace=10)
    try:
        resp = _call(suite, "DELETE", "/api/v1/users/me", owner)
        assert resp.status_code == 202, resp.text
        body = resp.json()
        assert body["state"] == "running"
        scheduler, memory, history, _events, _gateway = body["steps"]
        assert scheduler["done"] and not memory["done"] and not history["done"]
        assert memory["lastError"].startswith("UNAVAILABLE")
        assert history["attempts"] == 0  # later steps wait for the failed one
    finally:
        suite.start_service("memory")
        suite.wait_ready("memory", time.monotonic() + 60)
    # No new request: the gateway's resumer finishes it.
    final = _wait_deletion(suite, owner, body["id"])
    assert final["state"] == "succeeded", final
    assert {s["service"]: s["deletedCounts"] for s in final["steps"]}["memory"]["memories"] == 1
    assert _export(suite, owner)["memories"] == []


def test_an_owner_deletion_survives_a_gateway_restart(suite: Suite) -> None:
    owner = _owner("kat")
    _remember(suite, owner, "User likes matcha")
    suite.stop_service("memory", grace=10)
    try:
        resp = _call(suite, "DELETE", "/api/v1/users/me", owner)
        assert resp.status_code == 202 and resp.json()["state"] == "running", resp.text
        deletion_id = resp.json()["id"]
        suite.stop_service("gateway", grace=10)
    finally:
        suite.start_service("memory")
        suite.wait_ready("memory", time.monotonic() + 60)
    suite.start_service("gateway")
    suite.wait_ready("gateway", time.monotonic() + 60)
    # The progress is history's: the new gateway process's resumer finishes the job.
    final = _wait_deletion(suite, owner, deletion_id)
    assert final["state"] == "succeeded", final
    assert _export(suite, owner)["memories"] == []


def test_an_owner_deletion_is_a_503_and_starts_nothing_while_history_is_down(
    suite: Suite,
) -> None:
    owner = _owner("lou")
    _remember(suite, owner, "User likes sencha")
    suite.stop_service("history", grace=10)
    try:
        resp = _call(suite, "DELETE", "/api/v1/users/me", owner)
        assert resp.status_code == 503, resp.text
        assert resp.json()["error"]["code"] == "UNAVAILABLE"
    finally:
        suite.start_service("history")
        suite.wait_ready("history", time.monotonic() + 60)
    # Nothing was deleted and no deletion was recorded. (The gateway's channel to history
    # may still be in its reconnect backoff for a moment.)
    deadline = time.monotonic() + 30
    while (listed := _call(suite, "GET", "/api/v1/users/me/deletions", owner)).status_code == 503:
        assert time.monotonic() < deadline, listed.text
        time.sleep(0.2)
    assert listed.json()["deletions"] == []
    assert [m["content"] for m in _export(suite, owner)["memories"]] == ["User likes sencha"]


def test_admins_delete_an_owner_by_id_and_others_may_not(suite: Suite) -> None:
    owner, admin = _owner("kim"), _owner("ops")
    _remember(suite, owner, "User likes jasmine")
    path = f"/api/v1/admin/users/{owner}"
    assert _call(suite, "DELETE", path, owner).status_code == 403
    resp = _call(suite, "DELETE", path, admin, admin=True)
    assert resp.status_code == 202, resp.text
    started = resp.json()
    assert started["requestedBy"] == f"admin:{admin}"
    deadline = time.monotonic() + 60
    while True:
        got = _call(suite, "GET", f"{path}/deletions/{started['id']}", admin, admin=True).json()
        if got["state"] == "succeeded" or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert got["state"] == "succeeded"
    assert _export(suite, owner)["memories"] == []
    listed = _call(suite, "GET", f"{path}/deletions", admin, admin=True).json()["deletions"]
    assert [d["id"] for d in listed] == [started["id"]]
    assert _call(suite, "GET", f"{path}/deletions", owner).status_code == 403


@pytest.mark.parametrize(
    ("method", "path", "admin", "field"),
    [
        ("DELETE", "/api/v1/agent/threads/bad%20id", False, "thread_id"),
        ("GET", "/api/v1/users/me/deletions/%00", False, "deletion_id"),
        ("DELETE", "/api/v1/admin/users/has%20space", True, "owner_id"),
        ("GET", "/api/v1/admin/users/%C3%A9%C3%A9/deletions/del_1", True, "owner_id"),
        ("DELETE", "/api/v1/users/me?force=1", False, "force"),
        ("GET", "/api/v1/users/me/export?all=1", False, "all"),
    ],
)
def test_bad_lifecycle_input_is_a_400_naming_it(
    suite: Suite, method: str, path: str, admin: bool, field: str
) -> None:
    resp = _call(suite, method, path, _owner("lee"), admin=admin)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == "INVALID_ARGUMENT"
    assert field.split("_")[0] in resp.text.lower()


def test_lifecycle_routes_need_a_token(suite: Suite) -> None:
    for method, path in (
        ("DELETE", "/api/v1/agent/threads/t1"),
        ("DELETE", "/api/v1/users/me"),
        ("GET", "/api/v1/users/me/export"),
    ):
        assert httpx.request(method, f"{suite.gateway_url}{path}", timeout=10).status_code == 401
