"""A restarted peer is used again at once (issue 17): history, the router and the executor,
each the only replica of its service, are restarted (SIGTERM, then started again) under a
steady trickle of chat runs. Their steps are idempotent (history's writes carry the run's
ids, the router only decides, an executor step is tried again only while it produced
nothing), so no run fails: the orchestrator's calls ride out the restart and go to the new
process as soon as it listens (channel reconnect backoff and retry budget tuned together,
shared/clients.py and services/orchestrator/clients.py).

Prints, per restart, the runs that failed (started while the peer was down / after it was
SERVING again) and how long after the new process listened it served its first run call.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from services.launcher import Suite
from tests.conftest import USES_POSTGRES, drop_schemas
from tests.e2e.conftest import _dump_logs, make_suite, run_body, serves_runs, token
from tests.e2e.test_resilience import frames

RESTARTED = ("history", "router", "executor")
# Runs at once in the trickle (each starts the next as soon as it ends).
CLIENTS = 2
# How long the trickle goes on after a restarted peer is SERVING again.
AFTER_SECONDS = 3.0
# "Used again within": from the new process's "serving" to the first run call it served.
USED_AGAIN_SECONDS = 0.5


@dataclass
class Run:
    started: float
    ended: float
    ok: bool
    what: str


@pytest.fixture(scope="module")
def lone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("reconnect")
    prefix = f"c{uuid.uuid4().hex[:10]}_"
    suite = make_suite(tmp, prefix, shape="split", AGENTMESH_RPC_TIMEOUT_SECONDS="5")
    try:
        suite.start(timeout=90)
        serves_runs(suite.gateway_url, in_a_row=2, within=60)
    except RuntimeError:
        suite.stop()
        _dump_logs(tmp / "logs")
        raise
    yield suite
    suite.stop()
    if USES_POSTGRES:
        asyncio.run(drop_schemas(prefix))


async def _one(client: httpx.AsyncClient, gw: str) -> Run:
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    resp = await client.post(
        f"{gw}/api/v1/agent/runs",
        json=run_body(f"t-{run_id}", run_id, "hello"),
        headers={"Authorization": f"Bearer {token('reconnect')}"},
    )
    ended = time.monotonic()
    if resp.status_code != 200:
        return Run(started, ended, False, f"{run_id}: HTTP {resp.status_code} {resp.text[:120]}")
    last = [e for _, e in frames(resp.content)][-1]
    if last["type"] != "RUN_FINISHED":
        return Run(started, ended, False, f"{run_id}: {last.get('code')}: {last.get('message')}")
    return Run(started, ended, True, "")


async def _trickle(client: httpx.AsyncClient, gw: str, stop: asyncio.Event, out: list[Run]) -> None:
    while not stop.is_set():
        out.append(await _one(client, gw))


# The calls of a run that each restarted service serves.
SERVED = {"history": "BeginRun", "router": "Route", "executor": "Execute"}


def _restart(suite: Suite, name: str) -> tuple[float, float, int]:
    """SIGTERM `name`, start it again (logging every call it serves), wait until SERVING:
    (stopped at, serving at, the log offset where the new process begins)."""
    assert suite.log_dir is not None
    stopped = time.monotonic()
    suite.stop_service(name, grace=30)
    offset = (suite.log_dir / f"{name}.log").stat().st_size
    suite.env["AGENTMESH_LOG_LEVEL"] = "DEBUG"
    try:
        suite.start_service(name)
    finally:
        suite.env["AGENTMESH_LOG_LEVEL"] = "INFO"
    suite.wait_ready(name, time.monotonic() + 60)
    return stopped, time.monotonic(), offset


def _first_call_after_serving(suite: Suite, name: str, offset: int) -> float | None:
    """Seconds from the new process's "serving" line to the first run call it served, by
    its own log's clock (what the callers' reconnect took, whatever the launcher saw)."""
    assert suite.log_dir is not None
    with (suite.log_dir / f"{name}.log").open("rb") as f:
        f.seek(offset)
        lines = f.read().splitlines()
    serving = None
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("msg") == "serving":
            serving = float(entry["ts"])
        elif (
            serving is not None
            and entry.get("msg") == "rpc"
            and str(entry.get("method", "")).endswith(f"/{SERVED[name]}")
            and entry.get("code") == "OK"
        ):
            # The access line is written when the call ends: take its start.
            return float(entry["ts"]) - float(entry.get("ms", 0)) / 1000 - serving
    return None


async def test_restarted_peers_fail_no_run_and_are_used_again_at_once(
    lone: Suite, tmp_path: Path
) -> None:
    runs: list[Run] = []
    stop = asyncio.Event()
    windows: dict[str, tuple[float, float, int]] = {}
    async with httpx.AsyncClient(timeout=60) as client:
        load = [
            asyncio.create_task(_trickle(client, lone.gateway_url, stop, runs))
            for _ in range(CLIENTS)
        ]
        try:
            await asyncio.sleep(AFTER_SECONDS)
            for name in RESTARTED:
                windows[name] = await asyncio.to_thread(_restart, lone, name)
                await asyncio.sleep(AFTER_SECONDS)
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*load), 60)
    report = []
    stops = [stopped for stopped, _, _ in windows.values()] + [float("inf")]
    for i, (name, (stopped, serving, offset)) in enumerate(windows.items()):
        # A run belongs to the restart during which it ended (one that ended during the
        # next restart, which it overlapped, belongs to that one).
        around = [r for r in runs if stopped <= r.ended < stops[i + 1]]
        # Started while the peer was down (the only replica: these may fail once their
        # retry budget is spent) / started once it was SERVING again (none may fail).
        while_down = [r for r in around if r.started < serving]
        after = [r for r in around if r.started >= serving]
        report.append(
            Restart(
                name,
                serving - stopped,
                [r for r in while_down if not r.ok],
                len(while_down),
                [r for r in after if not r.ok],
                len(after),
                _first_call_after_serving(lone, name, offset),
            )
        )
    for r in report:
        print(r.line())
        for failure in r.failed_after[:3]:
            print(f"    failed after SERVING: {failure.what}")
    for r in report:
        assert r.runs_after > 0, r.name
        assert not r.failed_after, (r.name, [f.what for f in r.failed_after[:3]])
        assert r.used_after is not None and r.used_after < USED_AGAIN_SECONDS, r.line()


@dataclass
class Restart:
    name: str
    down: float
    failed_down: list[Run]
    runs_down: int
    failed_after: list[Run]
    runs_after: int
    used_after: float | None

    def line(self) -> str:
        used = "never" if self.used_after is None else f"{self.used_after:.2f} s"
        return (
            f"{self.name}: down {self.down:.1f} s; started while down: {len(self.failed_down)} "
            f"of {self.runs_down} failed; started after SERVING: {len(self.failed_after)} of "
            f"{self.runs_after} failed; the new process served its first run {used} after it "
            "listened"
        )
