"""Runs survive disconnects, crashes and concurrent input (issue 7), with real processes.

One cluster per backend: the whole suite, plus a second orchestrator and a second gateway
(gateway B talks to orchestrator B; both share history, router, executor and, on the
PostgreSQL backend, the event log in a Redis of this module's own, started on a free port so
that restarting it touches nobody else's tests).

Sizes are configurable: AGENTMESH_RESILIENCE_RUNS (runs, default 100) and
AGENTMESH_RESILIENCE_DISCONNECTS (forced disconnects per run, default 10): the defaults are
the issue's 1,000 disconnects across 100 runs (about 40 s on a 2-core machine; lower them
for a quicker run).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from services.launcher import Suite, free_port
from tests.agui_rules import check_agui
from tests.conftest import USES_POSTGRES, drop_schemas
from tests.e2e.conftest import Replicas, _dump_logs, make_suite, run_body, serves_runs, token

ROOT = Path(__file__).resolve().parents[2]
RUNS = int(os.environ.get("AGENTMESH_RESILIENCE_RUNS", "100"))
DISCONNECTS = int(os.environ.get("AGENTMESH_RESILIENCE_DISCONNECTS", "10"))
LEASE_SECONDS = 3.0
# A user text whose echoed reply streams ~60 tokens (the scripted model repeats it).
LONG = " ".join(f"word{i}" for i in range(50))
# ~4 times as long (a couple of seconds): long enough to be cancelled or crashed mid-way.
SLOW = " ".join([LONG] * 4)

Frame = tuple[int | None, dict[str, Any]]


@dataclass
class Cluster:
    a: Suite
    b: Suite
    redis_url: str | None
    redis_proc: subprocess.Popen[bytes] | None

    @property
    def gw_a(self) -> str:
        return self.a.gateway_url

    @property
    def gw_b(self) -> str:
        return self.b.gateway_url

    @property
    def shared_log(self) -> bool:
        """Redis: any replica serves any run's events. In memory (embedded: one
        orchestrator), only the replica that runs the run has its log."""
        return self.redis_url is not None

    def reader(self, i: int = 1) -> str:
        """The gateway to resume through: alternating replicas when the log is shared."""
        return self.gw_b if self.shared_log and i % 2 else self.gw_a


def _start_redis(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return proc
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)
        finally:
            client.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("resilience")
    prefix = f"r{uuid.uuid4().hex[:10]}_"
    env = {
        "AGENTMESH_SCRIPTED_TOKEN_LATENCY": "0.01",
        "AGENTMESH_RUN_LEASE_SECONDS": str(LEASE_SECONDS),
        "AGENTMESH_RUN_TIMEOUT_SECONDS": "60",
    }
    redis_proc = None
    redis_url = None
    if USES_POSTGRES:
        port = free_port()
        redis_proc = _start_redis(port)
        redis_url = f"redis://127.0.0.1:{port}/0"
        env["AGENTMESH_EVENT_LOG_URL"] = redis_url
    a = make_suite(tmp / "a", prefix, shape="split", **env)
    ours = {k: v for k, v in a.env.items() if k.startswith("AGENTMESH_")}
    b = Suite(
        ports={**a.ports, "orchestrator": free_port(), "gateway": free_port()},
        env=ours,
        log_dir=tmp / "b" / "logs",
        services=("orchestrator", "gateway"),
    )
    try:
        a.start(timeout=90)
        b.start(timeout=60)
        for gateway in (a, b):
            serves_runs(gateway.gateway_url, in_a_row=2, within=60)
    except RuntimeError:
        b.stop()
        a.stop()
        _dump_logs(tmp / "a" / "logs")
        _dump_logs(tmp / "b" / "logs")
        raise
    cluster = Cluster(a, b, redis_url, redis_proc)
    yield cluster
    b.stop()
    a.stop()
    if cluster.redis_proc is not None:  # the one running now (the test restarts it)
        cluster.redis_proc.kill()
        cluster.redis_proc.wait()
    if USES_POSTGRES:
        asyncio.run(drop_schemas(prefix))


# ---- reading streams ---------------------------------------------------------------------


def frames(raw: bytes) -> list[Frame]:
    """The complete frames of (a prefix of) an SSE body: `[id: n\\n]data: json\\n\\n`, LF only,
    one data line each; an incomplete last frame (the connection was cut) is not received."""
    assert b"\r" not in raw
    out: list[Frame] = []
    for chunk in raw.split(b"\n\n")[:-1]:
        if chunk == b": keepalive":
            continue  # the heartbeat comment of a waiting stream, not an event
        seq = None
        if chunk.startswith(b"id: "):
            head, _, chunk = chunk.partition(b"\n")
            seq = int(head[4:])
        assert chunk.startswith(b"data: ") and b"\n" not in chunk, chunk
        out.append((seq, json.loads(chunk[6:])))
    return out


def auth(owner: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(owner)}"}


async def read_until(
    client: httpx.AsyncClient, method: str, url: str, *, cut: int | None, **kw: Any
) -> tuple[int, bytes]:
    """Status and body of a request, the connection dropped after `cut` bytes (None: all)."""
    async with client.stream(method, url, **kw) as resp:
        if resp.status_code != 200:
            return resp.status_code, await resp.aread()
        raw = b""
        async for chunk in resp.aiter_raw():
            raw += chunk
            if cut is not None and len(raw) >= cut:
                return 200, raw[:cut]
        return 200, raw


async def full_log(client: httpx.AsyncClient, gw: str, owner: str, run_id: str) -> list[Frame]:
    resp = await client.get(f"{gw}/api/v1/agent/runs/{run_id}/events?after=0", headers=auth(owner))
    assert resp.status_code == 200, resp.text
    return frames(resp.content)


# ---- 1. forced disconnects, each resumed with Last-Event-ID ------------------------------


async def _disconnecting_client(
    client: httpx.AsyncClient, cluster: Cluster, owner: str, rng: random.Random
) -> tuple[str, list[Frame], int]:
    """One run read through DISCONNECTS forced disconnects at random byte offsets, each
    followed by a resume (alternating gateways) after the last id received."""
    thread_id, run_id = f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    received: list[Frame] = []
    status, raw = await read_until(
        client,
        "POST",
        f"{cluster.gw_a}/api/v1/agent/runs",
        json=run_body(thread_id, run_id, LONG),
        headers=auth(owner),
        cut=rng.randint(1, 600),
    )
    assert status == 200
    segment = frames(raw)
    check_agui([e for _, e in segment], complete=False) if segment else None
    received += [f for f in segment if f[0] is not None]
    disconnects = 1
    while True:
        last = received[-1][0] if received else 0
        if received and received[-1][1]["type"] in ("RUN_FINISHED", "RUN_ERROR"):
            break
        gw = cluster.reader(disconnects)
        cut = rng.randint(1, 600) if disconnects < DISCONNECTS else None
        status, raw = await read_until(
            client,
            "GET",
            f"{gw}/api/v1/agent/runs/{run_id}/events",
            headers={**auth(owner), "Last-Event-ID": str(last)},
            cut=cut,
        )
        if status == 204:
            break
        assert status == 200, raw
        segment = frames(raw)
        if segment:
            check_agui([e for _, e in segment], complete=cut is None)
            # Frames without id come only first (the re-opened STARTs of a resume).
            ids = [s for s, _ in segment]
            first_real = next((i for i, s in enumerate(ids) if s is not None), len(ids))
            assert all(s is not None for s in ids[first_real:])
        received += [f for f in segment if f[0] is not None]
        if cut is not None and not (
            received and received[-1][1]["type"] in ("RUN_FINISHED", "RUN_ERROR")
        ):
            disconnects += 1
    return run_id, received, disconnects


async def test_forced_disconnects_resumed_with_last_event_id_lose_and_repeat_nothing(
    cluster: Cluster,
) -> None:
    rng = random.Random(7)
    owner = "resume-owner"
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        sem = asyncio.Semaphore(10)

        async def one(i: int) -> tuple[str, list[Frame], int]:
            async with sem:
                return await _disconnecting_client(
                    client, cluster, owner, random.Random(rng.random())
                )

        results = await asyncio.gather(*(one(i) for i in range(RUNS)))
        total = 0
        for run_id, received, disconnects in results:
            total += disconnects
            log = await full_log(client, cluster.gw_a, owner, run_id)
            seqs = [s for s, _ in log]
            assert seqs[0] == 1 and seqs == sorted(set(seqs)), "the log is numbered, no repeats"
            assert received == log, f"run {run_id}: what the client received != the run's log"
            assert log[-1][1]["type"] == "RUN_FINISHED"
    print(f"{total} forced disconnects across {RUNS} runs, all resumed")
    assert total >= RUNS * DISCONNECTS * 0.9


def _node_resume(gw: str, owner: str, thread_id: str, run_id: str, last: int) -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None, "Node.js is needed for the @ag-ui/client check"
    result = subprocess.run(
        [
            node,
            str(ROOT / "tests" / "gateway" / "agui_client_check.mjs"),
            f"{gw}/api/v1/agent/runs/{run_id}/events",
            token(owner),
            thread_id,
            run_id,
            "",
            str(last),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    seen: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return seen


async def test_agui_client_accepts_streams_resumed_mid_message(cluster: Cluster) -> None:
    owner = "node-resume"
    thread_id, run_id = f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(timeout=30) as client:
        resp = await client.post(
            f"{cluster.gw_a}/api/v1/agent/runs",
            json=run_body(thread_id, run_id, LONG),
            headers=auth(owner),
        )
        log = frames(resp.content)
    contents = [s for s, e in log if e["type"] == "TEXT_MESSAGE_CONTENT"]
    for last in (contents[0], contents[len(contents) // 2], contents[-1]):
        seen = _node_resume(cluster.reader(), owner, thread_id, run_id, last)
        assert seen["ok"] is True
        assert seen["eventTypes"][0] == "RUN_STARTED" and seen["eventTypes"][-1] == "RUN_FINISHED"
        # The re-opened message carries the text so far, so the client has all of it.
        text = "".join(e["delta"] for _, e in log if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert seen["text"] == text


async def test_resume_is_owner_scoped_and_a_finished_stream_is_204(cluster: Cluster) -> None:
    thread_id, run_id = f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(timeout=30) as client:
        resp = await client.post(
            f"{cluster.gw_a}/api/v1/agent/runs",
            json=run_body(thread_id, run_id, "hello"),
            headers=auth("scoped-a"),
        )
        last = frames(resp.content)[-1][0]
        other = await client.get(
            f"{cluster.gw_b}/api/v1/agent/runs/{run_id}/events", headers=auth("scoped-b")
        )
        done = await client.get(
            f"{cluster.gw_a}/api/v1/agent/runs/{run_id}/events",
            headers={**auth("scoped-a"), "Last-Event-ID": str(last)},
        )
        # Past the end by any sequence a client may send (the Redis end marker's id is a
        # time, about 1.8e12): the same 204, at once; past 18 digits it is no sequence (400).
        far = [
            await client.get(
                f"{cluster.gw_a}/api/v1/agent/runs/{run_id}/events",
                headers={**auth("scoped-a"), "Last-Event-ID": "999999999999999999"},
                timeout=10,
            ),
            await client.get(
                f"{cluster.gw_a}/api/v1/agent/runs/{run_id}/events",
                params={"after": str(10**30)},
                headers=auth("scoped-a"),
                timeout=10,
            ),
        ]
    assert other.status_code == 404
    assert done.status_code == 204
    assert [r.status_code for r in far] == [204, 400]


# ---- 2. double-texting: two concurrent requests on one thread ------------------------------


def _strategy(name: str) -> dict[str, Any]:
    return {"forwardedProps": {"agentmesh": {"multitaskStrategy": name}}}


async def _history(
    client: httpx.AsyncClient, gw: str, owner: str, thread_id: str
) -> list[dict[str, Any]]:
    resp = await client.get(f"{gw}/api/v1/agent/threads/{thread_id}/history", headers=auth(owner))
    assert resp.status_code == 200, resp.text
    messages: list[dict[str, Any]] = resp.json()["messages"]
    return messages


async def _run_record(
    client: httpx.AsyncClient, gw: str, owner: str, run_id: str
) -> dict[str, Any]:
    resp = await client.get(f"{gw}/api/v1/agent/runs/{run_id}", headers=auth(owner))
    assert resp.status_code == 200, resp.text
    record: dict[str, Any] = resp.json()
    return record


async def _post(
    client: httpx.AsyncClient,
    gw: str,
    owner: str,
    thread_id: str,
    run_id: str,
    text: str,
    **extra: Any,
) -> httpx.Response:
    return await client.post(
        f"{gw}/api/v1/agent/runs",
        json=run_body(thread_id, run_id, text, **extra),
        headers=auth(owner),
    )


async def test_reject_refuses_the_second_of_two_concurrent_runs_naming_the_active_one(
    cluster: Cluster,
) -> None:
    owner, thread_id = "dt-reject", f"t-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(timeout=30) as client:
        first, second = await asyncio.gather(
            _post(
                client,
                cluster.gw_a,
                owner,
                thread_id,
                "r1-" + thread_id,
                LONG,
                **_strategy("reject"),
            ),
            _post(
                client,
                cluster.gw_b,
                owner,
                thread_id,
                "r2-" + thread_id,
                LONG,
                **_strategy("reject"),
            ),
        )
    by_status = sorted([first, second], key=lambda r: r.status_code)
    assert [r.status_code for r in by_status] == [200, 409]
    winner = frames(by_status[0].content)[0][1]["runId"]
    error = by_status[1].json()["error"]
    assert error["reason"] == "THREAD_BUSY" and error["activeRunId"] == winner


async def test_enqueue_runs_the_second_after_the_first_in_order(cluster: Cluster) -> None:
    owner, thread_id = "dt-enqueue", f"t-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(timeout=30) as client:
        first, second = await asyncio.gather(
            _post(client, cluster.gw_a, owner, thread_id, "r1-" + thread_id, "first " + LONG),
            _post(client, cluster.gw_b, owner, thread_id, "r2-" + thread_id, "second " + LONG),
        )
        streams = [frames(r.content) for r in (first, second)]
        for s in streams:
            check_agui([e for _, e in s], complete=True)
            assert s[-1][1]["type"] == "RUN_FINISHED" and s[-1][1]["outcome"]["type"] == "success"
        queued = [s for s in streams if any(e.get("name") == "agentmesh.run_queued" for _, e in s)]
        assert len(queued) == 1
        history = await _history(client, cluster.gw_a, owner, thread_id)
        records = [
            await _run_record(client, cluster.gw_a, owner, r)
            for r in ("r1-" + thread_id, "r2-" + thread_id)
        ]
    # One after the other: each user message is followed by its own reply.
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    assert history[0]["runId"] == history[1]["runId"] != history[2]["runId"] == history[3]["runId"]
    records.sort(key=lambda r: r["startTime"])
    assert records[0]["finishTime"] <= records[1]["startTime"]


async def _interrupting(
    cluster: Cluster, owner: str, strategy: str
) -> tuple[str, str, list[Frame], list[Frame]]:
    """A slow run, then (while it streams) a second run with `strategy` on the same thread."""
    thread_id = f"t-{uuid.uuid4().hex[:8]}"
    r1, r2 = "r1-" + thread_id, "r2-" + thread_id
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream(
            "POST",
            f"{cluster.gw_a}/api/v1/agent/runs",
            json=run_body(thread_id, r1, "first " + SLOW),
            headers=auth(owner),
        ) as resp:
            raw = b""
            second: asyncio.Task[httpx.Response] | None = None
            async for chunk in resp.aiter_raw():
                raw += chunk
                if second is None and b"TEXT_MESSAGE_CONTENT" in raw:
                    second = asyncio.create_task(
                        _post(
                            client,
                            cluster.gw_b,
                            owner,
                            thread_id,
                            r2,
                            "second question",
                            **_strategy(strategy),
                        )
                    )
        assert second is not None
        later = await second
    return thread_id, r1, frames(raw), frames(later.content)


async def test_interrupt_cancels_the_active_run_keeping_its_partial_reply(cluster: Cluster) -> None:
    owner = "dt-interrupt"
    thread_id, r1, s1, s2 = await _interrupting(cluster, owner, "interrupt")
    check_agui([e for _, e in s1], complete=True)
    assert s1[-1][1]["outcome"] == {"type": "cancelled"}
    assert s2[-1][1]["outcome"]["type"] == "success"
    async with httpx.AsyncClient(timeout=30) as client:
        history = await _history(client, cluster.gw_a, owner, thread_id)
        record = await _run_record(client, cluster.gw_a, owner, r1)
        audit = await client.get(
            f"{cluster.gw_a}/api/v1/admin/audit",
            params={"owner_id": owner, "thread_id": thread_id},
            headers=auth_admin(),
        )
    assert record["state"] == "cancelled"
    first_reply = [m for m in history if m["runId"] == r1 and m["role"] == "assistant"]
    assert len(first_reply) == 1 and first_reply[0]["content"]  # the partial reply is kept
    # ... marked as stopped, as api-endpoints.md says, in /history and in the audit; the
    # finished reply is not.
    assert first_reply[0]["finishedReason"] == "interrupted"
    assert audit.status_code == 200, audit.text
    [audited] = [m for m in audit.json()["messages"] if m["id"] == first_reply[0]["id"]]
    assert audited["finishedReason"] == "interrupted"
    assert [m.get("finishedReason") for m in history if m["role"] == "assistant"][1] == "stop"
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]


async def test_rollback_cancels_the_active_run_and_hides_its_messages(cluster: Cluster) -> None:
    owner = "dt-rollback"
    thread_id, r1, s1, s2 = await _interrupting(cluster, owner, "rollback")
    assert s1[-1][1]["outcome"] == {"type": "cancelled"}
    assert s2[-1][1]["outcome"]["type"] == "success"
    async with httpx.AsyncClient(timeout=30) as client:
        history = await _history(client, cluster.gw_a, owner, thread_id)
        audit = await client.get(
            f"{cluster.gw_a}/api/v1/admin/audit",
            params={"owner_id": owner, "thread_id": thread_id},
            headers=auth_admin(),
        )
    assert [m["runId"] for m in history] == ["r2-" + thread_id] * 2
    # Kept for audit with mask 0, never deleted.
    assert audit.status_code == 200, audit.text
    hidden = [m for m in audit.json()["messages"] if m["runId"] == r1]
    assert hidden and all(m["visibilityMask"] == 0 for m in hidden)


def auth_admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {token('auditor', admin=True)}"}


# ---- 3. cancel from another replica ------------------------------------------------------


async def test_cancel_through_another_replica_stops_the_run_and_is_harmless_twice(
    cluster: Cluster,
) -> None:
    owner, thread_id, run_id = "cancel-x", f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream(
            "POST",
            f"{cluster.gw_a}/api/v1/agent/runs",
            json=run_body(thread_id, run_id, SLOW),
            headers=auth(owner),
        ) as resp:
            raw = b""
            cancel: asyncio.Task[httpx.Response] | None = None
            began = 0.0
            async for chunk in resp.aiter_raw():
                raw += chunk
                if cancel is None and b"TEXT_MESSAGE_CONTENT" in raw:
                    began = time.monotonic()
                    cancel = asyncio.create_task(
                        client.post(
                            f"{cluster.gw_b}/api/v1/agent/runs/{run_id}:cancel", headers=auth(owner)
                        )
                    )
            ended = time.monotonic() - began
        assert cancel is not None
        first = await cancel
        again = await client.post(
            f"{cluster.gw_a}/api/v1/agent/runs/{run_id}:cancel", headers=auth(owner)
        )
        stranger = await client.post(
            f"{cluster.gw_a}/api/v1/agent/runs/{run_id}:cancel", headers=auth("someone")
        )
        history = await _history(client, cluster.gw_a, owner, thread_id)
        done_id = f"r-{uuid.uuid4().hex[:8]}"
        await _post(client, cluster.gw_a, owner, f"t-{uuid.uuid4().hex[:8]}", done_id, "hi")
        finished = await client.post(
            f"{cluster.gw_b}/api/v1/agent/runs/{done_id}:cancel", headers=auth(owner)
        )
    events = [e for _, e in frames(raw)]
    check_agui(events, complete=True)
    assert events[-1]["outcome"] == {"type": "cancelled"}
    assert ended < 2 * LEASE_SECONDS
    assert first.status_code == 200 and first.json()["cancelled"] is True
    assert again.status_code == 200 and again.json()["state"] == "cancelled"
    assert stranger.status_code == 404
    assert history[-1]["role"] == "assistant"  # the partial reply, stored
    assert finished.status_code == 409 and finished.json()["error"]["state"] == "succeeded"


# ---- 3b. interrupt / rollback posted together: none missed ----------------------------------


async def _posted_together(cluster: Cluster, owner: str, strategy: str) -> None:
    """10 short runs posted at once on one thread (through both replicas) with `strategy`:
    each one admitted cancels what is active. No run is missed (a cancel requested and yet
    a success) and no success is shown whose messages then leave the history."""
    thread_id = f"t-{uuid.uuid4().hex[:8]}"
    run_ids = [f"r{i}-{thread_id}" for i in range(10)]
    async with httpx.AsyncClient(timeout=60) as client:
        responses = await asyncio.gather(
            *(
                _post(
                    client,
                    cluster.reader(i),
                    owner,
                    thread_id,
                    run_id,
                    f"hello {i}",
                    **_strategy(strategy),
                )
                for i, run_id in enumerate(run_ids)
            )
        )
        records = [await _run_record(client, cluster.gw_a, owner, r) for r in run_ids]
        history = await _history(client, cluster.gw_a, owner, thread_id)
    visible = {m["runId"] for m in history}
    outcomes = {}
    for run_id, resp, record in zip(run_ids, responses, records, strict=True):
        assert resp.status_code == 200, resp.text
        events = [e for _, e in frames(resp.content)]
        check_agui(events, complete=True)
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
        shown = events[-1]["outcome"]["type"]
        outcomes[run_id] = shown
        # What the client was shown is what history recorded.
        assert (shown, record["state"]) in (("success", "succeeded"), ("cancelled", "cancelled"))
        if record.get("cancelRequested"):
            assert record["state"] == "cancelled", f"{run_id} missed its cancel: {record}"
        if shown == "success":
            assert run_id in visible, f"{run_id} was shown a success whose messages vanished"
        if strategy == "rollback":
            assert record.get("rolledBack", False) == (shown == "cancelled")
            assert (run_id in visible) == (shown == "success")
    assert "success" in outcomes.values()  # the last one admitted cancels nothing after it


async def test_interrupt_posted_together_misses_no_active_run(cluster: Cluster) -> None:
    await _posted_together(cluster, "together-interrupt", "interrupt")


async def test_rollback_posted_together_shows_no_success_whose_messages_vanish(
    cluster: Cluster,
) -> None:
    await _posted_together(cluster, "together-rollback", "rollback")


# ---- 4. crashes ---------------------------------------------------------------------------


async def _start_slow(client: httpx.AsyncClient, gw: str, owner: str) -> tuple[str, str, int]:
    """A slow run started and left (disconnect policy: it goes on); its last id seen."""
    thread_id, run_id = f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    text = SLOW
    status, raw = await read_until(
        client,
        "POST",
        f"{gw}/api/v1/agent/runs",
        json=run_body(thread_id, run_id, text),
        headers=auth(owner),
        cut=1500,
    )
    assert status == 200
    got = [s for s, _ in frames(raw) if s is not None]
    return thread_id, run_id, got[-1]


def _restart(cluster: Cluster, name: str) -> None:
    """Start a killed service again; wait until both gateways reach it (their channels
    reconnect: /readyz probes the peers over the gateway's own channels)."""
    cluster.a.start_service(name)
    deadline = time.monotonic() + 30
    cluster.a.wait_ready(name, deadline)
    for suite in (cluster.a, cluster.b):
        suite.wait_ready("gateway", deadline)


async def test_orchestrator_killed_mid_run_fails_the_run_within_its_lease(cluster: Cluster) -> None:
    owner = "crash-orch"
    async with httpx.AsyncClient(timeout=30) as client:
        thread_id, run_id, last = await _start_slow(client, cluster.gw_a, owner)
        os.kill(cluster.a.procs["orchestrator"].pid, signal.SIGKILL)
        cluster.a.procs["orchestrator"].wait()
        killed = time.monotonic()
        try:
            # A follower through the other replica.
            resp = await client.get(
                f"{cluster.gw_b}/api/v1/agent/runs/{run_id}/events",
                headers={**auth(owner), "Last-Event-ID": str(last)},
                timeout=30,
            )
            record = await _run_record(client, cluster.gw_b, owner, run_id)
            while record["state"] == "running" and time.monotonic() - killed < 3 * LEASE_SECONDS:
                await asyncio.sleep(0.2)
                record = await _run_record(client, cluster.gw_b, owner, run_id)
            failed_after = time.monotonic() - killed
            history = await _history(client, cluster.gw_b, owner, thread_id)
        finally:
            _restart(cluster, "orchestrator")
    assert record["state"] == "failed" and record["error"]["code"] == "LEASE_EXPIRED"
    assert failed_after < LEASE_SECONDS + 3
    if cluster.redis_url is not None:
        # The shared log: the follower is ended by the sweep with RUN_ERROR.
        assert resp.status_code == 200
        events = [e for _, e in frames(resp.content)]
        assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "LEASE_EXPIRED"
    else:
        # In memory, the log died with its orchestrator: 410 pointing at the history.
        assert resp.status_code == 410, resp.text
        assert resp.json()["error"]["history"] == f"/api/v1/agent/threads/{thread_id}/history"
    assert [m["role"] for m in history] == ["user"]  # the user message stays


async def test_redis_restarted_mid_run_the_run_completes_and_resume_is_410(
    cluster: Cluster,
) -> None:
    if cluster.redis_proc is None:
        # Embedded backend: its log is in the orchestrator's memory; losing it (a restart)
        # is covered by the orchestrator crash test (resume -> 410).
        return
    owner = "redis-restart"
    async with httpx.AsyncClient(timeout=30) as client:
        thread_id, run_id, last = await _start_slow(client, cluster.gw_a, owner)
        # The postgres pass always has a Redis URL.
        port = int(cluster.redis_url.rsplit(":", 1)[1].split("/")[0])  # type: ignore[union-attr]
        cluster.redis_proc.terminate()
        cluster.redis_proc.wait()
        cluster.redis_proc = _start_redis(port)
        record = await _run_record(client, cluster.gw_a, owner, run_id)
        deadline = time.monotonic() + 30
        while record["state"] == "running" and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            record = await _run_record(client, cluster.gw_a, owner, run_id)
        resumed = await client.get(
            f"{cluster.gw_b}/api/v1/agent/runs/{run_id}/events",
            headers={**auth(owner), "Last-Event-ID": str(last)},
        )
        history = await _history(client, cluster.gw_a, owner, thread_id)
    assert record["state"] == "succeeded"
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert resumed.status_code == 410, resumed.text
    body = resumed.json()["error"]
    assert body["code"] == "EVENTS_EXPIRED" and body["state"] == "succeeded"


# Last: the orchestrator's channel to the restarted executor reconnects only after its
# gRPC backoff, which a test after this one would wait for.
async def test_executor_killed_mid_run_ends_with_a_clear_run_error(cluster: Cluster) -> None:
    owner = "crash-exec"
    async with httpx.AsyncClient(timeout=30) as client:
        _thread_id, run_id, last = await _start_slow(client, cluster.gw_a, owner)
        os.kill(cluster.a.procs["executor"].pid, signal.SIGKILL)
        cluster.a.procs["executor"].wait()
        killed = time.monotonic()
        try:
            resp = await client.get(
                f"{cluster.gw_a}/api/v1/agent/runs/{run_id}/events",
                headers={**auth(owner), "Last-Event-ID": str(last)},
                timeout=30,
            )
            took = time.monotonic() - killed
            record = await _run_record(client, cluster.gw_a, owner, run_id)
        finally:
            _restart(cluster, "executor")
    events = [e for _, e in frames(resp.content)]
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "UNAVAILABLE"
    assert took < 10
    assert record["state"] == "failed"


# ---- 5. an executor replica killed mid-run, another replica up ------------------------------


async def _run_to_end(
    client: httpx.AsyncClient, gw: str, owner: str, text: str, seen: asyncio.Event | None = None
) -> list[dict[str, Any]]:
    """A run's whole stream; `seen` is set once its first text arrived."""
    thread_id, run_id = f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    async with client.stream(
        "POST",
        f"{gw}/api/v1/agent/runs",
        json=run_body(thread_id, run_id, text),
        headers=auth(owner),
    ) as resp:
        assert resp.status_code == 200, await resp.aread()
        raw = b""
        async for chunk in resp.aiter_raw():
            raw += chunk
            if seen is not None and b"TEXT_MESSAGE_CONTENT" in raw:
                seen.set()
    return [e for _, e in frames(raw)]


async def test_executor_replica_killed_mid_run_retries_steps_without_output_on_the_other(
    replicas: Replicas,
) -> None:
    """Executor replica a is frozen (SIGSTOP) while runs stream on both replicas and new runs
    start, then killed with SIGKILL: the steps that had not produced anything when it died
    are tried again on replica b and succeed; the steps that had end with RUN_ERROR
    UNAVAILABLE; no stream hangs."""
    owner, gw = "crash-replica", replicas.gateway_url
    proc = replicas.a.procs["executor"]
    logs = {r: replicas.log(r, "orchestrator") for r in (replicas.a, replicas.b)}
    offsets = {r: path.stat().st_size for r, path in logs.items()}
    async with httpx.AsyncClient(timeout=60) as client:
        streaming = [asyncio.Event() for _ in range(4)]
        slow = [
            asyncio.create_task(_run_to_end(client, gw, owner, SLOW, seen)) for seen in streaming
        ]
        try:
            await asyncio.wait_for(asyncio.gather(*(s.wait() for s in streaming)), 30)
            os.kill(proc.pid, signal.SIGSTOP)
            # Runs whose steps reach the frozen replica get nothing from it.
            fresh = [
                asyncio.create_task(_run_to_end(client, gw, owner, "hello replica"))
                for _ in range(6)
            ]
            await asyncio.sleep(1.0)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            # Bounded: a stream that never ended fails the test instead of hanging it.
            ended_slow = await asyncio.wait_for(asyncio.gather(*slow), 60)
            ended_fresh = await asyncio.wait_for(asyncio.gather(*fresh), 60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            replicas.a.start_service("executor")
            replicas.a.wait_ready("executor", time.monotonic() + 60)
    for events in ended_slow + ended_fresh:
        check_agui(events, complete=True)
        last = events[-1]
        if last["type"] == "RUN_ERROR":
            # Only a step that had shown output fails, with the code of a lost replica.
            assert last["code"] == "UNAVAILABLE", last
            assert any(e["type"] == "TEXT_MESSAGE_START" for e in events)
        else:
            assert last["outcome"]["type"] == "success", last
    # The new runs' steps had produced nothing on the frozen replica: all were served.
    assert all(events[-1]["type"] == "RUN_FINISHED" for events in ended_fresh)
    retried = 0
    for r, path in logs.items():
        with path.open("rb") as f:
            f.seek(offsets[r])
            retried += f.read().count(b"trying again")
    failed = sum(events[-1]["type"] == "RUN_ERROR" for events in ended_slow)
    print(f"{retried} steps tried again on the other replica; {failed} of 4 streaming runs failed")
    assert retried >= 1, "some step reached the frozen replica and was tried again"
