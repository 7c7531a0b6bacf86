"""Webhooks on the real suite, delivered to a real local HTTP receiver that verifies every
request with the standardwebhooks library: run, job run and memory events; retries after a
500 and after the receiver was down (same webhook-id); the delivery log per owner and for
an admin; an admin's replay; a deployment endpoint; an owner's deletion."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.gateway.webhooks import new_secret
from services.launcher import Suite, free_port
from tests.conftest import USES_POSTGRES, drop_schemas
from tests.e2e.conftest import make_suite, parse_sse, run_body, token
from tests.webhook_receiver import Receiver

DEPLOYMENT_SECRET = new_secret()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver(free_port())
    r.secrets["/deployment"] = DEPLOYMENT_SECRET
    r.start()
    yield r
    r.stop()


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("webhooks")
    prefix = f"w{uuid.uuid4().hex[:10]}_"
    deployment = [
        {
            "id": "ops",
            "url": receiver.url("/deployment"),
            "secret": DEPLOYMENT_SECRET,
            "eventTypes": ["memory.changed"],
        }
    ]
    # One process per service: the last test stops one of two gateway replicas.
    s = make_suite(
        tmp,
        prefix,
        shape="split",
        AGENTMESH_WEBHOOK_POLL_SECONDS="0.2",
        AGENTMESH_WEBHOOK_LEASE_SECONDS="2",
        # The receiver is on 127.0.0.1.
        AGENTMESH_WEBHOOK_ALLOW_PRIVATE_ADDRESSES="true",
        AGENTMESH_WEBHOOK_RETRY_INITIAL_SECONDS="0.3",
        AGENTMESH_WEBHOOK_RETRY_MAX_SECONDS="1",
        AGENTMESH_WEBHOOK_MAX_ATTEMPTS="40",
        # A hanging endpoint holds an attempt this long (test_a_hanging_endpoint_...).
        AGENTMESH_WEBHOOK_TIMEOUT_SECONDS="8",
        AGENTMESH_WEBHOOK_BREAKER_FAILURES="3",
        AGENTMESH_WEBHOOK_ENDPOINTS=json.dumps(deployment),
        AGENTMESH_LIFECYCLE_SWEEP_SECONDS="1",
    )
    try:
        s.start(timeout=90)
        yield s
    finally:
        s.stop()
        if USES_POSTGRES:
            asyncio.run(drop_schemas(prefix))


def _owner(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _call(suite: Suite, method: str, path: str, owner: str, **kw: Any) -> httpx.Response:
    admin = kw.pop("admin", False)
    headers = {"Authorization": f"Bearer {token(owner, admin=admin)}"}
    return httpx.request(method, f"{suite.gateway_url}{path}", headers=headers, timeout=30, **kw)


def _endpoint(
    suite: Suite, receiver: Receiver, owner: str, path: str, **extra: Any
) -> dict[str, Any]:
    resp = _call(
        suite,
        "POST",
        "/api/v1/webhooks/endpoints",
        owner,
        json={"url": extra.pop("url", receiver.url(path)), **extra},
    )
    assert resp.status_code == 201, resp.text
    created: dict[str, Any] = resp.json()
    assert created["secret"].startswith("whsec_")
    receiver.secrets[path] = created["secret"]
    return created


def _chat(suite: Suite, owner: str, text: str = "hello") -> str:
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    resp = _call(
        suite,
        "POST",
        "/api/v1/agent/runs",
        owner,
        json=run_body(f"t-{uuid.uuid4().hex[:6]}", run_id, text),
    )
    assert resp.status_code == 200, resp.text
    assert parse_sse(resp.content)[-1]["type"] == "RUN_FINISHED"
    return run_id


def _wait(check: Callable[[], Any], within: float = 30, what: str = "") -> Any:
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _deliveries(suite: Suite, owner: str, **params: Any) -> list[dict[str, Any]]:
    resp = _call(suite, "GET", "/api/v1/webhooks/deliveries", owner, params=params)
    assert resp.status_code == 200, resp.text
    found: list[dict[str, Any]] = resp.json()["deliveries"]
    return found


def test_a_finished_run_is_delivered_signed_and_logged(suite: Suite, receiver: Receiver) -> None:
    owner = _owner("ann")
    path = f"/{owner}"
    created = _endpoint(suite, receiver, owner, path, eventTypes=["run.succeeded"])
    listed = _call(suite, "GET", "/api/v1/webhooks/endpoints", owner).json()["endpoints"]
    assert [e["id"] for e in listed] == [created["id"]]
    assert "secret" not in listed[0]  # shown once, at creation

    run_id = _chat(suite, owner)
    [got] = _wait(lambda: receiver.at(path), what="the run's webhook")
    assert got.body["type"] == "run.succeeded"
    assert got.body["data"]["runId"] == run_id
    assert got.body["data"]["ownerId"] == owner
    assert got.body["data"]["state"] == "succeeded"
    [logged] = _wait(
        lambda: [d for d in _deliveries(suite, owner) if d["state"] == "succeeded"],
        what="the delivery log",
    )
    assert logged["webhookId"] == got.headers["webhook-id"]
    assert (logged["attempts"], logged["lastStatusCode"]) == (1, 200)
    assert logged["endpointId"] == created["id"]


def test_a_500_is_retried_with_the_same_webhook_id(suite: Suite, receiver: Receiver) -> None:
    owner = _owner("bea")
    path = f"/{owner}"
    receiver.script[path] = [500]
    _endpoint(suite, receiver, owner, path, eventTypes=["run.succeeded"])
    _chat(suite, owner)
    first, second = _wait(lambda: receiver.at(path)[:2] if len(receiver.at(path)) >= 2 else None)
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    [logged] = _wait(lambda: [d for d in _deliveries(suite, owner) if d["state"] == "succeeded"])
    assert (logged["attempts"], logged["lastStatusCode"]) == (2, 200)
    time.sleep(1)
    assert len(receiver.at(path)) == 2  # nothing after the 200


def test_a_receiver_that_was_down_gets_the_event_when_it_is_back(suite: Suite) -> None:
    owner = _owner("cat")
    down = Receiver(free_port())
    path = "/down"
    created = _endpoint(suite, down, owner, path, eventTypes=["run.succeeded"])
    _chat(suite, owner)
    # Nobody listens: attempts fail and are rescheduled.
    failing = _wait(
        lambda: [d for d in _deliveries(suite, owner) if d["attempts"] >= 2],
        what="failed attempts",
    )
    assert failing[0]["state"] == "pending"
    assert "nextAttemptTime" in failing[0] and "lastStatusCode" not in failing[0]
    assert "Connect" in failing[0]["lastError"]
    down.start()
    try:
        [got] = _wait(lambda: down.at(path), what="the delivery after the receiver came back")
    finally:
        down.stop()
    [logged] = _wait(lambda: [d for d in _deliveries(suite, owner) if d["state"] == "succeeded"])
    assert logged["webhookId"] == got.headers["webhook-id"]
    assert logged["attempts"] > 2 and logged["endpointId"] == created["id"]


def test_an_admin_replays_a_delivery_with_the_same_webhook_id(
    suite: Suite, receiver: Receiver
) -> None:
    owner = _owner("dan")
    path = f"/{owner}"
    _endpoint(suite, receiver, owner, path, eventTypes=["run.succeeded"])
    _chat(suite, owner)
    [first] = _wait(lambda: receiver.at(path))
    [logged] = _wait(lambda: [d for d in _deliveries(suite, owner) if d["state"] == "succeeded"])
    replay = f"/api/v1/admin/webhooks/deliveries/{logged['id']}:replay"
    assert _call(suite, "POST", replay, owner).status_code == 403
    resp = _call(suite, "POST", replay, "root", admin=True)
    assert resp.status_code == 200, resp.text
    assert resp.json()["replays"] == 1
    _, again = _wait(lambda: receiver.at(path) if len(receiver.at(path)) == 2 else None)
    assert again.headers["webhook-id"] == first.headers["webhook-id"]
    assert again.body == first.body
    admin_view = _call(
        suite,
        "GET",
        "/api/v1/admin/webhooks/deliveries",
        "root",
        admin=True,
        params={"owner_id": owner},
    )
    assert admin_view.status_code == 200
    assert [d["id"] for d in admin_view.json()["deliveries"]] == [logged["id"]]


def test_memory_and_job_run_events_reach_owner_and_deployment_endpoints(
    suite: Suite, receiver: Receiver
) -> None:
    owner = _owner("eve")
    path = f"/{owner}"
    _endpoint(suite, receiver, owner, path, eventTypes=["memory.changed", "job_run.succeeded"])
    made = _call(suite, "POST", "/api/v1/memories", owner, json={"content": "User likes tea"})
    assert made.status_code == 201, made.text
    registered = _call(suite, "POST", "/api/v1/users", owner)
    assert registered.status_code == 200, registered.text
    [job] = registered.json()["jobs"]
    triggered = _call(suite, "POST", f"/api/v1/automation/jobs/{job['id']}:trigger", owner)
    assert triggered.status_code == 202, triggered.text

    def types() -> set[str]:
        return {r.body["type"] for r in receiver.at(path)}

    _wait(lambda: {"memory.changed", "job_run.succeeded"} <= types(), within=60)
    changed = next(r for r in receiver.at(path) if r.body["type"] == "memory.changed")
    assert changed.body["data"]["memoryId"] == made.json()["id"]
    assert changed.body["data"]["action"] == "write"
    job_run = next(r for r in receiver.at(path) if r.body["type"] == "job_run.succeeded")
    assert job_run.body["data"]["jobId"] == job["id"]
    # The deployment's endpoint hears every owner's memory changes, signed with its secret.
    ours = _wait(
        lambda: [r for r in receiver.at("/deployment") if r.body["data"]["ownerId"] == owner]
    )
    assert ours[0].headers["webhook-id"] == changed.headers["webhook-id"]
    # ...and its deliveries are the admin's to read, not the owner's.
    assert all(not d.get("deploymentEndpoint") for d in _deliveries(suite, owner))
    admin_view = _call(
        suite,
        "GET",
        "/api/v1/admin/webhooks/deliveries",
        "root",
        admin=True,
        params={"owner_id": owner, "endpoint_id": "ops"},
    ).json()["deliveries"]
    assert admin_view and all(d["deploymentEndpoint"] for d in admin_view)


def test_another_owner_sees_none_of_an_owners_endpoints_or_deliveries(
    suite: Suite, receiver: Receiver
) -> None:
    owner, other = _owner("fay"), _owner("gus")
    path = f"/{owner}"
    created = _endpoint(suite, receiver, owner, path, eventTypes=["run.succeeded"])
    _chat(suite, owner)
    [logged] = _wait(lambda: [d for d in _deliveries(suite, owner) if d["state"] == "succeeded"])
    endpoint = f"/api/v1/webhooks/endpoints/{created['id']}"
    assert _call(suite, "GET", endpoint, other).status_code == 404
    assert _call(suite, "DELETE", endpoint, other).status_code == 404
    delivery = f"/api/v1/webhooks/deliveries/{logged['id']}"
    assert _call(suite, "GET", delivery, other).status_code == 404
    assert _call(suite, "GET", delivery, owner).status_code == 200
    assert _deliveries(suite, other) == []
    assert _call(suite, "GET", "/api/v1/webhooks/endpoints", other).json() == {"endpoints": []}
    assert _call(suite, "DELETE", endpoint, owner).status_code == 204
    assert _call(suite, "GET", endpoint, owner).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.com/hook"}, "url"),
        ({"url": "http:///no-host"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"url": "http://127.0.0.1:99999/x"}, "url"),
        ({}, "url"),
        ({"url": 5}, "url"),
        ({"url": "https://example.com", "eventTypes": ["run.exploded"]}, "eventTypes"),
        ({"url": "https://example.com", "eventTypes": "run.failed"}, "eventTypes"),
        ({"url": "https://example.com", "color": "red"}, "color"),
    ],
)
def test_a_bad_endpoint_is_a_400_naming_the_field(
    suite: Suite, body: dict[str, Any], field: str
) -> None:
    resp = _call(suite, "POST", "/api/v1/webhooks/endpoints", _owner("hal"), json=body)
    assert resp.status_code == 400, resp.text
    assert field in resp.text


def test_bad_delivery_filters_are_400s(suite: Suite) -> None:
    owner = _owner("ida")
    bad_state = _call(suite, "GET", "/api/v1/webhooks/deliveries", owner, params={"state": "x"})
    assert bad_state.status_code == 400 and "state" in bad_state.text
    bad_token = _call(
        suite, "GET", "/api/v1/webhooks/deliveries", owner, params={"page_token": "nope"}
    )
    assert bad_token.status_code == 400 and "page_token" in bad_token.text


def test_an_owner_deletion_removes_endpoints_and_deliveries(
    suite: Suite, receiver: Receiver
) -> None:
    owner = _owner("jan")
    path = f"/{owner}"
    _endpoint(suite, receiver, owner, path, eventTypes=["run.succeeded"])
    _chat(suite, owner)
    _wait(lambda: [d for d in _deliveries(suite, owner) if d["state"] == "succeeded"])
    resp = _call(suite, "DELETE", "/api/v1/users/me", owner)
    assert resp.status_code == 202, resp.text
    deletion_id = resp.json()["id"]

    def finished() -> dict[str, Any] | None:
        got = _call(suite, "GET", f"/api/v1/users/me/deletions/{deletion_id}", owner).json()
        return got if got["state"] == "succeeded" else None

    final = _wait(finished, within=60)
    counts = {s["service"]: s["deletedCounts"] for s in final["steps"]}
    gateway = {k: counts["gateway"][k] for k in ("webhookEndpoints", "webhookDeliveries")}
    assert gateway == {"webhookEndpoints": 1, "webhookDeliveries": 1}
    assert _call(suite, "GET", "/api/v1/webhooks/endpoints", owner).json() == {"endpoints": []}
    assert _deliveries(suite, owner) == []


def test_the_delivery_log_pages_newest_first(suite: Suite, receiver: Receiver) -> None:
    owner = _owner("kim")
    path = f"/{owner}"
    _endpoint(suite, receiver, owner, path, eventTypes=["run.succeeded"])
    for _ in range(3):
        _chat(suite, owner)
    _wait(lambda: len(_deliveries(suite, owner)) == 3)
    whole = [d["id"] for d in _deliveries(suite, owner)]
    first = _call(suite, "GET", "/api/v1/webhooks/deliveries", owner, params={"page_size": 2})
    rest = _call(
        suite,
        "GET",
        "/api/v1/webhooks/deliveries",
        owner,
        params={"page_size": 2, "page_token": first.json()["nextPageToken"]},
    ).json()
    assert [d["id"] for d in first.json()["deliveries"]] + [
        d["id"] for d in rest["deliveries"]
    ] == whole
    assert "nextPageToken" not in rest
    times = [d["createTime"] for d in _deliveries(suite, owner)]
    assert times == sorted(times, reverse=True)


def test_two_gateway_replicas_deliver_once_and_one_carries_on_alone(
    suite: Suite, receiver: Receiver, tmp_path: Path
) -> None:
    """A second gateway on the same database: each event is sent once (one deliverer holds
    the lease, and a delivery is claimed before it is sent); when a gateway stops, the other
    delivers (after the lease at the latest)."""
    other = Suite(
        ports={**suite.ports, "gateway": free_port()},
        env={k: v for k, v in suite.env.items() if k.startswith("AGENTMESH_")},
        log_dir=tmp_path / "logs",
        services=("gateway",),
    )
    other.start_service("gateway")
    try:
        other.wait_ready("gateway", time.monotonic() + 60)
        owner = _owner("lee")
        path = f"/{owner}"
        _endpoint(suite, receiver, owner, path, eventTypes=["run.succeeded"])
        for _ in range(4):
            _chat(suite, owner)
        _wait(lambda: len(receiver.at(path)) >= 4, what="four deliveries")
        time.sleep(1.5)  # a second deliverer would have sent them again by now
        assert len({r.headers["webhook-id"] for r in receiver.at(path)}) == 4
        assert len(receiver.at(path)) == 4
        suite.stop_service("gateway", grace=10)
        try:
            resp = httpx.post(
                f"{other.gateway_url}/api/v1/agent/runs",
                headers={"Authorization": f"Bearer {token(owner)}"},
                json=run_body("t-after", f"r-{uuid.uuid4().hex[:8]}", "hello"),
                timeout=30,
            )
            assert resp.status_code == 200, resp.text
            _wait(lambda: len(receiver.at(path)) == 5, what="the delivery by the other gateway")
        finally:
            suite.start_service("gateway")
            suite.wait_ready("gateway", time.monotonic() + 60)
    finally:
        other.stop()


def test_a_hanging_endpoint_does_not_delay_another_owners_deliveries_and_is_paused(
    suite: Suite, receiver: Receiver
) -> None:
    """Issue 33: one endpoint that never answers delayed every owner's deliveries by about
    the timeout (8 s here), every pass. Another owner's delivery latency stays that of an
    idle deliverer; the hanging endpoint is paused and says so."""
    with socket.socket() as hanging:
        # Connections are taken by the kernel and never answered.
        hanging.bind(("127.0.0.1", 0))
        hanging.listen(64)
        dead_owner = _owner("mal")
        dead = _call(
            suite,
            "POST",
            "/api/v1/webhooks/endpoints",
            dead_owner,
            json={"url": f"http://127.0.0.1:{hanging.getsockname()[1]}/hook"},
        )
        assert dead.status_code == 201, dead.text
        for _ in range(3):
            _chat(suite, dead_owner)
        _wait(
            lambda: any(d["attempts"] == 0 for d in _deliveries(suite, dead_owner)),
            what="the hanging endpoint's deliveries",
        )
        time.sleep(0.5)  # its attempts are under way
        owner = _owner("nia")
        path = f"/{owner}"
        _endpoint(suite, receiver, owner, path, eventTypes=["run.succeeded"])
        latencies = []
        for n in range(1, 4):
            _chat(suite, owner)
            finished = time.monotonic()
            _wait(lambda n=n: len(receiver.at(path)) >= n, within=20, what=f"delivery {n}")
            latencies.append(round(time.monotonic() - finished, 3))
        assert max(latencies) < 2, latencies
        endpoint = f"/api/v1/webhooks/endpoints/{dead.json()['id']}"
        paused = _wait(
            lambda: (
                (got := _call(suite, "GET", endpoint, dead_owner).json())["state"] == "paused"
                and got
            ),
            within=30,
            what="the hanging endpoint paused",
        )
        assert paused["consecutiveFailures"] >= 3
        assert paused["lastError"].startswith("TimeoutError") and "pausedUntil" in paused
