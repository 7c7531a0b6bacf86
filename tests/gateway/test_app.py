"""Errors, request ids, health, readiness and OpenAPI of the gateway."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from agentmesh.type.v1 import message_pb2
from google.protobuf import timestamp_pb2

from services.gateway.app import create_app
from services.gateway.clients import Clients, open_clients
from services.launcher import free_port
from shared import db
from shared.server import DATABASE, EMBEDDING_MODEL, GrpcServer, ServiceParts
from shared.settings import Settings
from tests.gateway.conftest import Peers, bearer, gateway_settings, serve_app


@asynccontextmanager
async def gateway_with(
    settings: Settings,
    **addr_overrides: str,
) -> AsyncIterator[httpx.AsyncClient]:
    """A gateway whose named peers are replaced (e.g. by a closed port)."""
    s = settings.model_copy(update={f"{k}_addr": v for k, v in addr_overrides.items()})
    clients = open_clients(s)
    try:
        async with serve_app(create_app(s, clients)) as url, httpx.AsyncClient(base_url=url) as c:
            yield c
    finally:
        await clients.close()


async def test_unknown_route_is_404_json(http: httpx.AsyncClient) -> None:
    resp = await http.get("/api/v1/nothing-here")
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "NOT_FOUND"


async def test_wrong_method_is_405_json(http: httpx.AsyncClient, auth: dict[str, str]) -> None:
    resp = await http.put("/api/v1/agent/runs", headers=auth)
    assert resp.status_code == 405
    assert resp.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    assert "POST" in resp.headers["allow"]


async def test_unexpected_exception_is_a_generic_500_with_the_request_id(
    gw_settings: Settings, clients: Clients, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        async def ListThreads(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("secret internal detail")

    broken = Clients(clients.orchestrator, Broken(), clients.memory, clients.scheduler)
    async with (
        serve_app(create_app(gw_settings, broken)) as url,
        httpx.AsyncClient(base_url=url) as c,
    ):
        with caplog.at_level(logging.ERROR, logger="agentmesh.gateway"):
            resp = await c.get("/api/v1/agent/threads", headers=bearer(gw_settings, "alice"))
    assert resp.status_code == 500
    error = resp.json()["error"]
    assert error["code"] == "INTERNAL"
    assert error["requestId"] == resp.headers["x-request-id"]
    assert error["requestId"] in error["message"]
    assert "secret" not in resp.text and "Traceback" not in resp.text
    assert any(r.exc_info for r in caplog.records), "the trace is logged"


async def test_request_id_is_echoed_and_sent_to_the_services(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    peers: Peers,
) -> None:
    resp = await http.get(
        "/api/v1/agent/threads", headers={**bearer(gw_settings, "rid"), "X-Request-ID": "abc-123"}
    )
    assert resp.headers["x-request-id"] == "abc-123"
    assert peers.history.calls[-1].metadata["x-request-id"] == "abc-123"


async def test_request_id_is_generated_when_absent_or_unusable(http: httpx.AsyncClient) -> None:
    first = await http.get("/healthz")
    second = await http.get("/healthz", headers={"X-Request-ID": "bad id with spaces"})
    assert len(first.headers["x-request-id"]) == 32
    assert second.headers["x-request-id"] not in (
        "bad id with spaces",
        first.headers["x-request-id"],
    )


async def test_unary_calls_carry_the_owner_and_a_deadline(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    peers: Peers,
) -> None:
    await http.get("/api/v1/agent/threads", headers=bearer(gw_settings, "deadline-owner"))
    call = peers.history.calls[-1]
    assert call.metadata["x-agentmesh-owner"] == "deadline-owner"
    assert (
        call.time_remaining is not None
        and call.time_remaining <= gw_settings.rpc_timeout_seconds + 0.5
    )


async def test_healthz_is_200(http: httpx.AsyncClient) -> None:
    resp = await http.get("/healthz")
    assert resp.status_code == 200 and resp.json() == {"status": "ok"}


async def test_readyz_is_200_when_every_service_is_serving(http: httpx.AsyncClient) -> None:
    resp = await http.get("/readyz")
    assert resp.status_code == 200 and resp.json()["status"] == "ready"


async def test_readyz_says_memory_search_is_lexical_only_without_an_embedding_model(
    http: httpx.AsyncClient,
) -> None:
    """A memory service without an embedding model serves, degraded: /readyz says so."""
    resp = await http.get("/readyz")
    assert resp.status_code == 200
    assert resp.json()["memorySearch"] == {
        "status": "degraded",
        "mode": "lexical",
        "reason": "no embedding model is configured (AGENTMESH_EMBEDDING_BASE_URL)",
    }


@pytest.mark.parametrize("answers", [True, False])
async def test_readyz_says_whether_memory_search_is_hybrid_by_the_embedding_model(
    gw_settings: Settings, answers: bool
) -> None:
    """The memory service's health entry of its embedding model: hybrid while it answers,
    lexical-only (degraded, still 200: memory still serves) while it does not."""

    async def check() -> None:
        if not answers:
            raise ConnectionError("the embedding model is down")

    parts = ServiceParts(
        register=lambda _server: None, service_names=[], features={EMBEDDING_MODEL: check}
    )
    memory = GrpcServer("memory", parts, grace_seconds=1)
    port = await memory.start("127.0.0.1", 0)
    try:
        await memory.check_features()
        async with gateway_with(gw_settings, memory=f"127.0.0.1:{port}") as c:
            resp = await c.get("/readyz")
    finally:
        await memory.stop()
    assert resp.status_code == 200, resp.text
    if answers:
        assert resp.json()["memorySearch"] == {"status": "ready", "mode": "hybrid"}
    else:
        assert resp.json()["memorySearch"] == {
            "status": "degraded",
            "mode": "lexical",
            "reason": "the embedding model does not answer",
        }


def _when(text: str) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromJsonString(text)
    return ts


async def test_readyz_shows_each_tool_source_and_a_failed_one_is_degraded_never_503(
    http: httpx.AsyncClient, peers: Peers, gw_settings: Settings
) -> None:
    """An operator sees a configured tool server that never answered (it was visible
    nowhere): its state, last error and when, on /readyz as on GET /api/v1/tools."""
    peers.orchestrator.tool_sources = [
        message_pb2.ToolSourceStatus(
            name="mcp:notes",
            state=message_pb2.TOOL_SOURCE_STATE_CONNECTED,
            tool_count=2,
            last_success_time=_when("2026-12-05T08:00:00Z"),
        ),
        message_pb2.ToolSourceStatus(
            name="mcp:slow",
            state=message_pb2.TOOL_SOURCE_STATE_FAILED,
            consecutive_failures=3,
            last_error="MCP server 'slow' did not answer in time",
            last_error_time=_when("2026-12-05T08:00:10Z"),
            next_attempt_time=_when("2026-12-05T08:00:30Z"),
        ),
    ]
    try:
        ready = await http.get("/readyz")
        listed = await http.get("/api/v1/tools", headers=bearer(gw_settings, "alice"))
    finally:
        peers.orchestrator.tool_sources = []
    assert ready.status_code == 200, ready.text
    sources = ready.json()["toolSources"]
    assert sources["status"] == "degraded" and sources["reason"] == "failed: mcp:slow"
    assert sources["sources"] == [
        {
            "name": "mcp:notes",
            "state": "connected",
            "toolCount": 2,
            "consecutiveFailures": 0,
            "lastSuccessTime": "2026-12-05T08:00:00.000000Z",
        },
        {
            "name": "mcp:slow",
            "state": "failed",
            "toolCount": 0,
            "consecutiveFailures": 3,
            "lastError": "MCP server 'slow' did not answer in time",
            "lastErrorTime": "2026-12-05T08:00:10.000000Z",
            "nextAttemptTime": "2026-12-05T08:00:30.000000Z",
        },
    ]
    assert listed.status_code == 200 and listed.json()["sources"] == sources["sources"]


async def test_readyz_says_the_tool_sources_are_ready_or_unknown_and_stays_200(
    http: httpx.AsyncClient, peers: Peers
) -> None:
    ready = await http.get("/readyz")
    assert ready.json()["toolSources"] == {"status": "ready", "sources": []}
    peers.orchestrator.tool_sources = None  # the orchestrator cannot ask its executor
    try:
        unknown = await http.get("/readyz")
    finally:
        peers.orchestrator.tool_sources = []
    assert unknown.status_code == 200, unknown.text
    assert unknown.json()["toolSources"] == {
        "status": "unknown",
        "reason": "the orchestrator or its executor does not answer",
        "sources": [],
    }


async def test_readyz_is_503_listing_the_services_not_serving(gw_settings: Settings) -> None:
    down = f"127.0.0.1:{free_port()}"
    async with gateway_with(gw_settings, scheduler=down, memory=down) as c:
        resp = await c.get("/readyz")
    assert resp.status_code == 503
    error = resp.json()["error"]
    assert {d["field"] for d in error["details"]} == {"memory", "scheduler"}
    assert "memory" in error["message"] and "scheduler" in error["message"]


async def test_readyz_names_the_store_a_serving_peer_lost(gw_settings: Settings) -> None:
    """A history process that is up but cannot reach its database (a PostgreSQL URL where
    nothing listens): /readyz says so instead of a bare "not SERVING"."""
    lost = db.HealthCheck(
        Settings(database_url=f"postgresql://postgres@127.0.0.1:{free_port()}/test"), "history"
    )
    parts = ServiceParts(
        register=lambda _server: None, service_names=[], dependencies={DATABASE: lost}
    )
    history = GrpcServer("history", parts, grace_seconds=1)
    port = await history.start("127.0.0.1", 0)
    try:
        assert await history.check_dependencies() == {DATABASE}
        async with gateway_with(gw_settings, history=f"127.0.0.1:{port}") as c:
            resp = await c.get("/readyz")
    finally:
        await history.stop()
        await lost.aclose()
    assert resp.status_code == 503
    error = resp.json()["error"]
    assert error["details"] == [{"field": "history", "description": "cannot reach its database"}]
    assert error["message"] == "not ready: history cannot reach its database"


async def test_service_down_is_503_json(gw_settings: Settings) -> None:
    async with gateway_with(gw_settings, history=f"127.0.0.1:{free_port()}") as c:
        resp = await c.get("/api/v1/agent/threads", headers=bearer(gw_settings, "alice"))
    assert resp.status_code == 503
    assert resp.json()["error"]["code"] == "UNAVAILABLE"


async def test_openapi_documents_every_endpoint(http: httpx.AsyncClient) -> None:
    paths = (await http.get("/openapi.json")).json()["paths"]
    assert {
        "/api/v1/agent/runs",
        "/api/v1/agent/threads",
        "/api/v1/agent/threads/{thread_id}/history",
        "/api/v1/agent/runs/{run_id}",
        "/api/v1/admin/audit",
        "/api/v1/memories",
        "/api/v1/memories/{memory_id}",
        "/healthz",
        "/readyz",
    } <= set(paths)
    assert (await http.get("/docs")).status_code == 200


async def test_app_without_clients_opens_its_own_channels(
    base_settings: Settings,
    peers: Peers,
) -> None:
    s = gateway_settings(base_settings, peers.addrs)
    async with serve_app(create_app(s)) as url, httpx.AsyncClient(base_url=url) as c:
        assert (await c.get("/readyz")).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "field"),
    [
        ("GET", "/api/v1/agent/threads/{}/history", "thread_id"),
        ("GET", "/api/v1/agent/runs/{}", "run_id"),
        ("POST", "/api/v1/agent/runs/{}:cancel", "run_id"),
        ("DELETE", "/api/v1/memories/{}", "memory_id"),
        ("GET", "/api/v1/automation/jobs/{}", "job_id"),
    ],
)
@pytest.mark.parametrize("bad", ["a%00b", "a%0A", "a%20b", "%E7%BA%BF", "x" * 129])
async def test_a_path_id_outside_the_id_rule_is_400_naming_it(
    method: str,
    path: str,
    field: str,
    bad: str,
    http: httpx.AsyncClient,
    auth: dict[str, str],
) -> None:
    resp = await http.request(method, path.format(bad), headers=auth)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["details"][0]["field"] == field
