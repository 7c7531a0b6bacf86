"""A rolling restart of the orchestrator and executor replicas under load loses no stored
message (issue 7), with real processes.

Four clients start chat runs through the gateway one after another while the executor
replicas, then the orchestrator replicas, are restarted one at a time (SIGTERM: graceful
shutdown, then started again); each restarted replica serves calls again before the next one
goes down. Every run a client saw succeed has its user message and its reply in /history,
no run stays running, and a run refused or cut during a restart says so clearly (503 or
RUN_ERROR UNAVAILABLE), never with a 500 or a hang.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from services.launcher import Suite
from tests.e2e.conftest import Replicas, run_body, token
from tests.e2e.test_resilience import check_agui, frames

CLIENTS = 4
# A reply of ~20 streamed tokens (the scripted model echoes the text): a fraction of a second.
TEXT = " ".join(f"word{i}" for i in range(20))
# The calls each restarted service serves (their access lines tell which replica served them).
METHODS = {"executor": "Execute", "orchestrator": "StartRun"}
# Upper bound of any single wait of the test: past it, something hangs.
PATIENCE = 30.0


@dataclass
class Attempt:
    thread_id: str
    run_id: str
    status: int
    events: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] = field(default_factory=dict)

    @property
    def succeeded(self) -> bool:
        return (
            self.status == 200
            and self.events[-1]["type"] == "RUN_FINISHED"
            and self.events[-1]["outcome"]["type"] == "success"
        )


def auth(owner: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(owner)}"}


async def _one_run(client: httpx.AsyncClient, gw: str, owner: str) -> Attempt:
    thread_id, run_id = f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    async with client.stream(
        "POST",
        f"{gw}/api/v1/agent/runs",
        json=run_body(thread_id, run_id, TEXT),
        headers=auth(owner),
    ) as resp:
        body = await resp.aread()
    if resp.status_code != 200:
        return Attempt(thread_id, run_id, resp.status_code, error=resp.json()["error"])
    return Attempt(thread_id, run_id, 200, events=[e for _, e in frames(body)])


async def _load(
    client: httpx.AsyncClient, gw: str, owner: str, stop: asyncio.Event, out: list[Attempt]
) -> None:
    while not stop.is_set():
        attempt = await _one_run(client, gw, owner)
        out.append(attempt)
        if attempt.status != 200:
            await asyncio.sleep(0.1)  # a refused client waits a moment before trying again


async def _serves_again(replicas: Replicas, replica: Suite, name: str, since: int) -> None:
    """Wait until `replica`'s `name` has served calls (after log offset `since`) from each of
    its callers: the gateway for an orchestrator; both orchestrators for an executor (each
    has its own channel, which reconnects on its own), told apart by the request id that the
    orchestrator's own StartRun carried."""
    deadline = time.monotonic() + PATIENCE
    while True:
        served = replicas.served(replica, name, METHODS[name], since)
        if name == "orchestrator":
            callers_seen = bool(served)
        else:
            callers_seen = all(
                served & replicas.served(caller, "orchestrator", "StartRun")
                for caller in (replicas.a, replicas.b)
            )
        if callers_seen:
            return
        assert time.monotonic() < deadline, f"{name} did not serve every caller again"
        await asyncio.sleep(0.1)


async def test_rolling_restart_under_load_loses_no_stored_message(replicas: Replicas) -> None:
    owner, gw = "rolling", replicas.gateway_url
    attempts: list[Attempt] = []
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=CLIENTS * 2)
    async with httpx.AsyncClient(timeout=PATIENCE, limits=limits) as client:
        load = [
            asyncio.create_task(_load(client, gw, owner, stop, attempts)) for _ in range(CLIENTS)
        ]
        try:
            # Every replica takes part before the first goes down.
            for name in METHODS:
                for replica in (replicas.a, replicas.b):
                    await _serves_again(replicas, replica, name, 0)
            for name in METHODS:
                for replica in (replicas.a, replicas.b):
                    since = await asyncio.to_thread(replicas.restart, replica, name)
                    await _serves_again(replicas, replica, name, since)
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*load), PATIENCE)
        records = {
            a.run_id: (await client.get(f"{gw}/api/v1/agent/runs/{a.run_id}", headers=auth(owner)))
            for a in attempts
        }
        histories = {
            a.run_id: (
                await client.get(
                    f"{gw}/api/v1/agent/threads/{a.thread_id}/history", headers=auth(owner)
                )
            ).json()["messages"]
            for a in attempts
            if a.succeeded
        }
    succeeded = [a for a in attempts if a.succeeded]
    refused = [a for a in attempts if a.status != 200]
    cut = [a for a in attempts if a.status == 200 and not a.succeeded]
    print(
        f"{len(attempts)} runs: {len(succeeded)} succeeded, {len(refused)} refused, "
        f"{len(cut)} ended with RUN_ERROR"
    )
    assert len(succeeded) > len(attempts) // 2
    for a in refused:
        assert a.status == 503 and a.error["code"] == "UNAVAILABLE", (a.status, a.error)
    for a in cut:
        check_agui(a.events, complete=True)
        assert a.events[-1]["type"] == "RUN_ERROR", a.events[-1]
        assert a.events[-1]["code"] == "UNAVAILABLE", a.events[-1]
    for a in succeeded:
        check_agui(a.events, complete=True)
        messages = histories[a.run_id]
        assert [(m["role"], m["runId"]) for m in messages] == [
            ("user", a.run_id),
            ("assistant", a.run_id),
        ], messages
        assert messages[0]["id"] == f"m-{a.run_id}" and messages[1]["content"]
    # No run stays running: each one the orchestrator admitted ended in its record.
    for a in attempts:
        resp = records[a.run_id]
        if a.status != 200:
            assert resp.status_code in (200, 404), resp.text
            if resp.status_code == 404:
                continue  # refused before it was admitted: there is no record
        assert resp.status_code == 200, resp.text
        state = resp.json()["state"]
        assert state == ("succeeded" if a.succeeded else "failed"), (a.run_id, state)
