"""A chat run through the real suite: SSE stream, history, owner scoping, AG-UI conformance."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import EventType
from ag_ui.core.events import Event
from pydantic import TypeAdapter

from services.launcher import Suite
from tests.e2e.conftest import parse_sse, run_body, token

ROOT = Path(__file__).resolve().parents[2]
EVENT = TypeAdapter(Event)
EXPECTED_ORDER = [
    "RUN_STARTED",
    "STEP_STARTED",
    "STEP_FINISHED",
    "STEP_STARTED",
    "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_CONTENT",
    "TEXT_MESSAGE_END",
    "STEP_FINISHED",
    "RUN_FINISHED",
]


def _ids() -> tuple[str, str]:
    return f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"


def _run(
    suite: Suite, owner: str, thread_id: str, run_id: str, text: str, **extra: Any
) -> tuple[httpx.Response, list[dict[str, Any]]]:
    resp = httpx.post(
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=run_body(thread_id, run_id, text, **extra),
        headers={"Authorization": f"Bearer {token(owner)}"},
        timeout=30,
    )
    events = parse_sse(resp.content) if resp.status_code == 200 else []
    return resp, events


def _collapse(types: list[str]) -> list[str]:
    """Collapse runs of TEXT_MESSAGE_CONTENT into one entry."""
    out: list[str] = []
    for t in types:
        if t == "TEXT_MESSAGE_CONTENT" and out and out[-1] == t:
            continue
        out.append(t)
    return out


def _no_nulls(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, dict):
        return all(_no_nulls(v) for v in value.values())
    if isinstance(value, list):
        return all(_no_nulls(v) for v in value)
    return True


def test_chat_run_streams_the_agui_events_in_order(suite: Suite) -> None:
    thread_id, run_id = _ids()
    resp, events = _run(
        suite,
        "alice",
        thread_id,
        run_id,
        "Hello agentmesh",
        protocolVersion="1.0",
        tools=[],
        context=[{"description": "page", "value": "home"}],
        state={"k": 1},
        forwardedProps={"x": True},
        resume=[],
    )
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/event-stream")
    types = [e["type"] for e in events]
    assert _collapse(types) == EXPECTED_ORDER
    assert types.count("TEXT_MESSAGE_CONTENT") >= 1
    steps = [e["stepName"] for e in events if e["type"] in ("STEP_STARTED", "STEP_FINISHED")]
    assert steps == ["router", "router", "worker", "worker"]
    assert events[0]["threadId"] == thread_id and events[0]["runId"] == run_id
    for event in events:
        assert _no_nulls(event), event
        assert EVENT.validate_python(event).type == EventType(event["type"])
    reply = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "Hello agentmesh" in reply


def test_the_run_record_shows_the_usage_run_finished_reported(suite: Suite) -> None:
    thread_id, run_id = _ids()
    resp, events = _run(suite, "carol", thread_id, run_id, "Count my tokens please")
    assert resp.status_code == 200, resp.text
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED"
    [usage] = finished["usage"]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
    assert "estimated" not in usage  # the scripted model reports its usage
    url = f"{suite.gateway_url}/api/v1/agent/runs/{run_id}"
    record = httpx.get(url, headers={"Authorization": f"Bearer {token('carol')}"}, timeout=10)
    assert record.status_code == 200, record.text
    assert record.json()["state"] == "succeeded"
    assert record.json()["usage"] == finished["usage"]
    other = httpx.get(url, headers={"Authorization": f"Bearer {token('mallory')}"}, timeout=10)
    assert other.status_code == 404 and "usage" not in other.text


def test_history_returns_the_turn_only_to_its_owner(suite: Suite) -> None:
    thread_id, run_id = _ids()
    resp, events = _run(suite, "bob", thread_id, run_id, "Remember the blue door")
    assert resp.status_code == 200
    reply = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    url = f"{suite.gateway_url}/api/v1/agent/threads/{thread_id}/history"

    own = httpx.get(url, headers={"Authorization": f"Bearer {token('bob')}"}, timeout=10)
    assert own.status_code == 200, own.text
    messages = own.json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert _text(messages[0]) == "Remember the blue door"
    assert _text(messages[1]) == reply

    other = httpx.get(url, headers={"Authorization": f"Bearer {token('mallory')}"}, timeout=10)
    assert other.status_code == 404
    # Indistinguishable from a thread that does not exist at all.
    missing_id = f"t-{uuid.uuid4().hex[:8]}"
    missing = httpx.get(
        f"{suite.gateway_url}/api/v1/agent/threads/{missing_id}/history",
        headers={"Authorization": f"Bearer {token('mallory')}"},
        timeout=10,
    )
    assert missing.status_code == 404
    assert _error_shape(other, thread_id) == _error_shape(missing, missing_id)
    anonymous = httpx.get(url, timeout=10)
    assert anonymous.status_code == 401


def _error_shape(resp: httpx.Response, requested_id: str) -> dict[str, Any]:
    """The error body with the id the caller sent and the request id masked."""
    error: dict[str, Any] = json.loads(resp.text.replace(requested_id, "<id>"))["error"]
    error.pop("requestId", None)
    return error


def _text(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def test_second_turn_sees_the_first_in_its_context(suite: Suite) -> None:
    thread_id, run_id = _ids()
    _run(suite, "carol", thread_id, run_id, "first")
    _, events = _run(suite, "carol", thread_id, f"{run_id}-2", "second")
    reply = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "turn 2" in reply


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", None),
        (
            json.dumps(
                {"runId": "r", "messages": [{"id": "m", "role": "user", "content": "x"}]}
            ).encode(),
            "threadId",
        ),
        (
            json.dumps(
                {"threadId": "t", "messages": [{"id": "m", "role": "user", "content": "x"}]}
            ).encode(),
            "runId",
        ),
        (json.dumps({"threadId": "t", "runId": "r"}).encode(), "messages"),
        (
            json.dumps(
                {
                    "threadId": "t",
                    "runId": "r",
                    "messages": [{"id": "m", "role": "user", "content": ""}],
                }
            ).encode(),
            "messages",
        ),
    ],
)
def test_bad_run_input_is_a_4xx_json_error(suite: Suite, body: bytes, field: str | None) -> None:
    resp = httpx.post(
        f"{suite.gateway_url}/api/v1/agent/runs",
        content=body,
        headers={"Authorization": f"Bearer {token('dave')}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert 400 <= resp.status_code < 500
    error = resp.json()["error"]
    assert error["message"]
    assert "Traceback" not in resp.text
    if field is not None:
        assert field in json.dumps(error)


def test_unknown_route_is_a_json_404(suite: Suite) -> None:
    resp = httpx.get(f"{suite.gateway_url}/api/v1/nope", timeout=10)
    assert resp.status_code == 404
    assert resp.json()["error"]["code"]


def test_health_endpoints(suite: Suite) -> None:
    assert httpx.get(f"{suite.gateway_url}/healthz", timeout=5).status_code == 200
    assert httpx.get(f"{suite.gateway_url}/readyz", timeout=5).status_code == 200
    assert httpx.get(f"{suite.gateway_url}/openapi.json", timeout=5).status_code == 200


def test_agui_http_agent_consumes_the_stream(suite: Suite) -> None:
    node = shutil.which("node")
    assert node is not None, "Node.js is needed for the @ag-ui/client conformance check"
    thread_id, run_id = _ids()
    result = subprocess.run(
        [
            node,
            str(ROOT / "tests" / "gateway" / "agui_client_check.mjs"),
            f"{suite.gateway_url}/api/v1/agent/runs",
            token("erin"),
            thread_id,
            run_id,
            "Hello from HttpAgent",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["ok"] is True
    assert "RUN_FINISHED" in seen["eventTypes"] and "TEXT_MESSAGE_CONTENT" in seen["eventTypes"]
    assert seen["stepNames"] == ["router", "worker"]
    assert "Hello from HttpAgent" in seen["text"]
