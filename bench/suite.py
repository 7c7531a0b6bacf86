"""Chat runs through the real suite: throughput and latency at several concurrencies, one
long stream's event rate, and each service's resident memory.

Clients are separate processes (multiprocessing), each running asyncio workers that POST
runs to the gateway and read the SSE stream to RUN_FINISHED.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp

from bench.stats import summary_ms
from services.gateway.auth import issue_token
from services.launcher import ALL_SERVICES, Suite, free_port
from shared.settings import Settings

SECRET = "bench-secret-of-at-least-thirty-two-bytes!"
PG_URL = os.environ.get("AGENTMESH_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("AGENTMESH_BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")


def start_suite(
    backend: str,
    tmp: Path,
    prefix: str,
    extra_env: dict[str, str] | None = None,
    shape: str = "split",
) -> Suite:
    """The suite on free ports: one process per service (shape "split"), or every service
    in one process (shape "all": python -m services --target all)."""
    env = {
        "AGENTMESH_DATA_DIR": str(tmp / "data"),
        "AGENTMESH_JWT_SECRET": SECRET,
        "AGENTMESH_DB_SCHEMA_PREFIX": prefix,
        "AGENTMESH_DATABASE_URL": PG_URL if backend == "postgres" else "",
        "AGENTMESH_EVENT_LOG_URL": REDIS_URL if backend == "postgres" else "memory://",
        "AGENTMESH_EVENT_LOG_PREFIX": f"{prefix}run:",
        "AGENTMESH_LOG_LEVEL": "WARNING",
        # Quotas off: the bench drives many runs as one owner.
        "AGENTMESH_QUOTA_RUNS_PER_MINUTE": "0",
        "AGENTMESH_QUOTA_CONCURRENT_RUNS": "0",
        "AGENTMESH_QUOTA_TOKENS_PER_DAY": "0",
        "AGENTMESH_RUN_TIMEOUT_SECONDS": "120",
        "AGENTMESH_RPC_TIMEOUT_SECONDS": "30",
        # The long-stream run sends ~10,000 words and gets them streamed back.
        "AGENTMESH_MAX_MESSAGE_CHARS": "200000",
    }
    env.update(extra_env or {})
    suite = Suite(
        ports={n: free_port() for n in ALL_SERVICES}, env=env, log_dir=tmp / "logs", shape=shape
    )
    suite.start(timeout=120)
    return suite


def token(owner: str) -> str:
    return issue_token(Settings(jwt_secret=SECRET), owner, ttl_seconds=86_400)


def http_client(connections: int, timeout: float) -> aiohttp.ClientSession:
    """The load clients' HTTP client, also the floor's SSE client (bench/floor.py), so the two
    are measured alike. aiohttp rather than httpx: the clients share the 2 cores with the
    suite, and aiohttp takes about a quarter of httpx's client CPU per run (bench.cpu, in the
    load window). `timeout` bounds connecting (including the wait for a pooled connection)
    and each read, not the whole response."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections),
        timeout=aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout),
    )


# The peer (bench/peer.py): LangGraph's API server running the graph "agent"; the stream
# ends when the run has. LANGGRAPH_THREADS is the like-for-like anchor: a thread run
# (`POST /threads/{id}/runs/stream`, the thread created by the run as agentmesh's run creates
# its thread), which stores its checkpoints as every agentmesh run stores its run.
# LANGGRAPH is the stateless `/runs/stream`, lighter work, kept beside it as a figure.
LANGGRAPH = "langgraph"
LANGGRAPH_THREADS = "langgraph-threads"
PEER_APIS = (LANGGRAPH, LANGGRAPH_THREADS)


def run_url(base: str, api: str = "agentmesh") -> str:
    """Where a run is started and streamed, for the load clients (a thread run appends
    `/{thread id}/runs/stream` to it)."""
    if api == LANGGRAPH_THREADS:
        return f"{base}/threads"
    return f"{base}/runs/stream" if api == LANGGRAPH else f"{base}/api/v1/agent/runs"


