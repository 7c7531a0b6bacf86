"""POST /api/v1/agent/runs against a scripted orchestrator: status, headers, frames, order."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from services.gateway.app import create_app
from services.gateway.clients import open_clients
from services.launcher import free_port
from shared.settings import Settings
from tests.gateway.conftest import Peers, gateway_settings, run_body, serve_app
from tests.gateway.sse_client import parse_frames, parse_sequenced, post_run

CHAT_ORDER = [
    "RUN_STARTED",
    "STEP_STARTED",
    "STEP_FINISHED",
    "STEP_STARTED",
    "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_CONTENT",
    "TEXT_MESSAGE_CONTENT",
    "TEXT_MESSAGE_END",
    "STEP_FINISHED",
    "RUN_FINISHED",
]


def _no_null(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, dict):
        return all(_no_null(v) for v in value.values())
    if isinstance(value, list):
        return all(_no_null(v) for v in value)
    return True


async def test_chat_run_streams_the_documented_event_order(
    http: httpx.AsyncClient,
    auth: dict[str, str],
) -> None:
    resp, raw = await post_run(http, run_body(), auth)
    assert resp.status_code == 200
    events = parse_frames(raw)
    assert [e["type"] for e in events] == CHAT_ORDER
    steps = [e["stepName"] for e in events if e["type"].startswith("STEP_")]
    assert steps == ["router", "router", "worker", "worker"]
    assert events[0] == {
        "type": "RUN_STARTED",
        "threadId": "t-1",
        "runId": "r-1",
        "timestamp": events[0]["timestamp"],
    }
    assert events[-1]["outcome"] == {"type": "success"}


async def test_stream_frames_are_lf_only_data_lines_without_null(
    http: httpx.AsyncClient,
    auth: dict[str, str],
) -> None:
    _, raw = await post_run(http, run_body(thread_id="tools-1"), auth)
    events = parse_frames(raw)  # asserts the exact frame format
    assert all(_no_null(e) for e in events)
    assert '"threadId"' in raw.decode() and "thread_id" not in raw.decode()


async def test_stream_response_headers(http: httpx.AsyncClient, auth: dict[str, str]) -> None:
    resp, _ = await post_run(http, run_body(), auth)
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["cache-control"] == "no-cache"
    assert resp.headers["x-accel-buffering"] == "no"
    assert resp.headers["x-request-id"]


async def test_empty_text_delta_is_not_sent(http: httpx.AsyncClient, auth: dict[str, str]) -> None:
    _, raw = await post_run(http, run_body(), auth)
    deltas = [e["delta"] for e in parse_frames(raw) if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert deltas == ["Hello", ", Lin.\nBye"]


async def test_orchestrator_down_gives_503_json_within_deadline(
    base_settings: Settings,
    peers: Peers,
    auth: dict[str, str],
) -> None:
    addrs = {**peers.addrs, "orchestrator": f"127.0.0.1:{free_port()}"}
    s = gateway_settings(base_settings, addrs)
    clients = open_clients(s)
    try:
        async with serve_app(create_app(s, clients)) as url, httpx.AsyncClient(base_url=url) as c:
            started = time.monotonic()
            resp = await c.post("/api/v1/agent/runs", json=run_body(), headers=auth)
            elapsed = time.monotonic() - started
    finally:
        await clients.close()
    assert resp.status_code == 503
    assert resp.headers["content-type"] == "application/json"
    assert resp.json()["error"]["code"] == "UNAVAILABLE"
    assert elapsed < s.rpc_timeout_seconds + 1


async def test_orchestrator_that_never_answers_gives_504(
    base_settings: Settings,
    peers: Peers,
    auth: dict[str, str],
) -> None:
    s = gateway_settings(base_settings, peers.addrs, rpc_timeout_seconds=0.5)
    clients = open_clients(s)
    try:
        async with serve_app(create_app(s, clients)) as url, httpx.AsyncClient(base_url=url) as c:
            resp = await c.post(
                "/api/v1/agent/runs", json=run_body(thread_id="silent-1"), headers=auth
            )
    finally:
        await clients.close()
    # Not a bare 504: the run may still be starting, so the answer names it and says the
    # one safe retry (the same runId).
    assert resp.status_code == 504
    error = resp.json()["error"]
    assert error["code"] == "OUTCOME_UNKNOWN" and error["runId"] == "r-1"
    assert "same runId" in error["message"]


async def test_a_run_that_started_but_whose_first_event_was_late_is_streamed_not_504(
    base_settings: Settings,
    peers: Peers,
    auth: dict[str, str],
) -> None:
    s = gateway_settings(base_settings, peers.addrs, rpc_timeout_seconds=0.5)
    clients = open_clients(s)
    try:
        async with serve_app(create_app(s, clients)) as url, httpx.AsyncClient(base_url=url) as c:
            resp, raw = await post_run(
                c, run_body(thread_id="silent-started", run_id="started-1"), auth
            )
    finally:
        await clients.close()
    assert resp.status_code == 200
    events = parse_frames(raw)
    assert [e["type"] for e in events] == CHAT_ORDER
    assert events[0]["runId"] == "started-1"


async def test_run_rejected_by_orchestrator_gives_400_naming_the_field(
    http: httpx.AsyncClient,
    auth: dict[str, str],
) -> None:
    resp = await http.post("/api/v1/agent/runs", json=run_body(thread_id="reject-1"), headers=auth)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT"
    assert error["details"][0]["field"] == "threadId"


async def test_run_refused_by_a_precondition_gives_409(
    http: httpx.AsyncClient,
    auth: dict[str, str],
) -> None:
    resp = await http.post(
        "/api/v1/agent/runs", json=run_body(thread_id="conflict-1"), headers=auth
    )
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "FAILED_PRECONDITION"


async def test_failure_mid_stream_sends_one_run_error_and_ends(
    http: httpx.AsyncClient,
    auth: dict[str, str],
) -> None:
    resp, raw = await post_run(http, run_body(thread_id="fail-mid-1"), auth)
    assert resp.status_code == 200
    events = parse_frames(raw)
    assert [e["type"] for e in events] == [*CHAT_ORDER[:5], "RUN_ERROR"]
    # The run started: a lost stream is not its failure (a client told "retry" would run
    # it twice); the client is sent to the run's record.
    assert events[-1]["code"] == "OUTCOME_UNKNOWN"
    assert "GET /api/v1/agent/runs/r-1" in events[-1]["message"]


async def test_nothing_is_sent_after_run_error(
    http: httpx.AsyncClient,
    auth: dict[str, str],
) -> None:
    _, raw = await post_run(http, run_body(thread_id="error-1"), auth)
    events = parse_frames(raw)
    assert [e["type"] for e in events] == ["RUN_STARTED", "STEP_STARTED", "RUN_ERROR"]
    assert events[-1]["code"] == "MODEL_ERROR"


async def test_nothing_is_sent_after_run_finished(
    http: httpx.AsyncClient,
    auth: dict[str, str],
) -> None:
    _, raw = await post_run(http, run_body(thread_id="after-end-1"), auth)
    assert [e["type"] for e in parse_frames(raw)] == CHAT_ORDER


async def test_batched_events_stream_as_frames_in_order_and_stop_at_the_end(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    peers: Peers,
) -> None:
    single = parse_sequenced((await post_run(http, run_body(thread_id="t-1"), auth))[1])
    batched = parse_sequenced((await post_run(http, run_body(thread_id="batch-1"), auth))[1])
    assert peers.orchestrator.calls[-1].request.batch_events  # the gateway asks for batches
    assert [(seq, e["type"]) for seq, e in batched] == [(seq, e["type"]) for seq, e in single]
    assert len(batched) == len(CHAT_ORDER)
    # RUN_FINISHED followed by another event in the same batch: nothing after the end.
    _, raw = await post_run(http, run_body(thread_id="batch-after-end-1"), auth)
    assert [e["type"] for e in parse_frames(raw)] == CHAT_ORDER


async def test_an_orchestrator_that_stops_before_answering_gives_503_to_retry(
    http: httpx.AsyncClient,
    auth: dict[str, str],
) -> None:
    resp, raw = await post_run(http, run_body(thread_id="stopped-1"), auth)
    assert resp.status_code == 503
    error = json.loads(raw)["error"]
    assert error["code"] == "UNAVAILABLE" and "retry" in error["message"]


async def test_stream_ending_without_terminal_event_ends_with_run_error(
    http: httpx.AsyncClient,
    auth: dict[str, str],
) -> None:
    _, raw = await post_run(http, run_body(thread_id="no-end-1"), auth)
    events = parse_frames(raw)
    assert [e["type"] for e in events] == [*CHAT_ORDER[:-1], "RUN_ERROR"]
    assert events[-1]["code"] == "INTERNAL"


async def test_run_without_any_event_gives_502(
    http: httpx.AsyncClient,
    auth: dict[str, str],
) -> None:
    resp = await http.post("/api/v1/agent/runs", json=run_body(thread_id="eof-1"), headers=auth)
    assert resp.status_code == 502
    assert resp.json()["error"]["message"]
