"""Owner data by construction, end to end (shared/owner_data.py): an owner with one of
everything an owner can own (threads, runs, messages, run events, memories and their change
records, jobs and job runs, webhook endpoints and deliveries, an API key, a quota override,
usage, an answered approval, the message sequence); the export holds all of it, and the
owner's deletion leaves nothing of the owner in any table with an owner column but what
api-endpoints.md says is kept (the deletion record, usage sums), nothing of the content on
disk (SQLite's files), and the owner's API key answers 401."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from services.launcher import Suite
from shared import owner_data
from tests.conftest import PG_URL, REDIS_URL, USES_POSTGRES
from tests.e2e.conftest import parse_sse, run_body, token
from tests.tools.conftest import notes_stdio
from tests.tools.suite import PROFILE, outside_tools_suite

# What an owner deletion keeps, by table (api-endpoints.md, "What an owner deletion keeps").
KEPT = {"deletions", "usage_totals"}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("owner-data")
    servers = [notes_stdio(requires_approval=["notes.add_note"])]
    env = {
        "AGENTMESH_LIFECYCLE_SWEEP_SECONDS": "1",
        "AGENTMESH_WEBHOOK_POLL_SECONDS": "0.2",
        "AGENTMESH_WEBHOOK_LEASE_SECONDS": "2",
        "AGENTMESH_WEBHOOK_MAX_ATTEMPTS": "1",
        "AGENTMESH_WEBHOOK_TIMEOUT_SECONDS": "1",
    }
    with outside_tools_suite(tmp, servers, **env) as s:
        yield s


def _call(
    suite: Suite, method: str, path: str, auth: str, *, ok: int = 200, **kw: Any
) -> httpx.Response:
    resp = httpx.request(
        method,
        f"{suite.gateway_url}{path}",
        headers={"Authorization": f"Bearer {auth}"},
        timeout=120,
        **kw,
    )
    assert resp.status_code == ok, resp.text
    return resp


def _run(suite: Suite, auth: str, thread: str, run: str, text: str, **extra: Any) -> Any:
    body = run_body(thread, run, text, forwardedProps={"agentmesh": {"profile": PROFILE}}, **extra)
    events = parse_sse(_call(suite, "POST", "/api/v1/agent/runs", auth, json=body).content)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return events[-1]


def _until(what: str, check: Any, within: float = 60) -> Any:
    deadline = time.monotonic() + within
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what} did not happen within {within} s"
        time.sleep(0.3)


def _owned_rows_left(suite: Suite, owner: str) -> dict[str, int]:
    """Rows naming `owner` in every table with an owner column of every service's database,
    read from the databases themselves (not through any registry)."""
    left: dict[str, int] = {}
    if USES_POSTGRES:
        import asyncpg

        async def read() -> None:
            conn = await asyncpg.connect(PG_URL)
            try:
                prefix = suite.env["AGENTMESH_DB_SCHEMA_PREFIX"]
                columns = await conn.fetch(
                    "SELECT table_schema, table_name, column_name FROM information_schema.columns "
                    "WHERE table_schema LIKE $1",
                    prefix.replace("_", r"\_") + "%",
                )
                for c in columns:
                    if not owner_data.is_owner_column(c["column_name"]):
                        continue
                    n = await conn.fetchval(
                        f'SELECT count(*) FROM "{c["table_schema"]}"."{c["table_name"]}" '
                        f'WHERE "{c["column_name"]}" = $1',
                        owner,
                    )
                    if n:
                        left[c["table_name"]] = left.get(c["table_name"], 0) + n
            finally:
                await conn.close()

        asyncio.run(read())
        return left
    for path in sorted(Path(suite.env["AGENTMESH_DATA_DIR"]).glob("*.db")):
        with sqlite3.connect(path) as conn:
            listed = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            tables = [r[0] for r in listed]
            for table in tables:
                for col in conn.execute(f'PRAGMA table_info("{table}")'):
                    if owner_data.is_owner_column(col[1]):
                        sql = f'SELECT count(*) FROM "{table}" WHERE "{col[1]}" = ?'
                        n = conn.execute(sql, (owner,)).fetchone()[0]
                        if n:
                            left[table] = left.get(table, 0) + n
    return left


def test_an_owner_of_everything_is_exported_whole_and_deleted_to_the_disk(suite: Suite) -> None:
    mark = f"zq{uuid.uuid4().hex[:12]}"  # in every piece of content and id, never the owner id
    owner = f"own-{uuid.uuid4().hex[:8]}"
    jwt, admin = token(owner), token("root", admin=True)

    # A webhook endpoint first, so the runs' events are delivered to it.
    _call(
        suite,
        "POST",
        "/api/v1/webhooks/endpoints",
        jwt,
        ok=201,
        json={"url": f"https://hooks.example.com/{mark}", "description": f"{mark} hook"},
    )
    # Threads, runs, messages, run events, usage, the message sequence.
    _run(suite, jwt, f"t-{mark}", f"r-{mark}-1", f"hello {mark}")
    # An answered approval: a call that needs one, then the next run approves it.
    asked = _run(
        suite,
        jwt,
        f"t-{mark}-tool",
        f"r-{mark}-2",
        f'use the notes.add_note tool with {{"text": "{mark} note"}}',
    )
    [interrupt] = asked["outcome"]["interrupts"]
    approve = {"decision": "approve"}
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": approve}]
    _run(suite, jwt, f"t-{mark}-tool", f"r-{mark}-3", "approved", resume=resume)
    # A memory and its change records (the edit keeps the replaced content).
    made = _call(
        suite, "POST", "/api/v1/memories", jwt, ok=201, json={"content": f"User likes {mark} tea"}
    ).json()
    _call(suite, "PATCH", f"/api/v1/memories/{made['id']}", jwt, json={"content": f"{mark} coffee"})
    # Jobs and a job run, finished (so no run of the owner writes during the deletion).
    [job] = _call(suite, "POST", "/api/v1/users", jwt).json()["jobs"]
    _call(suite, "POST", f"/api/v1/automation/jobs/{job['id']}:trigger", jwt, ok=202)
    runs_path = f"/api/v1/automation/jobs/{job['id']}/runs"

    def job_run_ended() -> bool:
        runs = _call(suite, "GET", runs_path, jwt).json()["runs"]
        manual = [r for r in runs if r["trigger"] == "manual"]
        return bool(manual) and all(r["state"] in ("succeeded", "failed") for r in manual)

    _until("the job run's end", job_run_ended, within=120)
    _until(
        "a delivery",
        lambda: _call(suite, "GET", "/api/v1/webhooks/deliveries", jwt).json()["deliveries"],
    )
    # An API key; a quota override.
    key = _call(
        suite,
        "POST",
        "/api/v1/admin/api-keys",
        admin,
        ok=201,
        json={"ownerId": owner, "name": f"{mark} key"},
    ).json()["key"]
    _call(suite, "PUT", f"/api/v1/admin/owners/{owner}/quotas", admin, json={"runsPerMinute": 1000})

    exported = _call(suite, "GET", "/api/v1/users/me/export", key).json()
    records = exported["records"]
    expected = {
        "history": {
            "threads",
            "runs",
            "messages",
            "interrupt_answers",
            "owner_sequences",
            "usage_ledger",
        },
        "memory": {"memories", "memory_changes"},
        "scheduler": {"automation_jobs", "job_runs"},
        "orchestrator": {"event_logs"},
        "gateway": {"webhook_endpoints", "webhook_deliveries", "api_keys", "owner_quotas"},
    }
    for service, tables in expected.items():
        missing = {t for t in tables if not records[service].get(t)}
        assert not missing, f"{service}: nothing exported of {missing}"
    assert f"User likes {mark} tea" in str(records["memory"]["memory_changes"])
    assert f"hello {mark}" in str(records["history"]["messages"])
    assert f"r-{mark}-1" in [log["run_id"] for log in records["orchestrator"]["event_logs"]]
    assert "secret" not in str(records["gateway"]["webhook_endpoints"])
    assert "secret_sha256" not in str(records["gateway"]["api_keys"])
    # amk_<key id>_<secret>: the secret (base64url, which may itself hold "_") is never
    # exported.
    assert key.removeprefix("amk_").split("_", 1)[1] not in str(exported)
    assert _owned_rows_left(suite, owner), "the owner's rows are there before the deletion"

    # The owner deletes themselves with their API key.
    started = _call(suite, "DELETE", "/api/v1/users/me", key, ok=202).json()
    deletion = f"/api/v1/users/me/deletions/{started['id']}"
    final = _until(
        "the deletion",
        lambda: (d := _call(suite, "GET", deletion, jwt).json())["state"] == "succeeded" and d,
        within=120,
    )
    gateway_counts = final["steps"][-1]["deletedCounts"]
    assert gateway_counts["apiKeys"] == 1 and gateway_counts["quotaOverrides"] == 1

    # The key no longer answers, and no request of it creates data.
    _call(suite, "GET", "/api/v1/agent/threads", key, ok=401)
    _call(suite, "POST", "/api/v1/memories", key, ok=401, json={"content": "after"})
    # Nothing of the owner is left but what is kept.
    assert set(_owned_rows_left(suite, owner)) <= KEPT
    after = _call(suite, "GET", "/api/v1/users/me/export", jwt).json()["records"]
    assert {s: sorted(t for t, rows in tables.items() if rows) for s, tables in after.items()} == {
        "history": ["deletions", "usage_totals"],
        "memory": [],
        "scheduler": [],
        "orchestrator": [],
        "gateway": [],
    }
    assert mark not in str(after)
    if USES_POSTGRES:
        prefix = suite.env["AGENTMESH_EVENT_LOG_PREFIX"]
        with redis.Redis.from_url(REDIS_URL) as r:
            assert list(r.scan_iter(match=f"{prefix}{owner}/*")) == []
    else:
        # On disk: no file of any service (database, write-ahead log) holds the content.
        files = [p for p in Path(suite.env["AGENTMESH_DATA_DIR"]).rglob("*") if p.is_file()]
        assert files
        holding = [p.name for p in files if mark.encode() in p.read_bytes()]
        assert holding == []
