"""Truthful outcomes when the run event log (Redis) is lost, with the real processes and a
Redis of this module's own (started on a free port and stopped mid-run): a run that goes on
without its stream is reported pending (RUN_ERROR OUTCOME_UNKNOWN) and its record then shows
its real end; a run that could not start is refused with a retryable error, nothing stored.
Only the PostgreSQL backend has Redis (the embedded event log is in the orchestrator's
memory and is lost only with it, covered in test_resilience.py)."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from services.launcher import Suite, free_port
from tests.conftest import USES_POSTGRES, drop_schemas
from tests.e2e.conftest import _dump_logs, make_suite, run_body, serves_runs, token
from tests.e2e.test_resilience import _start_redis, frames

SLOW = " ".join(f"word{i}" for i in range(60))  # about 3 s at 0.05 s a token

pytestmark = pytest.mark.skipif(not USES_POSTGRES, reason="only the PostgreSQL backend has Redis")


@dataclass
class WithRedis:
    suite: Suite
    port: int
    redis: subprocess.Popen[bytes]


@pytest.fixture(scope="module")
def with_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WithRedis]:
    tmp = tmp_path_factory.mktemp("outcomes")
    prefix = f"o{uuid.uuid4().hex[:10]}_"
    port = free_port()
    env = {
        "AGENTMESH_EVENT_LOG_URL": f"redis://127.0.0.1:{port}/0",
        "AGENTMESH_SCRIPTED_TOKEN_LATENCY": "0.05",
    }
    state = WithRedis(make_suite(tmp, prefix, **env), port, _start_redis(port))
    try:
        state.suite.start(timeout=90)
        serves_runs(state.suite.gateway_url, in_a_row=1, within=60)
    except RuntimeError:
        state.suite.stop()
        state.redis.kill()
        _dump_logs(tmp / "logs")
        raise
    yield state
    state.suite.stop()
    state.redis.kill()
    state.redis.wait()
    asyncio.run(drop_schemas(prefix))


def auth(owner: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(owner)}"}


async def test_a_run_whose_stream_is_lost_is_pending_then_its_record_shows_it_succeeded(
    with_redis: WithRedis,
) -> None:
    gw, owner = with_redis.suite.gateway_url, "outcome-lost"
    thread_id, run_id = f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(timeout=60) as client:
        try:
            async with client.stream(
                "POST",
                f"{gw}/api/v1/agent/runs",
                json=run_body(thread_id, run_id, SLOW),
                headers=auth(owner),
            ) as resp:
                assert resp.status_code == 200
                raw = b""
                async for chunk in resp.aiter_raw():
                    raw += chunk
                    if with_redis.redis.poll() is None and b"TEXT_MESSAGE_CONTENT" in raw:
                        with_redis.redis.terminate()  # the event log is lost mid-run
                        with_redis.redis.wait()
            events = [e for _, e in frames(raw)]
            record = (
                await client.get(f"{gw}/api/v1/agent/runs/{run_id}", headers=auth(owner))
            ).json()
            deadline = time.monotonic() + 30
            while record.get("state") in ("queued", "running") and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                record = (
                    await client.get(f"{gw}/api/v1/agent/runs/{run_id}", headers=auth(owner))
                ).json()
            history = await client.get(
                f"{gw}/api/v1/agent/threads/{thread_id}/history", headers=auth(owner)
            )
        finally:
            if with_redis.redis.poll() is not None:
                with_redis.redis = _start_redis(with_redis.port)
    last = events[-1]
    assert last["type"] == "RUN_ERROR" and last["code"] == "OUTCOME_UNKNOWN", last
    assert f"GET /api/v1/agent/runs/{run_id}" in last["message"]
    assert "retry later" not in last["message"]
    # The run went on: its record and its history show the real outcome.
    assert record["state"] == "succeeded", record
    assert [m["role"] for m in history.json()["messages"]] == ["user", "assistant"]


async def test_a_run_that_cannot_start_without_its_event_log_is_retryable_and_stores_nothing(
    with_redis: WithRedis,
) -> None:
    gw, owner = with_redis.suite.gateway_url, "outcome-refused"
    thread_id, run_id = f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    with_redis.redis.terminate()
    with_redis.redis.wait()
    async with httpx.AsyncClient(timeout=60) as client:
        try:
            refused = await client.post(
                f"{gw}/api/v1/agent/runs",
                json=run_body(thread_id, run_id, "hello"),
                headers=auth(owner),
            )
            record = await client.get(f"{gw}/api/v1/agent/runs/{run_id}", headers=auth(owner))
            thread = await client.get(
                f"{gw}/api/v1/agent/threads/{thread_id}/history", headers=auth(owner)
            )
        finally:
            with_redis.redis = _start_redis(with_redis.port)
        # The same request again, once the log is back: it runs (once).
        again = await client.post(
            f"{gw}/api/v1/agent/runs",
            json=run_body(thread_id, run_id, "hello"),
            headers=auth(owner),
        )
        history = await client.get(
            f"{gw}/api/v1/agent/threads/{thread_id}/history", headers=auth(owner)
        )
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "UNAVAILABLE"
    assert record.status_code == 404 and thread.status_code == 404  # nothing stored
    assert again.status_code == 200
    assert [e["type"] for _, e in frames(again.content)][-1] == "RUN_FINISHED"
    assert [m["role"] for m in history.json()["messages"]] == ["user", "assistant"]
