"""Idle connections: the suite answers the first call after minutes without traffic.

Every client channel pings its server while idle (keepalive); a server that counts those
pings as abuse answers GOAWAY too_many_pings after a few of them, and the next call fails.
With the default ping period (30 s) and gRPC's default of two strikes, that happened about
two minutes after the last call (the connection then drops: a call racing the GOAWAY fails
with 503, and /readyz answered "not SERVING"). The test idles for three minutes with the
production keepalive settings (the e2e suite does not override them), then asserts that the
next calls succeed and that no connection was dropped for pinging: which of the next calls
happens to race a GOAWAY is luck, the GOAWAY itself (logged by gRPC in the client's process)
is not. Slow by necessity: one test.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from services.launcher import ALL_SERVICES, Suite
from tests.conftest import USES_POSTGRES, drop_schemas
from tests.e2e.conftest import _dump_logs, make_suite, parse_sse, run_body, serves_runs, token

pytestmark = pytest.mark.e2e

# Longer than three client pings plus the server's strikes allowance: where the old settings
# failed after about 90-120 s.
IDLE_SECONDS = 180


@pytest.fixture(scope="module")
def quiet_suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    """A suite of its own: no other test's jobs or runs make traffic while it idles."""
    tmp = tmp_path_factory.mktemp("idle")
    prefix = f"i{uuid.uuid4().hex[:10]}_"
    s = make_suite(tmp, prefix)
    try:
        s.start(timeout=90)
        serves_runs(s.gateway_url, in_a_row=1, within=60)
    except RuntimeError:
        s.stop()
        _dump_logs(tmp / "logs")
        raise
    yield s
    s.stop()
    if USES_POSTGRES:
        asyncio.run(drop_schemas(prefix))


def _chat_run(suite: Suite) -> tuple[int, list[dict[str, object]], str]:
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    resp = httpx.post(
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=run_body(f"t-{run_id}", run_id, "still there?"),
        headers={"Authorization": f"Bearer {token('idler')}"},
        timeout=30,
    )
    events = parse_sse(resp.content) if resp.status_code == 200 else []
    return resp.status_code, events, resp.text


def _log_sizes(suite: Suite) -> dict[str, int]:
    return {name: suite.log_path(name).stat().st_size for name in ALL_SERVICES}


def _logged_since(suite: Suite, name: str, offset: int) -> str:
    with suite.log_path(name).open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def test_the_first_run_after_minutes_idle_succeeds_and_every_service_stays_ready(
    quiet_suite: Suite,
) -> None:
    suite = quiet_suite
    status, events, text = _chat_run(suite)
    assert status == 200 and events[-1]["type"] == "RUN_FINISHED", text
    offsets = _log_sizes(suite)

    time.sleep(IDLE_SECONDS)

    ready = httpx.get(f"{suite.gateway_url}/readyz", timeout=10)
    assert ready.status_code == 200, ready.text
    assert ready.json()["status"] == "ready"
    status, events, text = _chat_run(suite)
    assert status == 200, text
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    dropped = {
        name: [line for line in lines.splitlines() if "too_many_pings" in line][:1]
        for name in ALL_SERVICES
        if "too_many_pings" in (lines := _logged_since(suite, name, offsets[name]))
    }
    assert not dropped, f"connections dropped with GOAWAY too_many_pings: {dropped}"
