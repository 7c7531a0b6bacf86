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


def start_suite(backend: str, tmp: Path, prefix: str, extra_env: dict[str, str] | None = None) -> Suite:
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
    suite = Suite(ports={n: free_port() for n in ALL_SERVICES}, env=env, log_dir=tmp / "logs")
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


async def one_run(
    client: aiohttp.ClientSession, url: str, auth: str, text: str
) -> tuple[float, float, int]:
    """(time to first event, time to RUN_FINISHED, events) of one run, in seconds."""
    thread_id = f"b-{uuid.uuid4().hex[:12]}"
    body = {
        "threadId": thread_id,
        "runId": f"r-{uuid.uuid4().hex[:12]}",
        "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": text}],
    }
    started = time.perf_counter()
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


def _client_process(url: str, concurrency: int, duration: float, text: str, out: Any) -> None:
    import uvloop

    async def main() -> dict[str, Any]:
        auth = f"Bearer {token('bench-' + uuid.uuid4().hex[:6])}"
        firsts: list[float] = []
        totals: list[float] = []
        errors: list[str] = []
        async with http_client(concurrency + 4, timeout=120) as client:
            deadline = time.perf_counter() + duration

            async def worker() -> None:
                while time.perf_counter() < deadline:
                    try:
                        f, t, _ = await one_run(client, url, auth, text)
                        firsts.append(f)
                        totals.append(t)
                    except Exception as err:  # the benchmark counts failures, it does not stop
                        errors.append(f"{type(err).__name__}: {err}"[:200])

            began, cpu_began = time.time(), time.process_time()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            ended, cpu = time.time(), time.process_time() - cpu_began
        return {
            "firsts": firsts,
            "totals": totals,
            "errors": errors,
            "began": began,
            "ended": ended,
            "cpu_s": cpu,
        }

    out.send(uvloop.run(main()))
    out.close()


def load(suite: Suite, concurrency: int, duration: float, processes: int, text: str = "Hello benchmark") -> dict[str, Any]:
    """Runs/s and latency at `concurrency` concurrent runs spread over client processes."""
    url = f"{suite.gateway_url}/api/v1/agent/runs"
    procs = max(1, min(processes, concurrency))
    per = [concurrency // procs + (1 if i < concurrency % procs else 0) for i in range(procs)]
    ctx = mp.get_context("spawn")
    pipes = []
    workers = []
    for n in per:
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_client_process, args=(url, n, duration, text, child))
        p.start()
        pipes.append(parent)
        workers.append(p)
    results = [pipe.recv() for pipe in pipes]
    for p in workers:
        p.join()
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


def long_stream(suite: Suite, words: int = 10_000) -> dict[str, Any]:
    """One run whose reply streams about `words` text deltas: events/s at the SSE client."""
    text = " ".join(f"w{i}" for i in range(words))

    async def main() -> tuple[float, float, int]:
        async with http_client(1, timeout=300) as client:
            return await one_run(client, f"{suite.gateway_url}/api/v1/agent/runs", f"Bearer {token('bench-long')}", text)

    first, total, events = asyncio.run(main())
    return {"events": events, "seconds": round(total, 3), "events_per_s": round(events / total, 1), "first_event_ms": round(first * 1000, 2)}


def rss_mb(suite: Suite) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, proc in suite.procs.items():
        with open(f"/proc/{proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out[name] = round(int(line.split()[1]) / 1024, 1)
    return out
