"""Issue 6, end to end on the real processes: a registered user's daily memory job, once its
next run is due, is claimed by the scheduler's claim loop and runs the memory agent exactly
once for that slot; the run's input is hidden, its reply is in /history but never context."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from services.launcher import Suite
from tests.conftest import USES_POSTGRES, drop_schemas
from tests.e2e.conftest import make_suite, parse_sse, run_body, token

pytestmark = pytest.mark.e2e

ZONE = "Europe/Berlin"
# A slot at least this far ahead, so the update lands before the slot is due.
LEAD_SECONDS = 8
# The run itself (claim interval, orchestrator, executor, history) after the slot.
RUN_SECONDS = 45


def _get(
    suite: Suite, path: str, who: str, *, admin: bool = False, **params: Any
) -> dict[str, Any]:
    resp = httpx.get(
        f"{suite.gateway_url}{path}",
        params=params,
        headers={"Authorization": f"Bearer {token(who, admin=admin)}"},
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def _next_minute(zone: ZoneInfo) -> datetime:
    """The first whole local minute at least LEAD_SECONDS from now (a daily slot's instant)."""
    soon = datetime.now(zone) + timedelta(seconds=LEAD_SECONDS)
    return soon.replace(second=0, microsecond=0) + timedelta(minutes=1)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content", "")
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def test_a_due_daily_memory_job_runs_the_memory_agent_once(tmp_path: Path) -> None:
    prefix = f"e{uuid.uuid4().hex[:10]}_"
    suite = make_suite(tmp_path, prefix, AGENTMESH_SCHEDULER_CLAIM_INTERVAL_SECONDS="0.2")
    who = f"sched-{uuid.uuid4().hex[:8]}"
    auth = {"Authorization": f"Bearer {token(who)}"}
    try:
        suite.start(timeout=90)
        # Something for the memory agent to read: a chat turn of today.
        chat = httpx.post(
            f"{suite.gateway_url}/api/v1/agent/runs",
            json=run_body(
                f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}", "I love green tea."
            ),
            headers=auth,
            timeout=30,
        )
        assert chat.status_code == 200, chat.text
        assert parse_sse(chat.content)[-1]["type"] == "RUN_FINISHED"

        # Registration gives the daily 10:00 memory job in the user's zone.
        registered = httpx.post(
            f"{suite.gateway_url}/api/v1/users", json={"timezone": ZONE}, headers=auth, timeout=10
        )
        assert registered.status_code == 200, registered.text
        [job] = [j for j in registered.json()["jobs"] if j["defaultJob"]]
        assert job["schedule"] == {"type": "daily", "localTime": "10:00"}
        assert job["timezone"] == ZONE
        assert job["executionProfile"]["executor"] == "memory"
        job_url = f"{suite.gateway_url}/api/v1/automation/jobs/{job['id']}"

        # Make its next slot a daily slot a few seconds away; the claim loop does the rest.
        slot = _next_minute(ZoneInfo(ZONE))
        moved = httpx.patch(
            job_url,
            json={
                "version": job["version"],
                "schedule": {"type": "daily", "localTime": slot.strftime("%H:%M")},
            },
            headers=auth,
            timeout=10,
        )
        assert moved.status_code == 200, moved.text
        slot_utc = slot.astimezone(UTC)
        assert datetime.fromisoformat(moved.json()["nextSlotTime"]) == slot_utc

        deadline = slot_utc.timestamp() + RUN_SECONDS
        runs: list[dict[str, Any]] = []
        while time.time() < deadline:
            runs = _get(suite, f"/api/v1/automation/jobs/{job['id']}/runs", who)["runs"]
            if runs and runs[0]["state"] in ("succeeded", "failed"):
                break
            time.sleep(0.5)
        assert runs, "the due slot was never claimed"
        time.sleep(1.0)  # a few more claim passes: nothing may be recorded twice
        runs = _get(suite, f"/api/v1/automation/jobs/{job['id']}/runs", who)["runs"]

        # Exactly one run, for that slot, from the schedule, succeeded on its first attempt.
        assert len(runs) == 1, runs
        [run] = runs
        assert run["state"] == "succeeded", run
        assert run["trigger"] == "schedule" and run["attempt"] == 1 and run["errors"] == []
        assert datetime.fromisoformat(run["scheduledSlot"]) == slot_utc
        after = _get(suite, f"/api/v1/automation/jobs/{job['id']}", who)
        assert datetime.fromisoformat(after["lastSlotTime"]) == slot_utc
        assert datetime.fromisoformat(after["nextSlotTime"]) == slot_utc + timedelta(days=1)

        # The orchestrator run: on the job's automation thread, memory executor, no router.
        record = _get(suite, f"/api/v1/agent/runs/{run['runId']}", who)
        thread_id = record["threadId"]
        assert thread_id == f"automation:{job['id']}"
        assert record["state"] == "succeeded" and record["origin"] == "automation"
        assert record["profile"]["executor"] == "memory"
        assert record["profile"]["enableRouter"] is False

        # /history: the reply is there, the input (the job's prompt) is not.
        history = _get(suite, f"/api/v1/agent/threads/{thread_id}/history", who)["messages"]
        assert history, "the automation reply must be visible in history"
        assert all(m["role"] != "user" for m in history), history
        assert all(_text(m) != job["config"]["prompt"] for m in history)
        replies = [m for m in history if m["kind"] == "agent_reply"]
        assert replies and all(_text(m) for m in replies)
        for m in history:
            assert m["metadata"]["origin"] == "automation" and m["metadata"]["executor"] == "memory"
            assert m["metadata"]["hiddenFromUser"] is False

        # The audit sees both; the masks say hidden input (0) and history-only reply (1: not
        # assembled into any context).
        audit = _get(
            suite,
            "/api/v1/admin/audit",
            "auditor",
            admin=True,
            owner_id=who,
            thread_id=thread_id,
            origin="automation",
            executor="memory",
        )["messages"]
        inputs = [m for m in audit if m["kind"] == "user_message"]
        assert len(inputs) == 1 and _text(inputs[0]) == job["config"]["prompt"]
        assert inputs[0]["visibilityMask"] == 0 and inputs[0]["metadata"]["hiddenFromUser"] is True
        audited_replies = [m for m in audit if m["kind"] == "agent_reply"]
        assert {m["id"] for m in audited_replies} == {m["id"] for m in replies}
        assert all(m["visibilityMask"] == 1 for m in audit if m["kind"] != "user_message")
        for m in audit:
            assert m["metadata"]["origin"] == "automation" and m["metadata"]["executor"] == "memory"
            assert m["runId"] == run["runId"]

        # What the memory agent did with the chat turn.
        memories = _get(suite, "/api/v1/memories", who)["memories"]
        assert any("green tea" in m["content"] for m in memories), memories
    finally:
        suite.stop()
        if USES_POSTGRES:
            asyncio.run(drop_schemas(prefix))
