"""Quotas, usage and API keys against the real suite (every service a process, the
scripted model, the backend under test): an admin sets an owner's quotas, runs over them
are 429 with Retry-After and leave nothing stored, the usage the owner reads is what the
runs recorded (chat and automation runs alike), and an API key runs a chat run as its
owner."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx

from services.gateway.usage import TOKENS_CACHE_SECONDS
from services.launcher import Suite
from tests.e2e.conftest import parse_sse, run_body, token


def _auth(owner: str, *, admin: bool = False) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(owner, admin=admin)}"}


def _chat(client: httpx.Client, headers: dict[str, str]) -> tuple[httpx.Response, str]:
    run_id = f"r-{uuid.uuid4().hex[:10]}"
    resp = client.post(
        "/api/v1/agent/runs", json=run_body(f"t-{run_id}", run_id, "hello"), headers=headers
    )
    return resp, run_id


def _tokens(resp: httpx.Response) -> int:
    events = parse_sse(resp.content)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    # A parsed SSE event: JSON of any shape.
    usage: list[dict[str, Any]] = events[-1].get("usage", [])  # type: ignore[assignment]
    return sum(int(u["totalTokens"]) for u in usage)


def _usage(client: httpx.Client, owner: str) -> dict[str, Any]:
    resp = client.get("/api/v1/usage", headers=_auth(owner))
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def _run_tokens(client: httpx.Client, owner: str, run_id: str) -> tuple[int, bool]:
    """The run record's usage (GET /api/v1/agent/runs/{id}): tokens, and if estimated."""
    resp = client.get(f"/api/v1/agent/runs/{run_id}", headers=_auth(owner))
    assert resp.status_code == 200, resp.text
    usage = resp.json().get("usage", [])
    return sum(int(u["totalTokens"]) for u in usage), any(u.get("estimated") for u in usage)


def _triggered_run(client: httpx.Client, owner: str, job_id: str) -> dict[str, Any]:
    """`:trigger` the job and wait for that job run to end."""
    url = f"/api/v1/automation/jobs/{job_id}"
    triggered = client.post(f"{url}:trigger", headers=_auth(owner))
    assert triggered.status_code == 202, triggered.text
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = client.get(f"{url}/runs", headers=_auth(owner)).json()["runs"]
        [run] = [r for r in runs if r["id"] == triggered.json()["id"]]
        if run["state"] in ("succeeded", "failed"):
            return dict(run)
        time.sleep(0.3)
    raise AssertionError("the triggered job run did not end")


def test_an_owner_over_the_quotas_an_admin_set_is_429_and_nothing_is_stored(suite: Suite) -> None:
    owner = f"quota-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=suite.gateway_url, timeout=30) as client:
        put = client.put(
            f"/api/v1/admin/owners/{owner}/quotas",
            json={"runsPerMinute": 3},
            headers=_auth("ops", admin=True),
        )
        assert put.status_code == 200, put.text
        tokens = 0
        for _ in range(3):
            resp, _ = _chat(client, _auth(owner))
            assert resp.status_code == 200, resp.text
            tokens += _tokens(resp)
        refused, run_id = _chat(client, _auth(owner))
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["reason"] == "QUOTA_EXCEEDED"
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        # Nothing of the refused run was stored.
        assert client.get(f"/api/v1/agent/runs/{run_id}", headers=_auth(owner)).status_code == 404
        threads = client.get("/api/v1/agent/threads", headers=_auth(owner)).json()["threads"]
        assert len(threads) == 3
        # The usage the owner reads is what the runs reported.
        usage = _usage(client, owner)
        assert usage["total"]["runs"] == 3
        assert usage["total"]["totalTokens"] == tokens
        assert usage["current"]["tokensToday"] == tokens
        # Tokens per day: at the owner's use already, the next run is refused until midnight.
        client.put(
            f"/api/v1/admin/owners/{owner}/quotas",
            json={"tokensPerDay": tokens},
            headers=_auth("ops", admin=True),
        )
        assert tokens > 0  # the scripted model's runs report (estimated) usage
        # A gateway reads the owner's tokens at most every 2 s (services/gateway/usage.py).
        time.sleep(TOKENS_CACHE_SECONDS + 0.2)
        over, _ = _chat(client, _auth(owner))
        assert over.status_code == 429, over.text
        assert over.json()["error"]["quota"] == "tokens per day"


