"""Any set of services in one process: a suite with orchestrator, router and executor
hosted together (their calls in process), every other service a process of its own."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest

from services.launcher import Suite
from tests.conftest import USES_POSTGRES, drop_schemas
from tests.e2e.conftest import _dump_logs, make_suite, parse_sse, run_body, token

pytestmark = pytest.mark.e2e

CORE = "orchestrator,router,executor"
# Its process, as `procs` names it: the group in start order.
GROUP = "router,executor,orchestrator"


def _run(suite: Suite, owner: str, text: str) -> httpx.Response:
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    return httpx.post(
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=run_body(f"t-{run_id}", run_id, text),
        headers={"Authorization": f"Bearer {token(owner)}"},
        timeout=30,
    )


def test_a_grouped_process_serves_runs_beside_single_service_processes(tmp_path: Path) -> None:
    prefix = f"g{uuid.uuid4().hex[:10]}_"
    suite = make_suite(tmp_path, prefix, shape=CORE)
    assert suite.groups[GROUP] == ("router", "executor", "orchestrator")
    assert {k for k, v in suite.groups.items() if len(v) == 1} == {
        "history", "memory", "scheduler", "gateway"
    }  # fmt: skip
    try:
        suite.start(timeout=90)
        resp = _run(suite, "gina", "grouped hello")
        assert resp.status_code == 200, resp.text
        events = parse_sse(resp.content)
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
        text = "".join(
            str(e.get("delta", "")) for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"
        )
        assert "grouped hello" in text
        # The router and executor answer their health on their own ports (for callers in
        # other processes), served by the grouped process.
        for name in ("router", "executor", "orchestrator"):
            assert suite.is_ready(name), name

        # Stopping the group stops all three: the gateway says so, and nothing else stops.
        assert suite.stop_service("executor") == 0
        ready = httpx.get(f"{suite.gateway_url}/readyz", timeout=10)
        assert ready.status_code == 503
        assert "orchestrator" in ready.text
        for name in ("history", "memory", "scheduler", "gateway"):
            assert suite.procs[name].poll() is None, name
    except BaseException:
        _dump_logs(tmp_path / "logs")
        raise
    finally:
        suite.stop()
        if USES_POSTGRES:
            asyncio.run(drop_schemas(prefix))


def test_a_shape_naming_an_unknown_service_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown service 'routr'"):
        make_suite(tmp_path, "x_", shape="orchestrator,routr")
