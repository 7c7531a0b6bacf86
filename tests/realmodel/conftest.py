"""The real-model tier: the local model server (llama-cpp-python serving SmolLM2-135M,
services.launcher.LocalModelServer) and the suite's real processes pointed at it.

Every test module here is marked `realmodel` (pytest leaves them out unless asked with
`-m realmodel`, as `make test-realmodel` does). Nothing is skipped: a missing model server
is a failure that says to run `make model-server`. The assertions hold for any competent
model: event shapes, what is stored, budgets, error codes; never wording (SmolLM2-135M is
weak)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from services.launcher import MODEL_VENV, LocalModelServer, Suite, free_port, local_gguf
from tests.e2e.conftest import _dump_logs, make_suite, parse_sse, run_body, token


@pytest.fixture(scope="session")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalModelServer]:
    try:
        local_gguf(MODEL_VENV)
    except RuntimeError as err:
        pytest.fail(f"{err}: the real-model tier needs the local model server", pytrace=False)
    tmp = tmp_path_factory.mktemp("model")
    server = LocalModelServer(free_port(), log_path=tmp / "model-server.log")
    try:
        server.start(timeout=180)
    except RuntimeError:
        print((tmp / "model-server.log").read_text()[-4000:])
        raise
    yield server
    server.stop()


@pytest.fixture(scope="session")
def suite(
    tmp_path_factory: pytest.TempPathFactory, model_server: LocalModelServer
) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("suite")
    prefix = f"m{uuid.uuid4().hex[:10]}_"
    s = make_suite(
        tmp,
        prefix,
        **model_server.env(),
        AGENTMESH_RPC_TIMEOUT_SECONDS="10",
        AGENTMESH_RUN_TIMEOUT_SECONDS="240",
    )
    try:
        s.start(timeout=90)
    except RuntimeError:
        s.stop()
        _dump_logs(tmp / "logs")
        raise
    yield s
    s.stop()


def auth(owner: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(owner)}"}


def new_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:10]}"


def chat(suite: Suite, owner: str, thread_id: str, text: str, **extra: Any) -> list[dict[str, Any]]:
    """One chat run through the gateway, read to its end; the SSE events."""
    resp = httpx.post(
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=run_body(thread_id, new_id("r"), text, **extra),
        headers=auth(owner),
        timeout=300,
    )
    assert resp.status_code == 200, resp.text
    events = parse_sse(resp.content)
    assert events[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR"), events[-1]
    return events


def streamed_text(events: list[dict[str, Any]]) -> str:
    return "".join(str(e["delta"]) for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def history(suite: Suite, owner: str, thread_id: str) -> list[dict[str, Any]]:
    resp = httpx.get(
        f"{suite.gateway_url}/api/v1/agent/threads/{thread_id}/history",
        params={"page_size": 200},
        headers=auth(owner),
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    return list(resp.json()["messages"])


def assert_well_formed(events: list[dict[str, Any]]) -> None:
    """The stream's shape: RUN_STARTED first, one terminal event last, every text message
    opened before its content and closed after it, no empty delta."""
    types = [e["type"] for e in events]
    assert types[0] == "RUN_STARTED"
    assert sum(t in ("RUN_FINISHED", "RUN_ERROR") for t in types) == 1
    open_ids: set[str] = set()
    for e in events:
        if e["type"] == "TEXT_MESSAGE_START":
            open_ids.add(str(e["messageId"]))
        elif e["type"] == "TEXT_MESSAGE_CONTENT":
            assert e["messageId"] in open_ids and e["delta"], json.dumps(e)
        elif e["type"] == "TEXT_MESSAGE_END":
            open_ids.discard(str(e["messageId"]))
