"""POST /api/v1/users against the real scheduler: registration gives the caller their daily
10:00-local memory job, exactly once."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from shared.settings import Settings
from tests.gateway import real_scheduler
from tests.gateway.conftest import bearer

# The real scheduler as the gateway's peer: these fixtures override conftest's gw_settings
# in this module (bound as names, not imported for their side effect).
scheduler_addr = real_scheduler.scheduler_addr
gw_settings = real_scheduler.gw_settings

USERS = "/api/v1/users"
JOBS = "/api/v1/automation/jobs"


def owner() -> str:
    return f"u-{uuid.uuid4().hex[:10]}"


def field_of(resp: httpx.Response) -> str:
    error: dict[str, Any] = resp.json()["error"]
    name: str = error["details"][0]["field"]
    assert error["message"].startswith(f"{name}: ")
    return name


async def test_registration_creates_the_daily_memory_job_in_the_users_zone(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    who = owner()
    headers = bearer(gw_settings, who)
    resp = await http.post(USERS, json={"timezone": "America/New_York"}, headers=headers)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["ownerId"] == who
    [job] = body["jobs"]
    assert job["defaultJob"] is True and job["status"] == "active"
    assert job["schedule"] == {"type": "daily", "localTime": "10:00"}
    assert job["timezone"] == "America/New_York"
    assert job["config"]["tools"] == ["memory_write", "memory_forget"]
    assert "memory_write" in job["config"]["prompt"]
    profile = job["executionProfile"]
    assert profile["enableRouter"] is False and profile["executor"] == "memory"
    local = datetime.fromisoformat(job["nextRunTime"]).astimezone(ZoneInfo("America/New_York"))
    assert (local.hour, local.minute) == (10, 0)
    assert datetime.fromisoformat(job["nextRunTime"]) > datetime.now(UTC)


async def test_registering_twice_leaves_exactly_one_default_job(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = bearer(gw_settings, owner())
    first = await http.post(USERS, json={"timezone": "Europe/London"}, headers=headers)
    again = await http.post(USERS, json={"timezone": "Europe/London"}, headers=headers)
    assert first.status_code == again.status_code == 200
    assert first.json()["jobs"] == again.json()["jobs"]
    listed = await http.get(JOBS, headers=headers)
    assert [j["id"] for j in listed.json()["jobs"]] == [first.json()["jobs"][0]["id"]]


async def test_concurrent_registrations_leave_exactly_one_default_job(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = bearer(gw_settings, owner())
    replies = await asyncio.gather(*(http.post(USERS, json={}, headers=headers) for _ in range(8)))
    assert {r.status_code for r in replies} == {200}
    assert len({r.json()["jobs"][0]["id"] for r in replies}) == 1
    assert len((await http.get(JOBS, headers=headers)).json()["jobs"]) == 1


@pytest.mark.parametrize("body", [None, {}, {"timezone": ""}, {"timezone": None}])
async def test_without_a_zone_the_job_runs_on_shanghai_time(
    http: httpx.AsyncClient, gw_settings: Settings, body: dict[str, Any] | None
) -> None:
    headers = bearer(gw_settings, owner())
    if body is None:
        resp = await http.post(USERS, headers=headers)
    else:
        resp = await http.post(USERS, json=body, headers=headers)
    assert resp.status_code == 200, resp.text
    assert resp.json()["jobs"][0]["timezone"] == "Asia/Shanghai"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
        ({"timezone": "../../etc/passwd"}, "timezone"),
        ({"timezone": 8}, "timezone"),
        ({"timezone": "Asia/Shanghai", "name": "Lin"}, "name"),
        (["Asia/Shanghai"], "body"),
    ],
)
async def test_a_bad_registration_is_400_naming_the_field(
    http: httpx.AsyncClient, gw_settings: Settings, body: Any, field: str
) -> None:
    headers = bearer(gw_settings, owner())
    resp = await http.post(USERS, json=body, headers=headers)
    assert resp.status_code == 400, resp.text
    assert field_of(resp) == field
    assert (await http.get(JOBS, headers=headers)).json()["jobs"] == []


async def test_registration_needs_a_token(http: httpx.AsyncClient) -> None:
    resp = await http.post(USERS, json={})
    assert resp.status_code == 401
    assert resp.headers["www-authenticate"] == "Bearer"
