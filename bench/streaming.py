"""Streaming at scale (issue 36): N concurrent chat runs whose model is paced like a real
one (time to first token, tokens per second, reply length), through one process (shape
"all") and one process per service ("split"), beside a bare SSE server paced the same way
(the floor) read by the same client, in the same run.

    python -m bench.streaming [--backend embedded] [--shapes all,split] [--streams 100,1000]
                              [--ttft 0.3] [--tps 30] [--tokens 300] [--out results]

Per shape and N it reports:
- the gap between two text deltas as the client sees them, p50/p99, and what the suite
  adds to the model's own pacing (the gap's p99 less 1/tps, beside the floor's);
- the first-token overhead: the first text delta at the client less the model's time to
  first token, p50/p99 (the suite's own work before the model: admission, storing the
  input, recall, the prompt);
- RSS per concurrent stream: the suite's resident memory while all N stream, less its
  resident memory idle, over N;
- CPU per relayed token: the suite's processes' CPU over the window, over the text deltas
  the clients received;
- streams that failed, and the clients' own CPU (they share the 2 cores with the suite).

The model is the offline scripted one with AGENTMESH_SCRIPTED_FIRST_TOKEN_LATENCY and
AGENTMESH_SCRIPTED_TOKEN_LATENCY; it echoes the user's words, so a message of about
`tokens` words gives a reply of about `tokens` text deltas. Profile bench_streaming:
chat_default without the router (one model call per run). Admission bounds are raised
past N: the bench measures what a process holds, not where it refuses.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing as mp
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from bench.cpu import cpu_seconds
from bench.stats import percentile
from bench.suite import http_client, rss_mb, start_suite, token
from services.launcher import free_port

ROOT = Path(__file__).resolve().parent.parent
TEXT_EVENT = b'"TEXT_MESSAGE_CONTENT"'
END_EVENTS = (b'"RUN_FINISHED"', b'"RUN_ERROR"')
CLIENT_PROCESSES = 2
PROFILE = "bench_streaming"


# --- the floor: a bare SSE server paced like the model ------------------------------------


def _floor_server(port: int, ttft: float, tps: float, tokens: int) -> None:
    """An aiohttp SSE server: a POST answers `tokens` text-delta events, the first after
    `ttft` seconds, then one per 1/tps, then RUN_FINISHED; what the suite's stream would be
    with nothing between the model and the client."""
    import uvloop
    from aiohttp import web

    async def stream(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.sleep(ttft)
        for i in range(tokens):
            if i:
                await asyncio.sleep(1 / tps)
            event = {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": f"w{i} "}
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        await response.write(b'data: {"type": "RUN_FINISHED"}\n\n')
        return response

    async def serve() -> None:
        app = web.Application()
        app.router.add_post("/stream", stream)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()

    uvloop.run(serve())


def start_floor(ttft: float, tps: float, tokens: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    code = (
        f"from bench.streaming import _floor_server; _floor_server({port}, {ttft}, {tps}, {tokens})"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"http://127.0.0.1:{port}/stream"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the floor's SSE server did not start")


# --- the clients ----------------------------------------------------------------------------


async def _one_stream(
    client: aiohttp.ClientSession, url: str, body: dict[str, Any] | None, auth: str
) -> tuple[float, list[float]]:
    """(the request's start, the arrival of each text delta), perf_counter seconds."""
    started = time.perf_counter()
    arrivals: list[float] = []
    headers = {"Authorization": auth} if auth else {}
    async with client.post(url, json=body or {}, headers=headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.read())[:200]!r}")
        tail = b""
        async for chunk in resp.content.iter_any():
            now = time.perf_counter()
            arrivals += [now] * chunk.count(TEXT_EVENT)
            tail = (tail + chunk)[-4096:]
            if any(end in tail for end in END_EVENTS):
                if END_EVENTS[1] in tail:
                    raise RuntimeError("run failed: " + tail[-300:].decode(errors="replace"))
                break
    return started, arrivals


