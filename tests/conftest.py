"""Test fixtures shared by every test.

Backends: AGENTMESH_TEST_BACKEND=embedded (default: SQLite files, in-memory event log) or
AGENTMESH_TEST_BACKEND=postgres (real PostgreSQL and Redis). `make test` runs the suite once
per backend. A backend that cannot be reached fails the tests; nothing is skipped.
"""

from __future__ import annotations

import os

# Tests fork processes (the suite's services, the CLI) while gRPC channels are open: without
# this, gRPC's fork handlers can abort the child before its exec (services/launcher.py).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import httpx
import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from sqlalchemy.ext.asyncio import AsyncEngine

from shared import db
from shared.settings import Settings

BACKEND = os.environ.get("AGENTMESH_TEST_BACKEND", "embedded")
PG_URL = os.environ.get("AGENTMESH_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("AGENTMESH_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")

if BACKEND not in ("embedded", "postgres"):
    raise RuntimeError(f"AGENTMESH_TEST_BACKEND must be embedded or postgres, not {BACKEND!r}")

USES_POSTGRES = BACKEND == "postgres"


def make_settings(tmp_path: os.PathLike[str] | str, prefix: str, **overrides: object) -> Settings:
    """Settings for one test: its own data folder, PostgreSQL schemas and Redis keys."""
    values: dict[str, object] = {
        "data_dir": os.path.join(os.fspath(tmp_path), "data"),
        "database_url": PG_URL if USES_POSTGRES else "",
        "db_schema_prefix": prefix,
        "event_log_url": REDIS_URL if USES_POSTGRES else "memory://",
        "event_log_prefix": f"{prefix}run:",
        "grace_seconds": 2.0,
        "rpc_timeout_seconds": 5.0,
        # Quotas off: the tests of other rules send many runs as one owner; the quota
        # tests (tests/gateway/test_quota.py) set the ones they check.
        "quota_runs_per_minute": 0,
        "quota_concurrent_runs": 0,
        "quota_tokens_per_day": 0,
    }
    values.update(overrides)
    # Test settings from keyword values; pydantic validates them.
    return Settings(**values)  # type: ignore[arg-type]


async def drop_schemas(prefix: str) -> None:
    """Remove a test's PostgreSQL schemas and Redis keys (everything named with `prefix`)."""
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()
    conn = await asyncpg.connect(PG_URL)
    try:
        rows = await conn.fetch(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE $1",
            prefix.replace("_", r"\_") + "%",
        )
        for row in rows:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{row["nspname"]}" CASCADE')
    finally:
        await conn.close()


@pytest.fixture
def schema_prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}_"


@pytest.fixture
async def settings(tmp_path: os.PathLike[str], schema_prefix: str) -> AsyncIterator[Settings]:
    s = make_settings(tmp_path, schema_prefix)
    yield s
    if USES_POSTGRES:
        await drop_schemas(schema_prefix)


@asynccontextmanager
async def migrated_engine(
    settings: Settings, service: str, migrations: Path
) -> AsyncIterator[AsyncEngine]:
    """`service`'s database engine on the backend under test, its migrations applied."""
    engine = db.create_engine(settings, service)
    try:
        await db.migrate(engine, migrations, settings.schema_for(service))
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
async def redis_client() -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(REDIS_URL)
    await client.ping()
    yield client
    await client.aclose()


def assert_overloaded(resp: httpx.Response, scope: str) -> dict[str, str]:
    """`resp` is a load-shedding refusal (api-endpoints.md): 503, Retry-After, reason
    OVERLOADED of `scope`; its error object."""
    assert resp.status_code == 503, resp.text
    assert resp.headers["Retry-After"] == "1"
    error: dict[str, str] = resp.json()["error"]
    assert (error["code"], error["reason"], error["scope"]) == ("UNAVAILABLE", "OVERLOADED", scope)
    return error


@pytest_asyncio.fixture(scope="session", loop_scope="session", autouse=True)
async def _tasks_left_at_the_end() -> AsyncIterator[None]:
    """At the end of the session, the tasks a test left running: named on stderr, cancelled,
    and waited for a bounded time (the loop's own close waits for them without a bound)."""
    yield
    import asyncio
    import sys

    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in left:
        print(f"\ntask left running: {task!r}", file=sys.stderr)
        task.print_stack(file=sys.stderr)
        task.cancel()
    if left:
        _, pending = await asyncio.wait(left, timeout=10)
        for task in pending:
            print(f"\ntask that ignored its cancel: {task!r}", file=sys.stderr)