async def _langgraph_run(
    client: aiohttp.ClientSession, url: str, text: str, started: float, api: str
) -> tuple[float, float, int]:
    body: dict[str, Any] = {
        "assistant_id": "agent",
        "input": {"messages": [{"role": "human", "content": text}]},
        "stream_mode": ["values"],
    }
    if api == LANGGRAPH_THREADS:
        url = f"{url}/{uuid.uuid4()}/runs/stream"
        body["if_not_exists"] = "create"
    first = 0.0
    events = 0
    tail = b""
    async with client.post(url, json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.read())[:200]!r}")
        async for chunk in resp.content.iter_any():
            if not first:
                first = time.perf_counter() - started
            events += chunk.count(b"\n\n")
            tail = (tail + chunk)[-4096:]
            if b"event: error" in tail:
                raise RuntimeError("run failed: " + tail[-300:].decode(errors="replace"))
    return first, time.perf_counter() - started, events


async def one_run(
    client: aiohttp.ClientSession, url: str, auth: str, text: str, api: str = "agentmesh"
) -> tuple[float, float, int]:
    """(time to first event, time to RUN_FINISHED (the peer: to the stream's end), events)
    of one run, in seconds."""
    started = time.perf_counter()
    if api in PEER_APIS:
        return await _langgraph_run(client, url, text, started, api)
    thread_id = f"b-{uuid.uuid4().hex[:12]}"
    body = {
        "threadId": thread_id,
        "runId": f"r-{uuid.uuid4().hex[:12]}",
        "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": text}],
    }
    first = 0.0
    events = 0
    async with client.post(url, json=body, headers={"Authorization": auth}) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.read())[:200]!r}")
        buffer = b""
        async for chunk in resp.content.iter_any():
            if not first:
                first = time.perf_counter() - started
            buffer += chunk
            events += chunk.count(b"\n\n")
            if b'"RUN_FINISHED"' in buffer[-4096:] or b'"RUN_ERROR"' in buffer[-4096:]:
                if b'"RUN_ERROR"' in buffer:
                    raise RuntimeError("run failed: " + buffer[-300:].decode(errors="replace"))
                buffer = buffer[-4096:]
    return first, time.perf_counter() - started, events


class _Tally:
    """What one client process saw of its runs."""

    def __init__(self, url: str, text: str, api: str) -> None:
        self.url, self.text, self.api = url, text, api
        self.auth = f"Bearer {token('bench-' + uuid.uuid4().hex[:6])}"
        self.firsts: list[float] = []
        self.totals: list[float] = []
        self.errors: list[str] = []

    async def run(self, client: aiohttp.ClientSession, late: float = 0.0) -> None:
        """One run; `late`: how long after its scheduled start it began (counted in)."""
        try:
            f, t, _ = await one_run(client, self.url, self.auth, self.text, self.api)
        except Exception as err:  # the benchmark counts failures, it does not stop
            self.errors.append(f"{type(err).__name__}: {err}"[:200])
            return
        self.firsts.append(f + late)
        self.totals.append(t + late)

    def result(self, **more: Any) -> dict[str, Any]:
        return {"firsts": self.firsts, "totals": self.totals, "errors": self.errors, **more}


def _client_process(
    url: str, concurrency: int, duration: float, text: str, api: str, out: Any
) -> None:
    import uvloop

    async def main() -> dict[str, Any]:
        tally = _Tally(url, text, api)
        async with http_client(concurrency + 4, timeout=120) as client:
            deadline = time.perf_counter() + duration

            async def worker() -> None:
                while time.perf_counter() < deadline:
                    await tally.run(client)

            began, cpu_began = time.time(), time.process_time()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            ended, cpu = time.time(), time.process_time() - cpu_began
        return tally.result(began=began, ended=ended, cpu_s=cpu)

    out.send(uvloop.run(main()))
    out.close()


def run_clients(target: Any, arguments: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """`target(*args, pipe)` in a client process per entry of `arguments`; what each sent."""
    ctx = mp.get_context("spawn")
    pipes, workers = [], []
    for args in arguments:
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=target, args=(*args, child))
        p.start()
        pipes.append(parent)
        workers.append(p)
    results = [pipe.recv() for pipe in pipes]
    for p in workers:
        p.join()
    return results


