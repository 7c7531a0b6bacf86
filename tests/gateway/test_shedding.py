"""The gateway's door (services/gateway/shedding.py): while the process bound of runs in
flight is reached, POST /runs is refused with 503 + Retry-After before authentication or
the body is read; everything else, and a run once there is room, is served as before."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from prometheus_client import REGISTRY
from starlette.types import Message, Receive, Scope, Send

from services.gateway.app import create_app
from services.gateway.clients import Clients
from services.gateway.shedding import RUNS_PATH, ShedRuns, overloaded
from shared import metrics
from shared.admission import InFlight
from shared.admission import Scope as Bound
from shared.logs import request_id_var
from shared.settings import Settings
from tests.conftest import assert_overloaded
from tests.gateway.conftest import bearer, run_body, serve_app


async def test_a_full_gateway_refuses_runs_at_the_door_and_keeps_the_connection(
    gw_settings: Settings, clients: Clients, caplog: pytest.LogCaptureFixture
) -> None:
    settings = gw_settings.model_copy(update={"max_runs_in_flight": 2})
    app = create_app(settings, clients)
    in_flight: InFlight = app.state.in_flight
    for _ in range(2):
        in_flight.acquire("shed-holder")
    # One connection: each answer must leave it readable for the next request.
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with serve_app(app) as url, httpx.AsyncClient(base_url=url, limits=limits) as http:
        big = run_body("t-door", "r-door", "x" * 200_000)
        # No credentials at all: the door answers before authentication.
        refused = await http.post(
            "/api/v1/agent/runs", json=big, headers={"X-Request-ID": "door-check-1"}
        )
        again = await http.post(
            "/api/v1/agent/runs", content=b"{not json", headers=bearer(settings, "shed-eve")
        )
        health = await http.get("/healthz")
        history = await http.get("/api/v1/agent/threads", headers=bearer(settings, "shed-eve"))
        in_flight.release("shed-holder")
        # Room again: the request goes through the application (its bad body is a 400).
        admitted = await http.post(
            "/api/v1/agent/runs", content=b"{not json", headers=bearer(settings, "shed-eve")
        )
        no_auth = await http.post("/api/v1/agent/runs", json=run_body())
    for resp in (refused, again):
        error = assert_overloaded(resp, "process")
        assert "bound is 2" in error["message"] and "nothing was stored" in error["message"]
        assert error["requestId"] == resp.headers["X-Request-ID"]
    assert refused.headers["X-Request-ID"] == "door-check-1"
    assert health.status_code == 200
    assert history.status_code == 200, history.text
    assert admitted.status_code == 400, admitted.text
    assert admitted.json()["error"]["code"] == "INVALID_ARGUMENT"
    assert no_auth.status_code == 401
    assert in_flight.total == 1  # the refusals took no room; the bad body gave its back
    # Not a line per refusal: one warning for both (at most one every LOG_EVERY_SECONDS).
    warned = [r for r in caplog.records if r.getMessage().startswith("refusing runs")]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING


async def test_the_door_answers_the_refusal_the_rule_builds_with_each_requests_id() -> None:
    in_flight = InFlight(limit=1, per_owner=1)
    in_flight.acquire("holder")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("a refused run reaches no application")

    door = ShedRuns(app, in_flight)
    sent: list[Message] = []
    metrics.enable()
    labels = {"method": "POST", "route": RUNS_PATH, "status": "503"}
    counted = REGISTRY.get_sample_value("agentmesh_http_requests_total", labels) or 0.0

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    for rid in ("rid-one", "rid.two:2"):
        scope = {
            "type": "http",
            "method": "POST",
            "path": RUNS_PATH,
            "headers": [(b"x-request-id", rid.encode())],
        }
        await door(scope, receive, send)
    token = request_id_var.set("rid-one")
    try:
        expected = overloaded(in_flight.refused(Bound.PROCESS)).body()
    finally:
        request_id_var.reset(token)
    start, body, _, second = sent
    assert start["status"] == 503
    headers = dict(start["headers"])
    assert headers[b"retry-after"] == b"1" and headers[b"x-request-id"] == b"rid-one"
    assert headers[b"content-type"] == b"application/json"
    assert int(headers[b"content-length"]) == len(body["body"])
    assert json.loads(body["body"]) == expected
    assert json.loads(second["body"])["error"]["requestId"] == "rid.two:2"
    # Each refusal is in the gateway's request metrics, as any answer is.
    assert REGISTRY.get_sample_value("agentmesh_http_requests_total", labels) == counted + 2
