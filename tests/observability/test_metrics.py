"""Prometheus metrics: RPC counts and latency per method and status on a gRPC service's
/metrics port, HTTP metrics by route template on the gateway's /metrics, and the
service-specific helpers."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import grpc
import httpx
import pytest
from agentmesh.type.v1 import run_event_pb2
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from services.launcher import free_port
from shared import metrics
from shared.errors import InvalidArgument
from shared.server import GrpcServer, ServiceParts
from shared.settings import Settings
from tests.observability.suite import bearer, gateway, run_body, running_suite

_PROBE = "agentmesh.test.Metered"


def _parts() -> ServiceParts:
    async def call(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        if request == b"bad":
            raise InvalidArgument("thread_id", "must not be empty")
        return b"ok"

    def register(server: grpc.aio.Server) -> None:
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    _PROBE, {"Call": grpc.unary_unary_rpc_method_handler(call)}
                ),
            )
        )

    return ServiceParts(register=register, service_names=[_PROBE])


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


@pytest.fixture
def recording() -> Iterator[None]:
    was = metrics.enabled()
    metrics.enable()
    yield
    metrics._enabled = was


async def test_grpc_service_serves_rpc_counts_and_latency_on_its_metrics_port() -> None:
    port = free_port()
    server = GrpcServer("metered", _parts(), grace_seconds=0.5, metrics_port=port)
    grpc_port = await server.start("127.0.0.1", 0)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
            call = ch.unary_unary(f"/{_PROBE}/Call")
            for _ in range(3):
                await call(b"x")
            with pytest.raises(grpc.aio.AioRpcError):
                await call(b"bad")
        async with httpx.AsyncClient() as http:
            resp = await http.get(f"http://127.0.0.1:{port}/metrics")
    finally:
        await server.stop()
    assert resp.status_code == 200
    handled = _samples(resp.text, "agentmesh_grpc_server_handled_total")
    ok = (("grpc_code", "OK"), ("grpc_method", "Call"), ("grpc_service", _PROBE))
    bad = (("grpc_code", "INVALID_ARGUMENT"), ("grpc_method", "Call"), ("grpc_service", _PROBE))
    assert handled[ok] >= 3 and handled[bad] >= 1
    latency = _samples(resp.text, "agentmesh_grpc_server_handling_seconds_count")
    assert latency[ok] >= 3
    # Stopping the server stops its metrics endpoint.
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as http:
            await http.get(f"http://127.0.0.1:{port}/metrics")


def test_metrics_port_is_off_by_default_and_when_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMESH_METRICS_PORT", "")
    assert Settings().metrics_port == 0
    monkeypatch.delenv("AGENTMESH_METRICS_PORT")
    assert Settings().metrics_port == 0
    monkeypatch.setenv("AGENTMESH_METRICS_PORT", "9464")
    assert Settings().metrics_port == 9464


async def test_gateway_serves_http_metrics_by_route_template(settings: Settings) -> None:
    async with gateway(settings) as http:
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/api/v1/agent/threads/t-secret-id/history")).status_code == 401
        assert (await http.get("/no/such/path")).status_code == 404
        resp = await http.get("/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    requests = _samples(resp.text, "agentmesh_http_requests_total")
    assert requests[(("method", "GET"), ("route", "/healthz"), ("status", "200"))] >= 1
    history = (
        ("method", "GET"),
        ("route", "/api/v1/agent/threads/{thread_id}/history"),
        ("status", "401"),
    )
    assert requests[history] >= 1
    assert requests[(("method", "GET"), ("route", "unmatched"), ("status", "404"))] >= 1
    assert "t-secret-id" not in resp.text
    assert _samples(resp.text, "agentmesh_http_request_duration_seconds_count")


async def test_gateway_times_each_started_runs_first_event_and_nothing_else(
    settings: Settings,
) -> None:
    """agentmesh_run_first_event_seconds: one observation per run answered 200, from its POST
    reaching the gateway to its first event sent; a refused POST (400) is not a run."""
    name = "agentmesh_run_first_event_seconds"
    count, total = f"{name}_count", f"{name}_sum"
    async with running_suite(settings) as suite, gateway(suite.settings) as http:
        text = (await http.get("/metrics")).text
        before = _samples(text, count).get((), 0.0), _samples(text, total).get((), 0.0)
        began = time.perf_counter()
        for _ in range(2):
            body = run_body(uuid.uuid4().hex, uuid.uuid4().hex, "hello")
            resp = await http.post("/api/v1/agent/runs", json=body, headers=bearer(settings, "al"))
            assert resp.status_code == 200 and "RUN_FINISHED" in resp.text
        refused = await http.post(
            "/api/v1/agent/runs", json={"threadId": ""}, headers=bearer(settings, "al")
        )
        assert refused.status_code == 400
        took = time.perf_counter() - began
        text = (await http.get("/metrics")).text
    assert _samples(text, count)[()] - before[0] == 2
    assert 0 < _samples(text, total)[()] - before[1] <= took
    # The buckets resolve milliseconds (the first is 2.5 ms).
    buckets = _samples(text, "agentmesh_run_first_event_seconds_bucket")
    assert (("le", "0.0025"),) in buckets and (("le", "0.1"),) in buckets


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_run_helpers_count_runs_by_state_and_profile(recording: None) -> None:
    before = _value("agentmesh_runs_total", state="SUCCEEDED", profile="chat_default")
    running = _value("agentmesh_runs_in_progress", profile="chat_default")
    metrics.run_started("chat_default")
    assert _value("agentmesh_runs_in_progress", profile="chat_default") == running + 1
    metrics.run_ended("chat_default", "SUCCEEDED")
    assert _value("agentmesh_runs_total", state="SUCCEEDED", profile="chat_default") == before + 1
    assert _value("agentmesh_runs_in_progress", profile="chat_default") == running


def test_profile_labels_are_capped(recording: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "_profiles", {f"p{i}" for i in range(metrics.PROFILE_LABEL_LIMIT)})
    before = _value("agentmesh_runs_total", state="RUNNING", profile="other")
    metrics.run_started("a-brand-new-profile")
    metrics.run_ended("a-brand-new-profile", "FAILED")
    assert _value("agentmesh_runs_total", state="RUNNING", profile="other") == before + 1
    assert _value("agentmesh_runs_total", state="RUNNING", profile="a-brand-new-profile") == 0


def test_event_scheduler_and_denial_helpers_record(recording: None) -> None:
    events = _value("agentmesh_run_events_total", type="text_message_content")
    lag = _value("agentmesh_scheduler_dispatch_lag_seconds_count")
    denials = _value("agentmesh_tool_denials_total", reason="not_in_profile")
    delta = run_event_pb2.RunEvent(text_message_content=run_event_pb2.TextMessageContent(delta="x"))
    metrics.event_emitted(delta)
    metrics.event_emitted(delta)
    metrics.set_due_backlog(7)
    metrics.observe_dispatch_lag(1.5)
    metrics.tool_denied("not_in_profile")
    assert _value("agentmesh_run_events_total", type="text_message_content") == events + 2
    assert _value("agentmesh_scheduler_due_backlog") == 7
    assert _value("agentmesh_scheduler_dispatch_lag_seconds_count") == lag + 1
    assert _value("agentmesh_tool_denials_total", reason="not_in_profile") == denials + 1


def test_helpers_record_nothing_while_metrics_are_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "_enabled", False)
    before = _value("agentmesh_tool_denials_total", reason="not_registered")
    metrics.tool_denied("not_registered")
    metrics.rpc_handled("svc", "M", "OK", 0.1)
    assert _value("agentmesh_tool_denials_total", reason="not_registered") == before
    assert (
        _value(
            "agentmesh_grpc_server_handled_total",
            grpc_service="svc",
            grpc_method="M",
            grpc_code="OK",
        )
        == 0
    )