def _client_process(url: str, streams: int, words: int, suite: bool, out: Any) -> None:
    import uvloop

    async def main() -> dict[str, Any]:
        text = " ".join(f"w{i}" for i in range(words))
        usage_before = resource.getrusage(resource.RUSAGE_SELF)

        async def one(i: int) -> tuple[float, list[float]]:
            if not suite:
                return await _one_stream(client, url, None, "")
            body = {
                "threadId": f"s-{uuid.uuid4().hex[:12]}",
                "runId": f"r-{uuid.uuid4().hex[:12]}",
                "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": text}],
                "forwardedProps": {"agentmesh": {"profile": PROFILE}},
            }
            # An owner per stream: the per-owner bounds are not what is measured.
            return await _one_stream(client, url, body, f"Bearer {token(f'stream-{i}')}")

        async with http_client(streams + 8, timeout=120) as client:
            results = await asyncio.gather(
                *(one(i) for i in range(streams)), return_exceptions=True
            )
        usage_after = resource.getrusage(resource.RUSAGE_SELF)
        ok = [r for r in results if not isinstance(r, BaseException)]
        return {
            "streams": [(s, a) for s, a in ok],
            "errors": [repr(r)[:300] for r in results if isinstance(r, BaseException)],
            "cpu_s": (usage_after.ru_utime + usage_after.ru_stime)
            - (usage_before.ru_utime + usage_before.ru_stime),
        }

    out.send(uvloop.run(main()))
    out.close()


def drive(url: str, streams: int, words: int, suite: bool) -> dict[str, Any]:
    """`streams` concurrent streams from CLIENT_PROCESSES client processes."""
    ctx = mp.get_context("spawn")
    per = [
        streams // CLIENT_PROCESSES + (i < streams % CLIENT_PROCESSES)
        for i in range(CLIENT_PROCESSES)
    ]
    pipes, procs = [], []
    for n in per:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_client_process, args=(url, n, words, suite, child))
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    results = [pipe.recv() for pipe in pipes]
    for proc in procs:
        proc.join()
    return {
        "streams": [s for r in results for s in r["streams"]],
        "errors": [e for r in results for e in r["errors"]],
        "client_cpu_s": round(sum(r["cpu_s"] for r in results), 2),
    }


def summarise(driven: dict[str, Any], ttft: float, tps: float) -> dict[str, Any]:
    streams = driven["streams"]
    firsts = [(a[0] - s - ttft) * 1000 for s, a in streams if a]
    gaps = [(b - a) * 1000 for _, arr in streams for a, b in itertools.pairwise(arr)]
    pace = 1000 / tps
    return {
        "streams_ok": len(streams),
        "streams_failed": len(driven["errors"]),
        "error_samples": driven["errors"][:3],
        "text_deltas": sum(len(a) for _, a in streams),
        "gap_ms": {"p50": round(percentile(gaps, 50), 1), "p99": round(percentile(gaps, 99), 1)},
        "added_gap_p99_ms": round(percentile(gaps, 99) - pace, 1),
        "first_token_overhead_ms": {
            "p50": round(percentile(firsts, 50), 1),
            "p99": round(percentile(firsts, 99), 1),
        },
        "client_cpu_s": driven["client_cpu_s"],
    }


# --- one shape ----------------------------------------------------------------------------


def _suite_rss(suite: Any) -> float:
    return round(sum(rss_mb(suite).values()), 1)