def test_an_api_key_runs_a_chat_run_as_its_owner_until_revoked(suite: Suite) -> None:
    owner = f"svc-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=suite.gateway_url, timeout=30) as client:
        made = client.post(
            "/api/v1/admin/api-keys",
            json={"ownerId": owner, "name": "backend"},
            headers=_auth("ops", admin=True),
        )
        assert made.status_code == 201, made.text
        key = {"Authorization": f"Bearer {made.json()['key']}"}
        resp, run_id = _chat(client, key)
        assert resp.status_code == 200, resp.text
        assert parse_sse(resp.content)[-1]["type"] == "RUN_FINISHED"
        # The run is the key owner's.
        assert client.get(f"/api/v1/agent/runs/{run_id}", headers=_auth(owner)).status_code == 200
        assert client.get(f"/api/v1/agent/runs/{run_id}", headers=_auth("other")).status_code == 404
        revoked = client.delete(
            f"/api/v1/admin/api-keys/{made.json()['id']}", headers=_auth("ops", admin=True)
        )
        assert revoked.status_code == 200
        assert _chat(client, key)[0].status_code == 401


def test_usage_counts_automation_runs_and_chat_runs_from_their_run_records(suite: Suite) -> None:
    owner = f"usage-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=suite.gateway_url, timeout=30) as client:
        registered = client.post("/api/v1/users", json={}, headers=_auth(owner))
        assert registered.status_code == 200, registered.text
        [job] = [j for j in registered.json()["jobs"] if j["defaultJob"]]
        resp, chat_id = _chat(client, _auth(owner))
        assert resp.status_code == 200, resp.text
        # The memory job reads the chat, so its model call has tokens to count.
        job_run = _triggered_run(client, owner, job["id"])
        assert job_run["state"] == "succeeded", job_run
        automation_tokens, automation_estimated = _run_tokens(client, owner, job_run["runId"])
        chat_tokens, chat_estimated = _run_tokens(client, owner, chat_id)
        assert chat_tokens == _tokens(resp) > 0
        assert automation_tokens > 0

        usage = _usage(client, owner)
        total = usage["total"]
        assert (total["runs"], total["automationRuns"], total["failedRuns"]) == (2, 1, 0)
        assert total["totalTokens"] == chat_tokens + automation_tokens
        assert total["inputTokens"] + total["outputTokens"] == total["totalTokens"]
        assert total["durationMs"] > 0
        assert total["tokensEstimated"] is (chat_estimated or automation_estimated)
        assert usage["current"]["tokensToday"] == total["totalTokens"]
        # The admin's view is the same numbers.
        admin = client.get(f"/api/v1/admin/owners/{owner}/usage", headers=_auth("ops", admin=True))
        assert admin.status_code == 200, admin.text
        assert admin.json()["total"] == total
        # The automation run's tokens count against the tokens-per-day quota too.
        client.put(
            f"/api/v1/admin/owners/{owner}/quotas",
            json={"tokensPerDay": chat_tokens + automation_tokens},
            headers=_auth("ops", admin=True),
        )
        time.sleep(TOKENS_CACHE_SECONDS + 0.2)
        over, _ = _chat(client, _auth(owner))
        assert over.status_code == 429, over.text
        assert over.json()["error"]["quota"] == "tokens per day"


