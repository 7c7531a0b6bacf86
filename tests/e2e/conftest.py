"""End-to-end fixtures: the real suite as child processes on free ports."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from services.gateway.auth import issue_token
from services.launcher import ALL_SERVICES, Suite, free_port
from shared.settings import Settings
from tests.conftest import PG_URL, REDIS_URL, USES_POSTGRES, drop_schemas

SECRET = "e2e-secret-of-at-least-thirty-two-bytes"


def token(sub: str, *, admin: bool = False) -> str:
    return issue_token(Settings(jwt_secret=SECRET), sub, admin=admin, ttl_seconds=3600)


# How the end-to-end suites spread the services over processes (services.launcher.SHAPES):
# "split" (one process per service, the default) or "all" (one process hosting them all).
# `make test` runs the embedded pass on "all" and the postgres pass on "split".
SHAPE = os.environ.get("AGENTMESH_TEST_SHAPE", "split")


def make_suite(tmp: Path, prefix: str, *, shape: str = "", **env: str) -> Suite:
    """The suite on free ports, in `shape` (default SHAPE). A test that stops or kills one
    service while the others keep running asks for shape "split"."""
    values = {
        "AGENTMESH_DATA_DIR": str(tmp / "data"),
        "AGENTMESH_JWT_SECRET": SECRET,
        "AGENTMESH_GRACE_SECONDS": "3",
        "AGENTMESH_RPC_TIMEOUT_SECONDS": "3",
        "AGENTMESH_DB_SCHEMA_PREFIX": prefix,
        "AGENTMESH_DATABASE_URL": PG_URL if USES_POSTGRES else "",
        "AGENTMESH_EVENT_LOG_URL": REDIS_URL if USES_POSTGRES else "memory://",
        "AGENTMESH_EVENT_LOG_PREFIX": f"{prefix}run:",
        "AGENTMESH_LOG_LEVEL": "INFO",
        # Default quotas off: the tests send many runs as one owner (test_quotas_and_keys.py
        # sets the quotas it checks per owner).
        "AGENTMESH_QUOTA_RUNS_PER_MINUTE": "0",
        "AGENTMESH_QUOTA_CONCURRENT_RUNS": "0",
        "AGENTMESH_QUOTA_TOKENS_PER_DAY": "0",
        # Memory search is lexical here (a degraded mode): the suite is shared by every test,
        # most of which check words a memory holds, and the embedding model's background work
        # would load the CI's two cores throughout. Hybrid search end to end is what
        # `make run` starts, tested through the launcher (test_memory_recall.py).
        "AGENTMESH_EMBEDDING_BASE_URL": "",
    }
    values.update(env)
    return Suite(
        ports={n: free_port() for n in ALL_SERVICES},
        env=values,
        log_dir=tmp / "logs",
        shape=shape or SHAPE,
    )


@pytest.fixture(scope="session")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("suite")
    prefix = f"e{uuid.uuid4().hex[:10]}_"
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


def _dump_logs(log_dir: Path) -> None:
    for log in sorted(log_dir.glob("*.log")):
        print(f"---- {log.name}\n{log.read_text()[-4000:]}")


def parse_sse(raw: bytes) -> list[dict[str, object]]:
    """Frames of an SSE body; asserts the framing rules a strict AG-UI client enforces."""
    assert b"\r" not in raw, "frames must use LF only"
    assert raw.endswith(b"\n\n"), "the stream must end with a complete frame"
    events = []
    for frame in raw.split(b"\n\n")[:-1]:
        if frame == b": keepalive":
            continue  # the heartbeat comment of a waiting stream, not an event
        lines = frame.split(b"\n")
        data = [line[len(b"data: ") :] for line in lines if line.startswith(b"data: ")]
        assert len(data) == 1, f"one data line per frame: {frame!r}"
        others = [line for line in lines if not line.startswith(b"data: ")]
        # Besides its data line a frame may have one `id: <sequence>` line (before it).
        assert len(others) <= 1 and all(
            line.startswith(b"id: ") and line[4:].isdigit() for line in others
        ), f"only an id line besides data: {frame!r}"
        assert not others or lines[0] == others[0], f"the id line comes first: {frame!r}"
        events.append(json.loads(data[0]))
    return events


def run_body(thread_id: str, run_id: str, text: str, **extra: object) -> dict[str, object]:
    body: dict[str, object] = {
        "threadId": thread_id,
        "runId": run_id,
        "messages": [{"id": f"m-{run_id}", "role": "user", "content": text}],
    }
    body.update(extra)
    return body


def serves_runs(gateway_url: str, *, in_a_row: int, within: float) -> None:
    """Wait until `in_a_row` chat runs in a row finish successfully (RuntimeError if not)."""
    deadline = time.monotonic() + within
    done = 0
    with httpx.Client(timeout=30) as client:
        while done < in_a_row:
            if time.monotonic() > deadline:
                raise RuntimeError("the suite did not serve chat runs in time")
            run_id = f"warm-{uuid.uuid4().hex[:8]}"
            resp = client.post(
                f"{gateway_url}/api/v1/agent/runs",
                json=run_body(f"t-{run_id}", run_id, "warm up"),
                headers={"Authorization": f"Bearer {token('warm-up')}"},
            )
            ok = resp.status_code == 200 and parse_sse(resp.content)[-1]["type"] == "RUN_FINISHED"
            done = done + 1 if ok else 0
            if not ok:
                time.sleep(0.2)


# ---- two replicas of the orchestrator and the executor --------------------------------------

REPLICATED = ("orchestrator", "executor")


@dataclass
class Replicas:
    """The suite with two replicas ("a", "b") of the orchestrator and of the executor.

    The gateway and the scheduler reach both orchestrators, and each orchestrator both
    executors, through one round-robin channel to "ipv4:///addr-a,addr-b". The replicas log
    at DEBUG, which writes an access line for every call they serve (how a test sees which
    replica served something). On the PostgreSQL backend the orchestrators share the Redis
    event log; in the embedded one each keeps its runs' events in its own memory.
    """

    base: Suite  # history, memory, router, scheduler, gateway
    a: Suite
    b: Suite

    @property
    def gateway_url(self) -> str:
        return self.base.gateway_url

    def log(self, replica: Suite, name: str) -> Path:
        return replica.log_path(name)

    def served(self, replica: Suite, name: str, method: str, since: int = 0) -> set[str]:
        """The request ids of the `method` calls (e.g. "Execute") that the replica's `name`
        finished after byte offset `since` of its log."""
        with self.log(replica, name).open("rb") as f:
            f.seek(since)
            tail = f.read()
        ids = set()
        for line in tail.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # not a log entry (a library writing to stderr)
            if entry.get("msg") == "rpc" and str(entry.get("method", "")).endswith(f"/{method}"):
                ids.add(str(entry.get("request_id", "")))
        return ids

    def restart(self, replica: Suite, name: str, sig: int = signal.SIGTERM) -> int:
        """Stop `name` of `replica` with `sig` (SIGTERM: its graceful shutdown), start it
        again, wait until it is SERVING; the log offset where the new process begins."""
        replica.stop_service(name, sig, grace=30)
        offset = self.log(replica, name).stat().st_size
        replica.start_service(name)
        replica.wait_ready(name, time.monotonic() + 60)
        return offset


def _round_robin(suites: list[Suite], name: str, ports: list[int]) -> None:
    target = "ipv4:///" + ",".join(f"127.0.0.1:{p}" for p in ports)
    for s in suites:
        s.env[f"AGENTMESH_{name.upper()}_ADDR"] = target


@pytest.fixture(scope="session")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    tmp = tmp_path_factory.mktemp("replicas")
    prefix = f"p{uuid.uuid4().hex[:10]}_"
    env = {
        "AGENTMESH_SCRIPTED_TOKEN_LATENCY": "0.01",
        "AGENTMESH_RUN_LEASE_SECONDS": "3",
        "AGENTMESH_RUN_TIMEOUT_SECONDS": "60",
    }
    base = make_suite(tmp / "base", prefix, **env)
    base.services = tuple(n for n in ALL_SERVICES if n not in REPLICATED)
    ours = {k: v for k, v in base.env.items() if k.startswith("AGENTMESH_")}
    ours["AGENTMESH_LOG_LEVEL"] = "DEBUG"
    a, b = (
        Suite(
            ports={**base.ports, **{n: free_port() for n in REPLICATED}},
            env=ours,
            log_dir=tmp / r / "logs",
            services=REPLICATED,
        )
        for r in ("a", "b")
    )
    suites = [base, a, b]
    for name in REPLICATED:
        _round_robin(suites, name, [a.ports[name], b.ports[name]])
    r = Replicas(base, a, b)
    try:
        # The replicas first: the round-robin channels then find both up when they connect.
        for replica in (a, b):
            for name in REPLICATED:
                replica.start_service(name)
        base.start(timeout=90)
        for replica in (a, b):
            for name in REPLICATED:
                replica.wait_ready(name, time.monotonic() + 60)
        # Each process is up; the suite is ready once runs go through: every channel has
        # found its peers (one that first tried a peer still starting retries shortly).
        serves_runs(base.gateway_url, in_a_row=4, within=60)
    except RuntimeError:
        for s in suites:
            s.stop()
        for s in suites:
            assert s.log_dir is not None
            _dump_logs(s.log_dir)
        raise
    yield r
    for s in suites:
        s.stop()
    if USES_POSTGRES:
        asyncio.run(drop_schemas(prefix))
