"""A lost database or event log (issue 17): every request that needs it answers 503 /
RUN_ERROR UNAVAILABLE (never 500 / INTERNAL), /readyz says within a few seconds which store
is lost, nothing is half-stored, and once the store is back everything recovers without a
restart of any service.

The faults are real: the suite runs on a PostgreSQL instance and a Redis server of this
module's own, on free ports, which the tests stop and start again (PostgreSQL with pg_ctl,
as the `postgres` user when the tests run as root, since PostgreSQL refuses to run as root).
The embedded backend has neither (SQLite files and an in-memory log live and die with their
service), so there they are skipped: the condition is the backend chosen, never whether a
store can be reached (the PostgreSQL pass, which CI always runs, runs them).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.launcher import Suite, free_port
from tests.conftest import USES_POSTGRES
from tests.e2e.conftest import _dump_logs, make_suite, run_body, serves_runs, token
from tests.e2e.test_resilience import _start_redis, check_agui, frames

# Each service checks its store this often (AGENTMESH_HEALTH_PROBE_SECONDS).
PROBE_SECONDS = 1.0
# What "within a few seconds" means here: probe interval, its timeout, the gateway's probe.
NOTICE_SECONDS = 6.0
DB_SERVICES = ("history", "memory", "scheduler")
# Runs at once before an outage and right after it.
CONCURRENT = 16


class Postgres:
    """A private PostgreSQL cluster in a temporary folder (trust auth, no fsync)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.bin = Path(sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1])
        self.dir = Path(tempfile.mkdtemp(prefix="agentmesh-pg-"))
        self.data = self.dir / "data"
        self._as: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self._as, str(self.bin / tool), *args],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -c fsync=off"
        self._run(
            "pg_ctl",
            "start",
            "-w",
            "-D",
            str(self.data),
            "-l",
            str(self.dir / "log"),
            "-o",
            options,
        )

    def stop(self) -> None:
        # Fast: every connection is cut at once, as when a database server goes down.
        self._run("pg_ctl", "stop", "-w", "-m", "fast", "-D", str(self.data))

    def remove(self) -> None:
        subprocess.run(
            [*self._as, str(self.bin / "pg_ctl"), "stop", "-m", "immediate", "-D", str(self.data)],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Outage:
    suite: Suite
    postgres: Postgres
    redis_port: int
    redis: subprocess.Popen[bytes]

    @property
    def gw(self) -> str:
        return self.suite.gateway_url

    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.suite.procs.items() if proc.poll() is None}


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outage]:
    if not USES_POSTGRES:
        pytest.skip("the embedded backend has no database server or Redis to lose")
    tmp = tmp_path_factory.mktemp("outage")
    postgres = Postgres(free_port())
    postgres.start()
    redis_port = free_port()
    redis = _start_redis(redis_port)
    suite = make_suite(
        tmp,
        f"o{uuid.uuid4().hex[:10]}_",
        AGENTMESH_DATABASE_URL=postgres.url,
        AGENTMESH_EVENT_LOG_URL=f"redis://127.0.0.1:{redis_port}/0",
        AGENTMESH_HEALTH_PROBE_SECONDS=str(PROBE_SECONDS),
    )
    try:
        suite.start(timeout=90)
        serves_runs(suite.gateway_url, in_a_row=2, within=60)
    except RuntimeError:
        suite.stop()
        _dump_logs(tmp / "logs")
        redis.kill()
        postgres.remove()
        raise
    state = Outage(suite, postgres, redis_port, redis)
    yield state
    suite.stop()
    state.redis.kill()
    state.redis.wait()
    postgres.remove()


def auth(owner: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(owner)}"}


def _run(client: httpx.Client, gw: str, owner: str) -> tuple[str, str, httpx.Response]:
    thread_id, run_id = f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    resp = client.post(
        f"{gw}/api/v1/agent/runs", json=run_body(thread_id, run_id, "hello"), headers=auth(owner)
    )
    return thread_id, run_id, resp


def _outcome(resp: httpx.Response) -> tuple[int, str]:
    """(HTTP status, the error code or the run's last event type)."""
    if resp.status_code != 200:
        return resp.status_code, str(resp.json()["error"]["code"])
    events = [e for _, e in frames(resp.content)]
    check_agui(events, complete=True)
    last = events[-1]
    return 200, str(last["code"]) if last["type"] == "RUN_ERROR" else str(last["type"])


def _readyz_until(client: httpx.Client, gw: str, status: int, within: float) -> tuple[float, Any]:
    """Poll /readyz until it answers `status`; (seconds it took, the body)."""
    start = time.monotonic()
    while True:
        resp = client.get(f"{gw}/readyz")
        if resp.status_code == status:
            return time.monotonic() - start, resp.json()
        assert time.monotonic() - start < within, (resp.status_code, resp.text)
        time.sleep(0.1)


def _concurrent_runs(client: httpx.Client, gw: str, owner: str) -> list[tuple[int, str]]:
    """CONCURRENT runs at once (each service's pool then holds that many connections)."""
    with ThreadPoolExecutor(CONCURRENT) as pool:
        return list(pool.map(lambda _: _outcome(_run(client, gw, owner)[2]), range(CONCURRENT)))