def measure_suite(
    backend: str, shape: str, counts: list[int], args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    bound = str(max(counts) + 64)
    env = {
        "AGENTMESH_SCRIPTED_TOKEN_LATENCY": str(1 / args.tps),
        "AGENTMESH_SCRIPTED_FIRST_TOKEN_LATENCY": str(args.ttft),
        "AGENTMESH_MAX_RUNS_IN_FLIGHT": bound,
        "AGENTMESH_MAX_RUNS_IN_FLIGHT_PER_OWNER": bound,
        "AGENTMESH_RUN_TIMEOUT_SECONDS": "600",
    }
    (tmp / shape).mkdir(parents=True, exist_ok=True)
    profiles = tmp / shape / "profiles.json"
    # One model call per run, the built-in chat profile's memory recall kept.
    profiles.write_text(
        json.dumps(
            {
                "profiles": [
                    {
                        "name": PROFILE,
                        "enable_router": False,
                        "executor": "worker",
                        "tool_policy": {"allowlist": ["memory_search"]},
                        "memory": {"mode": "recall"},
                    }
                ]
            }
        )
    )
    env["AGENTMESH_PROFILES_FILE"] = str(profiles)
    suite = start_suite(backend, tmp / shape, f"st{uuid.uuid4().hex[:6]}_", env, shape=shape)
    url = f"{suite.gateway_url}/api/v1/agent/runs"
    # The reply echoes the message inside a sentence of about a dozen words.
    words = max(1, args.tokens - 12)
    out: dict[str, Any] = {}
    try:
        warm = drive(url, 4, words, True)
        if warm["errors"]:
            raise RuntimeError(f"warm-up runs failed: {warm['errors'][:1]}")
        for n in counts:
            idle = _suite_rss(suite)
            cpu_before = sum(cpu_seconds(p.pid) for p in suite.procs.values())
            peak: list[float] = []
            sampler = _RssSampler(suite, peak)
            sampler.start()
            driven = drive(url, n, words, True)
            sampler.stop()
            cpu = sum(cpu_seconds(p.pid) for p in suite.procs.values()) - cpu_before
            result = summarise(driven, args.ttft, args.tps)
            result["rss_idle_mb"] = idle
            result["rss_peak_mb"] = max(peak, default=idle)
            result["rss_per_stream_kb"] = round((max(peak, default=idle) - idle) * 1024 / n, 1)
            result["suite_cpu_s"] = round(cpu, 2)
            result["cpu_per_token_us"] = round(cpu * 1e6 / max(1, result["text_deltas"]), 1)
            out[str(n)] = result
            print(shape, n, json.dumps(result), flush=True)
    finally:
        suite.stop()
    return out


class _RssSampler:
    """The suite's RSS every 0.5 s in a thread, while the clients run."""

    def __init__(self, suite: Any, samples: list[float]) -> None:
        import threading

        self.suite, self.samples = suite, samples
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()

    def _run(self) -> None:
        while not self.done.wait(0.5):
            self.samples.append(_suite_rss(self.suite))


def measure_floor(counts: list[int], args: argparse.Namespace) -> dict[str, Any]:
    proc, url = start_floor(args.ttft, args.tps, args.tokens)
    out: dict[str, Any] = {}
    try:
        for n in counts:
            cpu_before = cpu_seconds(proc.pid)
            driven = drive(url, n, 0, False)
            result = summarise(driven, args.ttft, args.tps)
            result["server_cpu_s"] = round(cpu_seconds(proc.pid) - cpu_before, 2)
            result["cpu_per_token_us"] = round(
                result["server_cpu_s"] * 1e6 / max(1, result["text_deltas"]), 1
            )
            out[str(n)] = result
            print("floor", n, json.dumps(result), flush=True)
    finally:
        proc.kill()
        proc.wait()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="embedded", choices=["embedded", "postgres"])
    parser.add_argument("--shapes", type=lambda s: s.split(","), default=["all", "split"])
    parser.add_argument(
        "--streams", type=lambda s: [int(x) for x in s.split(",")], default=[100, 1000]
    )
    parser.add_argument("--ttft", type=float, default=0.3, help="model's time to first token, s")
    parser.add_argument("--tps", type=float, default=30.0, help="model's tokens per second")
    parser.add_argument("--tokens", type=int, default=300, help="reply length in tokens")
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args()
    report: dict[str, Any] = {
        "backend": args.backend,
        "model": {"ttft_s": args.ttft, "tokens_per_s": args.tps, "tokens": args.tokens},
        "floor": measure_floor(args.streams, args),
    }
    tmp = Path(tempfile.mkdtemp(prefix="agentmesh-streaming-"))
    try:
        for shape in args.shapes:
            report[shape] = measure_suite(args.backend, shape, args.streams, args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "streaming.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