def test_triggering_a_job_over_the_quotas_is_429_and_records_no_job_run(suite: Suite) -> None:
    owner = f"trig-{uuid.uuid4().hex[:8]}"
    admin = _auth("ops", admin=True)
    with httpx.Client(base_url=suite.gateway_url, timeout=30) as client:
        registered = client.post("/api/v1/users", json={}, headers=_auth(owner))
        assert registered.status_code == 200, registered.text
        [job] = [j for j in registered.json()["jobs"] if j["defaultJob"]]
        url = f"/api/v1/automation/jobs/{job['id']}"
        client.put(f"/api/v1/admin/owners/{owner}/quotas", json={"runsPerMinute": 1}, headers=admin)
        resp, _ = _chat(client, _auth(owner))
        assert resp.status_code == 200, resp.text
        # The chat run took the minute's one run: a trigger is a run too.
        refused = client.post(f"{url}:trigger", headers=_auth(owner))
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["quota"] == "runs per minute"
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        # Tokens per day: the owner's use is at the quota, so no trigger spends more.
        client.put(
            f"/api/v1/admin/owners/{owner}/quotas",
            json={"tokensPerDay": _tokens(resp)},
            headers=admin,
        )
        time.sleep(TOKENS_CACHE_SECONDS + 0.2)
        over = client.post(f"{url}:trigger", headers=_auth(owner))
        assert over.status_code == 429, over.text
        assert over.json()["error"]["quota"] == "tokens per day"
        assert client.get(f"{url}/runs", headers=_auth(owner)).json()["runs"] == []
        # Within its quotas the owner triggers it as before.
        client.delete(f"/api/v1/admin/owners/{owner}/quotas", headers=admin)
        assert client.post(f"{url}:trigger", headers=_auth(owner)).status_code == 202


def test_deleting_the_threads_or_the_owner_does_not_give_the_days_tokens_back(
    suite: Suite,
) -> None:
    """The usage ledger (issue 33): spend the day's tokens, delete the threads that spent
    them, and the next run is still 429; an owner deletion keeps the owner's sums."""
    owner = f"ledger-{uuid.uuid4().hex[:8]}"
    admin = _auth("ops", admin=True)
    with httpx.Client(base_url=suite.gateway_url, timeout=30) as client:
        spent = 0
        threads = []
        for _ in range(2):
            resp, run_id = _chat(client, _auth(owner))
            assert resp.status_code == 200, resp.text
            spent += _tokens(resp)
            threads.append(f"t-{run_id}")
        assert spent > 0
        put = client.put(
            f"/api/v1/admin/owners/{owner}/quotas", json={"tokensPerDay": spent}, headers=admin
        )
        assert put.status_code == 200, put.text
        time.sleep(TOKENS_CACHE_SECONDS + 0.2)
        assert _chat(client, _auth(owner))[0].status_code == 429

        for thread in threads:
            gone = client.delete(f"/api/v1/agent/threads/{thread}", headers=_auth(owner))
            assert gone.status_code == 200, gone.text
        time.sleep(TOKENS_CACHE_SECONDS + 0.2)
        over, _ = _chat(client, _auth(owner))
        assert over.status_code == 429, over.text
        assert over.json()["error"]["quota"] == "tokens per day"
        usage = _usage(client, owner)
        assert (usage["total"]["runs"], usage["current"]["tokensToday"]) == (2, spent)

        deleted = client.delete("/api/v1/users/me", headers=_auth(owner))
        assert deleted.status_code == 202, deleted.text
        record = f"/api/v1/admin/users/{owner}/deletions/{deleted.json()['id']}"
        deadline = time.monotonic() + 60
        while (state := client.get(record, headers=admin).json()["state"]) != "succeeded":
            assert time.monotonic() < deadline, state
            time.sleep(0.3)
        kept = client.get(f"/api/v1/admin/owners/{owner}/usage", headers=admin)
        assert kept.status_code == 200, kept.text
        assert kept.json()["total"] == usage["total"]
