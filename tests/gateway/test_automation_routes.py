"""/api/v1/automation/jobs against the real scheduler service: JSON shape, validation named
in camelCase, idempotent create, optimistic updates, owner isolation, pause/resume, trigger
and the job's runs."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from agentmesh.type.v1 import execution_profile_pb2, message_pb2

from shared.settings import Settings
from tests.gateway import real_scheduler
from tests.gateway.conftest import Peers, bearer

# The real scheduler as the gateway's peer: these fixtures override conftest's gw_settings
# in this module (bound as names, not imported for their side effect).
scheduler_addr = real_scheduler.scheduler_addr
gw_settings = real_scheduler.gw_settings

JOBS = "/api/v1/automation/jobs"


def owner() -> str:
    return f"u-{uuid.uuid4().hex[:10]}"


def job_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "title": "Morning digest",
        "schedule": {"type": "daily", "localTime": "10:00"},
        "timezone": "Europe/London",
        "config": {"prompt": "Summarise what I said yesterday", "tools": ["memory_write"]},
        "executionProfile": {
            "name": "digest",
            "enableRouter": False,
            "executor": "memory",
            "toolPolicy": {"mode": "intersection", "allowlist": ["memory_write"]},
            "historyPolicy": {"window": "today_yesterday"},
        },
    }
    body.update(overrides)
    return body


async def create(
    http: httpx.AsyncClient, headers: dict[str, str], **overrides: Any
) -> dict[str, Any]:
    resp = await http.post(JOBS, json=job_body(**overrides), headers=headers)
    assert resp.status_code == 201, resp.text
    job: dict[str, Any] = resp.json()
    return job


def error(resp: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = resp.json()["error"]
    return body


def field_of(resp: httpx.Response) -> str:
    details = error(resp)["details"]
    assert len(details) == 1, details
    name: str = details[0]["field"]
    assert error(resp)["message"].startswith(f"{name}: ")
    return name


async def test_create_answers_the_job_in_camel_case_with_its_next_run_in_utc(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = bearer(gw_settings, owner())
    resp = await http.post(JOBS, json=job_body(), headers=headers)
    assert resp.status_code == 201, resp.text
    job = resp.json()
    assert resp.headers["location"] == f"{JOBS}/{job['id']}"
    assert job["title"] == "Morning digest"
    assert job["schedule"] == {"type": "daily", "localTime": "10:00"}
    assert job["timezone"] == "Europe/London"
    assert job["status"] == "active" and job["version"] == 1 and job["defaultJob"] is False
    assert job["config"] == {"prompt": "Summarise what I said yesterday", "tools": ["memory_write"]}
    assert job["executionProfile"] == job_body()["executionProfile"]
    assert job["catchUpPolicy"] == "latest" and job["jitterSeconds"] == 0
    nxt = datetime.fromisoformat(job["nextRunTime"])
    assert job["nextRunTime"].endswith("Z") and nxt > datetime.now(UTC)
    local = nxt.astimezone(ZoneInfo("Europe/London"))
    assert (local.hour, local.minute) == (10, 0)
    assert "lastRunTime" not in job and None not in job.values()


async def test_a_job_without_a_profile_gets_the_automation_default(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    body = job_body()
    del body["executionProfile"]
    resp = await http.post(JOBS, json=body, headers=bearer(gw_settings, owner()))
    assert resp.status_code == 201, resp.text
    profile = resp.json()["executionProfile"]
    assert profile["name"] == "automation_memory_default"
    assert profile["enableRouter"] is False and profile["executor"] == "memory"


async def test_a_jobs_memory_policy_may_recall_conversations_and_shows_it(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    body = job_body()
    body["executionProfile"]["memory"] = {"mode": "recall", "conversation": True}
    resp = await http.post(JOBS, json=body, headers=bearer(gw_settings, owner()))
    assert resp.status_code == 201, resp.text
    assert resp.json()["executionProfile"]["memory"]["conversation"] is True


async def test_the_same_idempotency_key_creates_the_job_once(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = bearer(gw_settings, owner())
    keyed = {**headers, "Idempotency-Key": f"k-{uuid.uuid4().hex}"}
    first = await http.post(JOBS, json=job_body(), headers=keyed)
    again = await http.post(JOBS, json=job_body(), headers=keyed)
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    listed = await http.get(JOBS, headers=headers)
    assert [j["id"] for j in listed.json()["jobs"]] == [first.json()["id"]]


async def test_an_overlong_idempotency_key_is_refused_naming_the_header(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = {**bearer(gw_settings, owner()), "Idempotency-Key": "k" * 129}
    resp = await http.post(JOBS, json=job_body(), headers=headers)
    assert resp.status_code == 400
    assert field_of(resp) == "Idempotency-Key"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (job_body(title=None), "title"),
        ({k: v for k, v in job_body().items() if k != "schedule"}, "schedule"),
        (job_body(schedule={"type": "hourly"}), "schedule.type"),
        (job_body(schedule={"type": "once", "runAt": "2030-01-01T10:00:00"}), "schedule.runAt"),
        (job_body(schedule={"type": "daily", "localTime": 10}), "schedule.localTime"),
        (job_body(config={"tools": []}), "config.prompt"),
        (job_body(config={"prompt": "x", "tools": [1]}), "config.tools[0]"),
        (job_body(jitterSeconds="5"), "jitterSeconds"),
        (job_body(catchUpPolicy="sometimes"), "catchUpPolicy"),
        (job_body(colour="blue"), "colour"),
        (job_body(schedule={"type": "daily", "localTime": "10:00", "every": 2}), "schedule.every"),
    ],
)
async def test_a_malformed_job_is_400_naming_the_field(
    http: httpx.AsyncClient, gw_settings: Settings, body: dict[str, Any], field: str
) -> None:
    resp = await http.post(JOBS, json=body, headers=bearer(gw_settings, owner()))
    assert resp.status_code == 400, resp.text
    assert error(resp)["code"] == "INVALID_ARGUMENT"
    assert field_of(resp) == field


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
        ({"schedule": {"type": "daily", "localTime": "25:00"}}, "schedule.localTime"),
        ({"schedule": {"type": "weekly", "localTime": "09:00", "weekday": 8}}, "schedule.weekday"),
        ({"schedule": {"type": "cron", "cron": "not a cron"}}, "schedule.cron"),
        ({"config": {"prompt": "x" * 2001}}, "config.prompt"),
        ({"config": {"prompt": "x", "tools": ["rm_rf"]}}, "config.tools"),
        ({"jitterSeconds": 10**6}, "jitterSeconds"),
        ({"title": "   "}, "title"),
        ({"executionProfile": {"enableRouter": False}}, "executionProfile.executor"),
        (
            {"executionProfile": {"enableRouter": False, "executor": "poet"}},
            "executionProfile.executor",
        ),
        (
            {"executionProfile": {"enableRouter": False, "executor": "memory", "temperature": 2}},
            "executionProfile.temperature",
        ),
        (
            {
                "executionProfile": {
                    "enableRouter": False,
                    "executor": "memory",
                    "toolPolicy": {"allowlist": ["shell"]},
                }
            },
            "executionProfile.toolPolicy.allowlist",
        ),
        # A memory job that could neither write nor forget would fail every attempt.
        ({"config": {"prompt": "x", "tools": ["memory_search"]}}, "config.tools"),
        (
            {
                "executionProfile": {
                    "enableRouter": False,
                    "executor": "memory",
                    "memory": {"mode": "recall", "conversation": "yes"},
                }
            },
            "executionProfile.memory.conversation",
        ),
    ],
)
async def test_an_invalid_job_is_400_naming_the_field_in_camel_case(
    http: httpx.AsyncClient, gw_settings: Settings, overrides: dict[str, Any], field: str
) -> None:
    resp = await http.post(JOBS, json=job_body(**overrides), headers=bearer(gw_settings, owner()))
    assert resp.status_code == 400, resp.text
    assert field_of(resp) == field


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b""])
async def test_a_body_that_is_not_a_json_object_is_400(
    http: httpx.AsyncClient, gw_settings: Settings, raw: bytes
) -> None:
    headers = {**bearer(gw_settings, owner()), "Content-Type": "application/json"}
    resp = await http.post(JOBS, content=raw, headers=headers)
    assert resp.status_code == 400
    assert field_of(resp) == "body"


async def test_the_listing_pages_through_only_the_callers_jobs(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = bearer(gw_settings, owner())
    made = [(await create(http, headers, title=f"job {i}"))["id"] for i in range(3)]
    await create(http, bearer(gw_settings, owner()))  # someone else's

    first = await http.get(JOBS, params={"page_size": 2}, headers=headers)
    assert first.status_code == 200
    token = first.json()["nextPageToken"]
    second = await http.get(JOBS, params={"page_size": 2, "page_token": token}, headers=headers)
    assert "nextPageToken" not in second.json()
    ids = [j["id"] for j in first.json()["jobs"] + second.json()["jobs"]]
    assert ids == made


async def test_a_foreign_page_token_and_an_unknown_parameter_are_400(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = bearer(gw_settings, owner())
    bad = await http.get(JOBS, params={"page_token": "garbage"}, headers=headers)
    assert bad.status_code == 400 and field_of(bad) == "page_token"
    typo = await http.get(JOBS, params={"pagesize": 2}, headers=headers)
    assert typo.status_code == 400 and field_of(typo) == "pagesize"


async def test_anonymous_calls_are_401(http: httpx.AsyncClient) -> None:
    assert (await http.get(JOBS)).status_code == 401
    assert (await http.post(JOBS, json=job_body())).status_code == 401
    assert (await http.post(f"{JOBS}/x:trigger")).status_code == 401


async def test_another_owners_job_is_404_exactly_like_a_missing_one(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    job = await create(http, bearer(gw_settings, owner()))
    mallory = bearer(gw_settings, owner())
    missing = uuid.uuid4().hex
    calls = [
        ("GET", "", None),
        ("PATCH", "", {"version": 1, "title": "mine now"}),
        ("PUT", "", {**job_body(), "version": 1}),
        ("DELETE", "", None),
        ("POST", ":pause", None),
        ("POST", ":resume", None),
        ("POST", ":trigger", None),
        ("GET", "/runs", None),
    ]
    for method, suffix, body in calls:
        theirs = await http.request(
            method, f"{JOBS}/{job['id']}{suffix}", json=body, headers=mallory
        )
        absent = await http.request(method, f"{JOBS}/{missing}{suffix}", json=body, headers=mallory)
        assert theirs.status_code == absent.status_code == 404, (method, suffix, theirs.text)
        shape = [{k: v for k, v in error(r).items() if k != "requestId"} for r in (theirs, absent)]
        assert shape[0] == shape[1]


async def test_patch_changes_the_given_fields_and_bumps_the_version(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = bearer(gw_settings, owner())
    job = await create(http, headers)
    resp = await http.patch(
        f"{JOBS}/{job['id']}",
        json={"version": 1, "schedule": {"type": "weekly", "localTime": "08:30", "weekday": 1}},
        headers=headers,
    )
    assert resp.status_code == 200, resp.text
    updated = resp.json()
    assert updated["version"] == 2
    assert updated["schedule"] == {"type": "weekly", "localTime": "08:30", "weekday": 1}
    assert updated["title"] == job["title"] and updated["config"] == job["config"]
    local = datetime.fromisoformat(updated["nextRunTime"]).astimezone(ZoneInfo("Europe/London"))
    assert (local.isoweekday(), local.hour, local.minute) == (1, 8, 30)
    fetched = await http.get(f"{JOBS}/{job['id']}", headers=headers)
    assert fetched.json() == updated


async def test_patch_with_null_resets_a_field_to_its_default(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = bearer(gw_settings, owner())
    job = await create(http, headers, jitterSeconds=30, catchUpPolicy="all")
    resp = await http.patch(
        f"{JOBS}/{job['id']}", json={"version": 1, "jitterSeconds": None}, headers=headers
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["jitterSeconds"] == 0 and resp.json()["catchUpPolicy"] == "all"


async def test_put_replaces_the_job_and_accepts_what_get_returned(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = bearer(gw_settings, owner())
    job = await create(http, headers)
    fetched = (await http.get(f"{JOBS}/{job['id']}", headers=headers)).json()
    fetched["title"] = "Evening digest"
    fetched["schedule"] = {"type": "cron", "cron": "0 21 * * 1-5"}
    resp = await http.put(f"{JOBS}/{job['id']}", json=fetched, headers=headers)
    assert resp.status_code == 200, resp.text
    assert resp.json()["title"] == "Evening digest" and resp.json()["version"] == 2
    assert resp.json()["schedule"] == {"type": "cron", "cron": "0 21 * * 1-5"}


async def test_a_stale_version_is_409_and_changes_nothing(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = bearer(gw_settings, owner())
    job = await create(http, headers)
    url = f"{JOBS}/{job['id']}"
    first = await http.patch(url, json={"version": 1, "title": "first"}, headers=headers)
    assert first.status_code == 200
    for resp in (
        await http.patch(url, json={"version": 1, "title": "second"}, headers=headers),
        await http.put(url, json={**job_body(title="third"), "version": 1}, headers=headers),
    ):
        assert resp.status_code == 409, resp.text
        assert error(resp)["code"] == "ABORTED"
        assert "changed since it was read" in error(resp)["message"]
    current = (await http.get(url, headers=headers)).json()
    assert current["title"] == "first" and current["version"] == 2


@pytest.mark.parametrize("version", [None, 0, "2", True])
async def test_an_update_needs_a_valid_version(
    http: httpx.AsyncClient, gw_settings: Settings, version: Any
) -> None:
    headers = bearer(gw_settings, owner())
    job = await create(http, headers)
    body: dict[str, Any] = {"title": "x"} if version is None else {"title": "x", "version": version}
    resp = await http.patch(f"{JOBS}/{job['id']}", json=body, headers=headers)
    assert resp.status_code == 400
    assert field_of(resp) == "version"


async def test_a_patch_is_validated_like_a_create(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = bearer(gw_settings, owner())
    job = await create(http, headers)
    resp = await http.patch(
        f"{JOBS}/{job['id']}",
        json={"version": 1, "schedule": {"localTime": "09:00"}},
        headers=headers,
    )
    assert resp.status_code == 400 and field_of(resp) == "schedule.type"
    resp = await http.patch(
        f"{JOBS}/{job['id']}", json={"version": 1, "timezone": "Nowhere/Land"}, headers=headers
    )
    assert resp.status_code == 400 and field_of(resp) == "timezone"


async def test_delete_is_204_and_the_job_is_gone(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = bearer(gw_settings, owner())
    job = await create(http, headers)
    resp = await http.delete(f"{JOBS}/{job['id']}", headers=headers)
    assert resp.status_code == 204 and resp.content == b""
    assert (await http.get(f"{JOBS}/{job['id']}", headers=headers)).status_code == 404
    assert (await http.delete(f"{JOBS}/{job['id']}", headers=headers)).status_code == 404


async def test_pause_clears_the_next_run_and_resume_restores_it(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = bearer(gw_settings, owner())
    job = await create(http, headers)
    paused = await http.post(f"{JOBS}/{job['id']}:pause", headers=headers)
    assert paused.status_code == 200, paused.text
    assert paused.json()["status"] == "paused" and "nextRunTime" not in paused.json()
    resumed = await http.post(f"{JOBS}/{job['id']}:resume", headers=headers)
    assert resumed.status_code == 200
    assert resumed.json()["status"] == "active"
    assert resumed.json()["nextRunTime"] == job["nextRunTime"]
    assert resumed.json()["version"] == 3


async def test_a_completed_job_cannot_be_paused(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = bearer(gw_settings, owner())
    soon = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    job = await create(http, headers, schedule={"type": "once", "runAt": soon})
    url = f"{JOBS}/{job['id']}"
    for _ in range(100):
        if (await http.get(url, headers=headers)).json()["status"] == "completed":
            break
        await asyncio.sleep(0.05)
    resp = await http.post(f"{url}:pause", headers=headers)
    assert resp.status_code == 409
    assert error(resp)["code"] == "FAILED_PRECONDITION"


async def _runs(
    http: httpx.AsyncClient, job_id: str, headers: dict[str, str], **params: Any
) -> dict[str, Any]:
    resp = await http.get(f"{JOBS}/{job_id}/runs", params=params, headers=headers)
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def _settled(
    http: httpx.AsyncClient, job_id: str, headers: dict[str, str]
) -> list[dict[str, Any]]:
    for _ in range(200):
        runs: list[dict[str, Any]] = (await _runs(http, job_id, headers))["runs"]
        if runs and all(r["state"] in ("succeeded", "failed", "missed") for r in runs):
            return runs
        await asyncio.sleep(0.05)
    raise AssertionError(f"runs did not settle: {runs}")


async def test_trigger_records_a_manual_run_dispatched_as_automation(
    http: httpx.AsyncClient, gw_settings: Settings, peers: Peers
) -> None:
    who = owner()
    headers = bearer(gw_settings, who)
    job = await create(http, headers)
    resp = await http.post(f"{JOBS}/{job['id']}:trigger", headers=headers)
    assert resp.status_code == 202, resp.text
    run = resp.json()
    assert run["jobId"] == job["id"] and run["trigger"] == "manual" and run["attempt"] == 1
    assert run["state"] == "dispatching" and run["errors"] == []
    assert "leaseOwner" not in run
    # A manual run is a run: the job says when it last ran (issue 33 item 9: it stayed null).
    got = await http.get(f"{JOBS}/{job['id']}", headers=headers)
    assert got.status_code == 200 and got.json()["lastRunTime"] == run["scheduledSlot"], got.text

    [done] = await _settled(http, job["id"], headers)
    assert done["id"] == run["id"] and done["state"] == "succeeded"
    assert done["runId"] and done["finishTime"] and done["scheduledSlot"] == run["scheduledSlot"]
    [call] = [c for c in peers.orchestrator.calls if c.request.run_id == done["runId"]]
    assert call.request.thread_id == f"automation:{job['id']}"
    assert call.request.origin == message_pb2.RUNTIME_MODE_AUTOMATION
    assert call.request.profile.executor == execution_profile_pb2.EXECUTOR_MEMORY
    assert call.request.profile.name == "digest"
    assert list(call.request.declared_tools) == ["memory_write"]
    assert call.metadata["x-agentmesh-owner"] == who


async def test_the_runs_listing_is_paginated_newest_first(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    headers = bearer(gw_settings, owner())
    job = await create(http, headers)
    triggered = []
    for _ in range(3):
        resp = await http.post(f"{JOBS}/{job['id']}:trigger", headers=headers)
        assert resp.status_code == 202, resp.text
        triggered.append(resp.json()["id"])
        await asyncio.sleep(0.01)  # distinct slots (a manual run's slot is the trigger time)
    await _settled(http, job["id"], headers)
    first = await _runs(http, job["id"], headers, page_size=2)
    second = await _runs(http, job["id"], headers, page_size=2, page_token=first["nextPageToken"])
    assert "nextPageToken" not in second
    assert [r["id"] for r in first["runs"] + second["runs"]] == triggered[::-1]
