"""Starting, stopping and losing services: clean shutdown, nothing stored is lost, 503 when down."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import httpx

from services.launcher import Suite
from tests.conftest import USES_POSTGRES, drop_schemas
from tests.e2e.conftest import make_suite, parse_sse, run_body, token


def _post_run(
    suite: Suite, owner: str, thread_id: str, run_id: str, text: str, timeout: float = 30
) -> httpx.Response:
    return httpx.post(
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=run_body(thread_id, run_id, text),
        headers={"Authorization": f"Bearer {token(owner)}"},
        timeout=timeout,
    )


def _history(suite: Suite, owner: str, thread_id: str) -> list[dict[str, object]]:
    resp = httpx.get(
        f"{suite.gateway_url}/api/v1/agent/threads/{thread_id}/history",
        headers={"Authorization": f"Bearer {token(owner)}"},
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    messages: list[dict[str, object]] = resp.json()["messages"]
    return messages


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_sigterm_stops_every_process_and_a_restart_keeps_the_data(tmp_path: Path) -> None:
    prefix = f"e{uuid.uuid4().hex[:10]}_"
    suite = make_suite(tmp_path, prefix)
    try:
        suite.start(timeout=90)
        thread_id = f"t-{uuid.uuid4().hex[:8]}"
        resp = _post_run(suite, "frank", thread_id, f"r-{uuid.uuid4().hex[:8]}", "keep me")
        assert resp.status_code == 200
        assert parse_sse(resp.content)[-1]["type"] == "RUN_FINISHED"
        pids = [p.pid for p in suite.procs.values()]

        started = time.monotonic()
        codes = suite.stop(grace=20)
        assert time.monotonic() - started < 20
        assert all(code == 0 for code in codes.values()), codes
        assert not any(_alive(pid) for pid in pids)

        # Same data folder / schemas, fresh processes: the turn is still there.
        again = make_suite(tmp_path, prefix)
        again.start(timeout=90)
        try:
            messages = _history(again, "frank", thread_id)
            assert len(messages) == 2
        finally:
            again.stop()
    finally:
        suite.stop()
        if USES_POSTGRES:
            asyncio.run(drop_schemas(prefix))


def test_orchestrator_down_gives_503_and_loses_nothing(tmp_path: Path) -> None:
    prefix = f"e{uuid.uuid4().hex[:10]}_"
    suite = make_suite(tmp_path, prefix, shape="split")
    try:
        suite.start(timeout=90)
        thread_id = f"t-{uuid.uuid4().hex[:8]}"
        assert (
            _post_run(
                suite, "grace", thread_id, f"r-{uuid.uuid4().hex[:8]}", "before the outage"
            ).status_code
            == 200
        )

        suite.stop_service("orchestrator")
        started = time.monotonic()
        resp = _post_run(
            suite, "grace", thread_id, f"r-{uuid.uuid4().hex[:8]}", "during the outage"
        )
        assert resp.status_code == 503, resp.text
        assert resp.json()["error"]["code"]
        assert time.monotonic() - started < 10
        ready = httpx.get(f"{suite.gateway_url}/readyz", timeout=10)
        assert ready.status_code == 503

        assert len(_history(suite, "grace", thread_id)) == 2
    finally:
        suite.stop()
        if USES_POSTGRES:
            asyncio.run(drop_schemas(prefix))
