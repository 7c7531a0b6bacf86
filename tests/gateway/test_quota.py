"""Quotas per owner (runs per minute, concurrent runs, tokens per UTC day): 429 with
Retry-After before anything of the run is stored; usage per owner (history's sum of its run
records, here a fake history's answer), readable by the owner and an admin; quotas
overridden per owner by an admin."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from agentmesh.history.v1 import history_service_pb2 as history_pb
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from services.gateway.clients import Clients
from services.gateway.owner_data import REGISTRY
from services.gateway.quota import Quota
from services.gateway.routes_runs import StreamEnd
from services.gateway.store import GatewayStore, QuotaOverride
from services.gateway.usage import TOKENS_CACHE_SECONDS, OwnerUsage
from shared import owner_data
from shared.settings import Settings
from tests.gateway.conftest import Peers, app_client, bearer, gateway_settings, run_body

PER_MINUTE = 5
CONCURRENT = 2
TOKENS_PER_DAY = 300


@pytest.fixture(scope="module")
def q_settings(base_settings: Settings, peers: Peers) -> Settings:
    return gateway_settings(
        base_settings,
        peers.addrs,
        quota_runs_per_minute=PER_MINUTE,
        quota_concurrent_runs=CONCURRENT,
        quota_tokens_per_day=TOKENS_PER_DAY,
    )


@pytest.fixture(scope="module")
async def q_http(q_settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(q_settings) as http:
        yield http


def _owner() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def _started(peers: Peers, run_id: str) -> bool:
    return any(getattr(c.request, "run_id", None) == run_id for c in peers.orchestrator.calls)


async def _run(
    http: httpx.AsyncClient, settings: Settings, owner: str, thread: str = "t-q"
) -> httpx.Response:
    run_id = f"r-{uuid.uuid4().hex[:10]}"
    return await http.post(
        "/api/v1/agent/runs",
        json=run_body(f"{thread}-{run_id}", run_id),
        headers=bearer(settings, owner),
    )


def _refused(resp: httpx.Response, quota: str) -> dict[str, Any]:
    assert resp.status_code == 429, resp.text
    error: dict[str, Any] = resp.json()["error"]
    assert error["code"] == "RESOURCE_EXHAUSTED"
    assert (error["reason"], error["quota"]) == ("QUOTA_EXCEEDED", quota)
    assert int(resp.headers["Retry-After"]) >= 1
    return error


async def _usage(http: httpx.AsyncClient, settings: Settings, owner: str) -> dict[str, Any]:
    resp = await http.get("/api/v1/usage", headers=bearer(settings, owner))
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def test_a_run_over_the_runs_per_minute_quota_is_429_and_never_started(
    q_http: httpx.AsyncClient, q_settings: Settings, peers: Peers
) -> None:
    owner = _owner()
    for _ in range(PER_MINUTE):
        assert (await _run(q_http, q_settings, owner)).status_code == 200
    run_id = "r-over-minute"
    resp = await q_http.post(
        "/api/v1/agent/runs",
        json=run_body(f"t-{owner}", run_id),
        headers=bearer(q_settings, owner),
    )
    error = _refused(resp, "runs per minute")
    assert error["limit"] == PER_MINUTE
    assert 1 <= int(resp.headers["Retry-After"]) <= 60
    assert not _started(peers, run_id)
    # Another owner is not held back by this one's quota.
    assert (await _run(q_http, q_settings, _owner())).status_code == 200


async def test_a_run_over_the_concurrent_runs_quota_is_429_until_one_ends(
    q_http: httpx.AsyncClient, q_settings: Settings
) -> None:
    owner = _owner()
    headers = bearer(q_settings, owner)
    streams = []
    async with asyncio.TaskGroup() as group:
        # Two slow runs (about 2 s each) hold both of the owner's concurrent slots.
        for i in range(CONCURRENT):
            body = run_body(f"slow-{owner}-{i}", f"r-slow-{owner}-{i}")
            streams.append(
                group.create_task(q_http.post("/api/v1/agent/runs", json=body, headers=headers))
            )
        await asyncio.sleep(0.5)
        third = await _run(q_http, q_settings, owner)
        error = _refused(third, "concurrent runs")
        assert error["limit"] == CONCURRENT
    assert all(t.result().status_code == 200 for t in streams)
    # Their streams ended: the slots are free again.
    for _ in range(50):
        resp = await _run(q_http, q_settings, owner)
        if resp.status_code == 200:
            break
        await asyncio.sleep(0.05)
    assert resp.status_code == 200, resp.text


async def test_a_run_refused_after_admission_does_not_keep_a_concurrent_slot(
    q_http: httpx.AsyncClient, q_settings: Settings
) -> None:
    owner = _owner()
    for _ in range(CONCURRENT + 1):
        resp = await _run(q_http, q_settings, owner, thread="reject")
        assert resp.status_code == 400, resp.text
    assert (await _run(q_http, q_settings, owner)).status_code == 200


def _day(day: str, runs: int, failed: int, inp: int, out: int, **kw: Any) -> Any:
    return history_pb.OwnerUsageDay(
        day=day, runs=runs, failed_runs=failed, input_tokens=inp, output_tokens=out, **kw
    )


def _today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


def _usage_reads(peers: Peers, owner: str) -> list[Any]:
    return [
        c.request
        for c in peers.history.calls
        if isinstance(c.request, history_pb.GetOwnerUsageRequest)
        and c.metadata.get("x-agentmesh-owner") == owner
    ]


async def test_tokens_per_day_are_historys_usage_of_the_day_and_refuse_the_next_run(
    q_http: httpx.AsyncClient, q_settings: Settings, peers: Peers
) -> None:
    owner, under = _owner(), _owner()
    peers.history.usage[owner] = [_day(_today(), 2, 0, TOKENS_PER_DAY - 50, 50)]
    peers.history.usage[under] = [_day(_today(), 2, 0, TOKENS_PER_DAY - 50, 49)]
    usage = await _usage(q_http, q_settings, owner)
    assert usage["current"]["tokensToday"] == TOKENS_PER_DAY
    run_id = "r-over-tokens"
    resp = await q_http.post(
        "/api/v1/agent/runs",
        json=run_body(f"usage-{owner}", run_id),
        headers=bearer(q_settings, owner),
    )
    _refused(resp, "tokens per day")
    # Until the next UTC midnight.
    assert int(resp.headers["Retry-After"]) <= 86_400
    assert not _started(peers, run_id)
    # One token under the quota: admitted. The check asked history about today only.
    assert (await _run(q_http, q_settings, under)).status_code == 200
    assert [(r.from_day, r.to_day) for r in _usage_reads(peers, under)] == [(_today(), _today())]


async def test_the_tokens_check_reads_history_once_for_runs_close_together(
    q_http: httpx.AsyncClient, q_settings: Settings, peers: Peers
) -> None:
    owner = _owner()
    peers.history.usage[owner] = [_day(_today(), 1, 0, 10, 5)]
    answers = await asyncio.gather(*(_run(q_http, q_settings, owner) for _ in range(CONCURRENT)))
    assert [a.status_code for a in answers] == [200] * CONCURRENT
    assert (await _run(q_http, q_settings, owner)).status_code == 200
    # Within TOKENS_CACHE_SECONDS, one read served them all.
    assert len(_usage_reads(peers, owner)) == 1
    await asyncio.sleep(TOKENS_CACHE_SECONDS + 0.1)
    assert (await _run(q_http, q_settings, owner)).status_code == 200
    assert len(_usage_reads(peers, owner)) == 2


async def test_usage_is_historys_sum_per_day_for_its_owner_only(
    q_http: httpx.AsyncClient, q_settings: Settings, peers: Peers
) -> None:
    owner, other = _owner(), _owner()
    yesterday = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%d")
    peers.history.usage[owner] = [
        _day(yesterday, 3, 1, 100, 20, automation_runs=1, duration_ms=900),
        _day(_today(), 2, 0, 20, 10, duration_ms=100, tokens_estimated=True),
    ]
    usage = await _usage(q_http, q_settings, owner)
    total = usage["total"]
    assert usage["ownerId"] == owner
    assert total == {
        "runs": 5,
        "failedRuns": 1,
        "automationRuns": 1,
        "inputTokens": 120,
        "outputTokens": 30,
        "totalTokens": 150,
        "durationMs": 1000,
        "tokensEstimated": True,
    }
    assert [d["day"] for d in usage["days"]] == [yesterday, usage["to"]]
    assert usage["days"][0]["tokensEstimated"] is False
    assert usage["current"]["tokensToday"] == 30
    assert usage["quotas"] == {
        "runsPerMinute": PER_MINUTE,
        "concurrentRuns": CONCURRENT,
        "tokensPerDay": TOKENS_PER_DAY,
        "overridden": False,
    }
    [asked] = _usage_reads(peers, owner)
    assert (asked.from_day, asked.to_day) == (usage["from"], usage["to"])
    # Nothing of it shows in another owner's usage.
    theirs = await _usage(q_http, q_settings, other)
    assert theirs["total"]["runs"] == 0 and theirs["days"] == []
    assert theirs["current"]["tokensToday"] == 0
    # An admin reads the same numbers; a user may not read another's.
    admin = await q_http.get(
        f"/api/v1/admin/owners/{owner}/usage?days=2", headers=bearer(q_settings, "root", admin=True)
    )
    assert admin.status_code == 200, admin.text
    assert admin.json()["total"] == total
    denied = await q_http.get(
        f"/api/v1/admin/owners/{owner}/usage", headers=bearer(q_settings, other)
    )
    assert denied.status_code == 403


async def test_an_admin_override_replaces_the_default_quotas_of_one_owner(
    q_http: httpx.AsyncClient, q_settings: Settings
) -> None:
    owner = _owner()
    admin = bearer(q_settings, "root", admin=True)
    path = f"/api/v1/admin/owners/{owner}/quotas"
    put = await q_http.put(path, json={"runsPerMinute": 1, "tokensPerDay": 0}, headers=admin)
    assert put.status_code == 200, put.text
    body = put.json()
    assert (body["runsPerMinute"], body["concurrentRuns"], body["tokensPerDay"]) == (
        1,
        CONCURRENT,
        0,
    )
    assert body["overridden"] is True
    assert "concurrentRuns" not in body["override"]
    assert (await _run(q_http, q_settings, owner)).status_code == 200
    _refused(await _run(q_http, q_settings, owner), "runs per minute")
    got = await q_http.get(path, headers=admin)
    assert got.json()["runsPerMinute"] == 1
    # Back to the defaults.
    reset = await q_http.delete(path, headers=admin)
    assert reset.status_code == 200
    assert (reset.json()["runsPerMinute"], reset.json()["overridden"]) == (PER_MINUTE, False)
    assert (await _run(q_http, q_settings, owner)).status_code == 200


async def test_a_zero_quota_is_no_limit(q_http: httpx.AsyncClient, q_settings: Settings) -> None:
    owner = _owner()
    admin = bearer(q_settings, "root", admin=True)
    resp = await q_http.put(
        f"/api/v1/admin/owners/{owner}/quotas", json={"runsPerMinute": 0}, headers=admin
    )
    assert resp.status_code == 200
    for _ in range(PER_MINUTE + 2):
        assert (await _run(q_http, q_settings, owner)).status_code == 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"runsPerMinute": -1}, "runsPerMinute"),
        ({"runsPerMinute": "5"}, "runsPerMinute"),
        ({"concurrentRuns": True}, "concurrentRuns"),
        ({"tokensPerDay": 1.5}, "tokensPerDay"),
        ({"tokensPerDay": 10**13}, "tokensPerDay"),
        ({"runs_per_minute": 1}, "runs_per_minute"),
        ([1], "body"),
    ],
)
async def test_a_bad_quota_body_is_400_naming_the_field_and_changes_nothing(
    q_http: httpx.AsyncClient, q_settings: Settings, body: Any, field: str
) -> None:
    owner = _owner()
    admin = bearer(q_settings, "root", admin=True)
    resp = await q_http.put(f"/api/v1/admin/owners/{owner}/quotas", json=body, headers=admin)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["details"][0]["field"] == field
    got = await q_http.get(f"/api/v1/admin/owners/{owner}/quotas", headers=admin)
    assert got.json()["overridden"] is False


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/admin/owners/bad%20owner/usage"),
        ("GET", "/api/v1/admin/owners/a%00b/quotas"),
        ("PUT", "/api/v1/admin/owners/%E2%80%AE/quotas"),
        ("GET", "/api/v1/usage?days=0"),
        ("GET", "/api/v1/usage?days=abc"),
        ("GET", "/api/v1/usage?days=367"),
        ("GET", "/api/v1/usage?owner_id=someone-else"),
    ],
)
async def test_hostile_usage_and_quota_requests_are_400(
    q_http: httpx.AsyncClient, q_settings: Settings, method: str, path: str
) -> None:
    headers = bearer(q_settings, "root", admin=True)
    resp = await q_http.request(method, path, headers=headers, json={})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == "INVALID_ARGUMENT"


async def test_quota_endpoints_need_the_admin_scope(
    q_http: httpx.AsyncClient, q_settings: Settings
) -> None:
    user = bearer(q_settings, _owner())
    for method in ("GET", "PUT", "DELETE"):
        resp = await q_http.request(
            method, "/api/v1/admin/owners/alice/quotas", headers=user, json={"runsPerMinute": 0}
        )
        assert resp.status_code == 403, (method, resp.text)
    assert (await q_http.get("/api/v1/usage")).status_code == 401


@pytest.fixture
async def quota(q_settings: Settings) -> AsyncIterator[Quota]:
    """The quotas of the backend under test (leases and counters on Redis on PostgreSQL +
    Redis), on a store of their own."""
    store = await GatewayStore.open(q_settings)

    def no_clients() -> Clients:
        raise AssertionError("these tests read no usage")

    quota = Quota.open(q_settings, store, OwnerUsage(q_settings, no_clients))
    try:
        yield quota
    finally:
        await quota.aclose()
        await quota.store.close()


async def test_a_concurrent_slot_left_by_a_gateway_that_died_expires_on_its_own(
    quota: Quota,
) -> None:
    owner = _owner()
    assert await quota.leases.take(owner, "dead-gateway", 1, ttl=0.3)
    assert not await quota.leases.take(owner, "next", 1, ttl=0.3)
    assert await quota.concurrent(owner) == 1
    await asyncio.sleep(0.5)  # nobody gives it back
    assert await quota.concurrent(owner) == 0
    assert await quota.leases.take(owner, "next", 1, ttl=30)
    await quota.leases.give_back(owner, "next")
    assert await quota.concurrent(owner) == 0


async def test_a_stream_that_never_started_still_ends_once_its_run_call_ended() -> None:
    ends: list[object] = []

    async def record(last: object) -> None:
        ends.append(last)

    never = StreamEnd(record, grace=0.05)
    never.call_ended()
    started = StreamEnd(record, grace=0.05)
    started.begin()
    started.call_ended()
    refused = StreamEnd(record, grace=0.05)
    refused.cancel()
    refused.call_ended()
    await asyncio.sleep(0.2)
    # Only the stream that never started was ended by its call; the started one ends when
    # its stream closes (once, whatever closes it), the refused one never.
    assert ends == [None]
    started.end({"type": "RUN_FINISHED"})
    started.end(None)
    await asyncio.sleep(0.05)
    assert ends == [None, {"type": "RUN_FINISHED"}]


async def test_quotas_fall_back_to_the_last_override_read_while_the_database_is_down(
    quota: Quota,
) -> None:
    owner, store = _owner(), quota.store
    await store.put_quota_override(owner, QuotaOverride(runs_per_minute=1))
    assert (await quota.quotas(owner)).runs_per_minute == 1
    await store.engine.dispose()
    # The store is gone; a run still gets the override last read, then the defaults.
    store.engine = create_async_engine("sqlite+aiosqlite:////nonexistent/dir/x.db")
    quota.overrides[owner] = (0.0, quota.overrides[owner][1])  # expired
    assert (await quota.quotas(owner)).runs_per_minute == 1
    quota.forget(owner)
    assert (await quota.quotas(owner)).runs_per_minute == PER_MINUTE


async def test_a_browser_app_may_read_the_retry_after_of_a_refused_run(
    q_settings: Settings,
) -> None:
    settings = q_settings.model_copy(update={"cors_origins": ["https://app.example"]})
    owner = _owner()
    async with app_client(settings) as http:
        origin = {"Origin": "https://app.example"}
        for _ in range(PER_MINUTE):
            admitted = await http.post(
                "/api/v1/agent/runs",
                json=run_body(f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"),
                headers=bearer(settings, owner) | origin,
            )
            assert admitted.status_code == 200
        refused = await http.post(
            "/api/v1/agent/runs", json=run_body(), headers=bearer(settings, owner) | origin
        )
    assert refused.status_code == 429
    exposed = refused.headers["access-control-expose-headers"].lower()
    assert "retry-after" in exposed.replace(" ", "").split(",")


async def test_an_owner_deletion_removes_the_usage_rows_an_earlier_version_counted(
    quota: Quota,
) -> None:
    owner, other, store = _owner(), _owner(), quota.store
    legacy = text(
        "INSERT INTO usage_days (owner_id, day, runs, failed_runs, input_tokens, "
        "output_tokens, duration_ms) VALUES (:owner, :day, 1, 0, 10, 5, 100)"
    )
    async with store.engine.begin() as conn:
        for who, day in ((owner, "2026-11-30"), (owner, "2026-12-01"), (other, "2026-12-01")):
            await conn.execute(legacy, {"owner": who, "day": day})
    assert (await owner_data.delete_owner(store.engine, REGISTRY, owner))["usage_days"] == 2
    again = await owner_data.delete_owner(store.engine, REGISTRY, owner)
    assert again["usage_days"] == 0  # idempotent
    async with store.engine.connect() as conn:
        left = await conn.execute(
            text("SELECT owner_id FROM usage_days WHERE owner_id IN (:a, :b)"),
            {"a": owner, "b": other},
        )
        assert [r[0] for r in left] == [other]
