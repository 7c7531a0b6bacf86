"""End-to-end fixtures: the real suite as child processes on free ports."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.gateway.auth import issue_token
from services.launcher import ALL_SERVICES, Suite, free_port
from shared.settings import Settings
from tests.conftest import PG_URL, REDIS_URL, USES_POSTGRES, drop_schemas

SECRET = "e2e-secret-of-at-least-thirty-two-bytes"


def token(sub: str, *, admin: bool = False) -> str:
    return issue_token(Settings(jwt_secret=SECRET), sub, admin=admin, ttl_seconds=3600)


def make_suite(tmp: Path, prefix: str, **env: str) -> Suite:
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
    }
    values.update(env)
    return Suite(ports={n: free_port() for n in ALL_SERVICES}, env=values, log_dir=tmp / "logs")


@pytest.fixture(scope="session")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("suite")
    prefix = f"e{uuid.uuid4().hex[:10]}_"
    s = make_suite(tmp, prefix)
    try:
        s.start(timeout=90)
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