def load(
    suite: Suite | str,
    concurrency: int,
    duration: float,
    processes: int,
    text: str = "Hello benchmark",
    api: str = "agentmesh",
) -> dict[str, Any]:
    """Runs/s and latency at `concurrency` concurrent runs spread over client processes;
    `suite` is the suite or the base URL of a server speaking `api`."""
    base = suite if isinstance(suite, str) else suite.gateway_url
    url = run_url(base, api)
    procs = max(1, min(processes, concurrency))
    per = [concurrency // procs + (1 if i < concurrency % procs else 0) for i in range(procs)]
    results = run_clients(_client_process, [(url, n, duration, text, api) for n in per])
    # The load window: from the first client's first request to the last client's last
    # answer (client processes take a while to start; that is not the suite's time).
    elapsed = max(r["ended"] for r in results) - min(r["began"] for r in results)
    firsts = [x for r in results for x in r["firsts"]]
    totals = [x for r in results for x in r["totals"]]
    errors = [x for r in results for x in r["errors"]]
    return {
        "concurrency": concurrency,
        "runs": len(totals),
        "errors": len(errors),
        "error_samples": errors[:3],
        # The clients' own CPU over their load windows, without process start and imports.
        "client_cpu_s": round(sum(r["cpu_s"] for r in results), 3),
        "runs_per_s": round(len(totals) / elapsed, 1),
        "first_event": summary_ms(firsts),
        "run_finished": summary_ms(totals),
    }


async def poisson_arrivals(
    rate: float, duration: float, seed: int, start: Callable[[float], Coroutine[Any, Any, Any]]
) -> list[float]:
    """`start(late)` at each arrival of a Poisson process of `rate` per second for
    `duration` seconds, whatever the earlier ones are doing; waits for them all. `late` is
    how long after its scheduled arrival it was started, for the caller to time it from
    the arrival, so a late start counts against the server (no coordinated omission).
    Returns every arrival's lateness."""
    import random

    rng = random.Random(seed)
    began = time.perf_counter()
    arrival = began
    tasks: list[asyncio.Task[Any]] = []
    lates: list[float] = []
    while True:
        arrival += rng.expovariate(rate)
        if arrival - began > duration:
            break
        await asyncio.sleep(max(0.0, arrival - time.perf_counter()))
        late = time.perf_counter() - arrival
        lates.append(late)
        tasks.append(asyncio.create_task(start(late)))
    await asyncio.gather(*tasks)
    return lates


def _open_loop_process(
    url: str, rate: float, duration: float, text: str, api: str, seed: int, out: Any
) -> None:
    import uvloop

    async def main() -> dict[str, Any]:
        tally = _Tally(url, text, api)
        async with http_client(4096, timeout=120) as client:
            lates = await poisson_arrivals(
                rate, duration, seed, lambda late: tally.run(client, late)
            )
        return tally.result(arrivals=len(lates))

    out.send(uvloop.run(main()))
    out.close()


def open_loop(
    suite: Suite | str,
    rate: float,
    duration: float,
    processes: int,
    text: str = "Hello benchmark",
    api: str = "agentmesh",
) -> dict[str, Any]:
    """Runs arriving as a Poisson process of `rate` runs/s (spread over client processes),
    each started at its arrival whatever is still running: latency below saturation."""
    base = suite if isinstance(suite, str) else suite.gateway_url
    url = run_url(base, api)
    procs = max(1, processes)
    results = run_clients(
        _open_loop_process,
        [(url, rate / procs, duration, text, api, 1000 + i) for i in range(procs)],
    )
    totals = [x for r in results for x in r["totals"]]
    errors = [x for r in results for x in r["errors"]]
    return {
        "rate_per_s": round(rate, 1),
        "arrivals": sum(r["arrivals"] for r in results),
        "runs": len(totals),
        "errors": len(errors),
        "error_samples": errors[:3],
        "first_event": summary_ms([x for r in results for x in r["firsts"]]),
        "run_finished": summary_ms(totals),
    }


def long_stream(suite: Suite, words: int = 10_000) -> dict[str, Any]:
    """One run whose reply streams about `words` text deltas: events/s at the SSE client."""
    text = " ".join(f"w{i}" for i in range(words))

    async def main() -> tuple[float, float, int]:
        async with http_client(1, timeout=300) as client:
            return await one_run(
                client,
                f"{suite.gateway_url}/api/v1/agent/runs",
                f"Bearer {token('bench-long')}",
                text,
            )

    first, total, events = asyncio.run(main())
    return {
        "events": events,
        "seconds": round(total, 3),
        "events_per_s": round(events / total, 1),
        "first_event_ms": round(first * 1000, 2),
    }


def rss_mb(suite: Suite) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, proc in suite.procs.items():
        with open(f"/proc/{proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out[name] = round(int(line.split()[1]) / 1024, 1)
    return out