def _recovered(client: httpx.Client, outage: Outage, owner: str) -> None:
    """Right after /readyz says ready: runs succeed (at once, concurrently: none of them on
    a pooled connection that died with the outage), reads answer."""
    outcomes = _concurrent_runs(client, outage.gw, owner)
    assert outcomes == [(200, "RUN_FINISHED")] * CONCURRENT, outcomes
    for _ in range(5):
        thread_id, _run_id, resp = _run(client, outage.gw, owner)
        assert _outcome(resp) == (200, "RUN_FINISHED"), resp.text
        history = client.get(
            f"{outage.gw}/api/v1/agent/threads/{thread_id}/history", headers=auth(owner)
        )
        assert [m["role"] for m in history.json()["messages"]] == ["user", "assistant"]
    assert client.get(f"{outage.gw}/api/v1/memories", headers=auth(owner)).status_code == 200


def _nothing_stored(client: httpx.Client, gw: str, owner: str, thread_id: str, run_id: str) -> None:
    """A run refused during an outage left no record and no message of its own."""
    run = client.get(f"{gw}/api/v1/agent/runs/{run_id}", headers=auth(owner))
    assert run.status_code == 404, run.text
    history = client.get(f"{gw}/api/v1/agent/threads/{thread_id}/history", headers=auth(owner))
    assert history.status_code == 404 or history.json()["messages"] == [], history.text


def test_database_outage_is_503_and_unavailable_and_recovers_by_itself(outage: Outage) -> None:
    owner = "db-outage"
    before = outage.pids()
    with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=CONCURRENT)) as client:
        outcomes = _concurrent_runs(client, outage.gw, owner)
        assert outcomes == [(200, "RUN_FINISHED")] * CONCURRENT, outcomes
        outage.postgres.stop()
        try:
            took, body = _readyz_until(client, outage.gw, 503, NOTICE_SECONDS)
            # Every service of the database says so (each checks on its own schedule).
            deadline = time.monotonic() + NOTICE_SECONDS
            while {d["field"] for d in body["error"]["details"]} != set(DB_SERVICES):
                assert time.monotonic() < deadline, body
                time.sleep(0.2)
                body = client.get(f"{outage.gw}/readyz").json()
            assert {d["description"] for d in body["error"]["details"]} == {
                "cannot reach its database"
            }
            # Runs end with RUN_ERROR UNAVAILABLE (the stream had started: the event log is
            # up); reads and writes of stored data answer 503 UNAVAILABLE.
            refused = [_run(client, outage.gw, owner) for _ in range(3)]
            for _thread_id, _run_id, resp in refused:
                assert _outcome(resp) in ((200, "UNAVAILABLE"), (503, "UNAVAILABLE")), resp.text
            for path in ("/api/v1/agent/threads", "/api/v1/memories", "/api/v1/automation/jobs"):
                resp = client.get(f"{outage.gw}{path}", headers=auth(owner))
                assert resp.status_code == 503, (path, resp.text)
                assert resp.json()["error"]["code"] == "UNAVAILABLE", (path, resp.text)
        finally:
            outage.postgres.start()
        took_back, _ = _readyz_until(client, outage.gw, 200, NOTICE_SECONDS)
        _recovered(client, outage, owner)
        for thread_id, run_id, _resp in refused:
            _nothing_stored(client, outage.gw, owner, thread_id, run_id)
    assert outage.pids() == before, "no service was restarted"
    print(f"database lost: /readyz 503 after {took:.1f} s; back: 200 after {took_back:.1f} s")


def test_event_log_outage_is_503_and_unavailable_and_recovers_by_itself(outage: Outage) -> None:
    owner = "redis-outage"
    before = outage.pids()
    with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=CONCURRENT)) as client:
        assert _outcome(_run(client, outage.gw, owner)[2]) == (200, "RUN_FINISHED")
        outage.redis.terminate()
        outage.redis.wait()
        try:
            took, body = _readyz_until(client, outage.gw, 503, NOTICE_SECONDS)
            assert body["error"]["details"] == [
                {"field": "orchestrator", "description": "cannot reach its event log"}
            ]
            refused = [_run(client, outage.gw, owner) for _ in range(3)]
            for _thread_id, _run_id, resp in refused:
                assert _outcome(resp) == (503, "UNAVAILABLE"), resp.text
            # What does not need the event log still answers.
            threads = client.get(f"{outage.gw}/api/v1/agent/threads", headers=auth(owner))
            assert threads.status_code == 200, threads.text
        finally:
            outage.redis = _start_redis(outage.redis_port)
        took_back, _ = _readyz_until(client, outage.gw, 200, NOTICE_SECONDS)
        _recovered(client, outage, owner)
        for thread_id, run_id, _resp in refused:
            _nothing_stored(client, outage.gw, owner, thread_id, run_id)
    assert outage.pids() == before, "no service was restarted"
    print(f"event log lost: /readyz 503 after {took:.1f} s; back: 200 after {took_back:.1f} s")
