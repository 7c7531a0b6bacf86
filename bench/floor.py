"""The machine's own floor: a bare grpc.aio unary echo and server-stream echo between two
processes, and a bare HTTP SSE echo, so the suite's numbers can be read as ratios. Each is
measured as latency or rate and as CPU (client + server process) per call, message, request
or event; from the CPU comes a lower bound of a chat run's CPU and so a ceiling of runs/s.

    python -m bench.floor            # prints JSON
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import grpc

from bench.cpu import cpu_seconds
from bench.stats import summary_ms
from bench.suite import http_client
from services.launcher import free_port

ROOT = Path(__file__).resolve().parent.parent
_SERVICE = "bench.Echo"
# A chat run with the router on makes five gRPC calls (StartRun stream, BeginRun, Route,
# Execute stream, FinishRun) and serves one HTTP SSE request.
RPCS_PER_RUN = 5
SSE_REQUESTS_PER_RUN = 1


async def _serve_grpc(port: int) -> None:
    async def unary(request: bytes, _ctx: grpc.aio.ServicerContext) -> bytes:
        return request

    # A bare bytes handler: the floor measures gRPC without message types.
    async def stream(request: bytes, _ctx: grpc.aio.ServicerContext):  # type: ignore[no-untyped-def]
        count = int(request.decode())
        payload = b"x" * 32
        for _ in range(count):
            yield payload

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                _SERVICE,
                {
                    "Unary": grpc.unary_unary_rpc_method_handler(unary),
                    "Stream": grpc.unary_stream_rpc_method_handler(stream),
                },
            ),
        )
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def _serve_sse(port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def events(request: Request) -> StreamingResponse:
        count = int(request.query_params.get("n", "1"))

        # A bare SSE body generator, as Starlette takes it.
        async def body():  # type: ignore[no-untyped-def]
            for i in range(count):
                yield f'data: {{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"w{i} "}}\n\n'

        return StreamingResponse(body(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/events", events)])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", loop="uvloop")


def _spawn(kind: str, port: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'protos'}")
    return subprocess.Popen(
        [sys.executable, "-m", "bench.floor", kind, str(port)], cwd=ROOT, env=env
    )


async def _wait_grpc(ch: grpc.aio.Channel) -> None:
    await asyncio.wait_for(ch.channel_ready(), timeout=20)


def _cpu_now(server_pid: int) -> float:
    """CPU seconds so far of this process (the client, all its threads) and the echo server."""
    return time.process_time() + cpu_seconds(server_pid)


def _cpu_ms_per(cpu_before: float, server_pid: int, count: int) -> float:
    return round((_cpu_now(server_pid) - cpu_before) / max(count, 1) * 1000, 4)


async def _at_c32(
    call: Callable[[], Awaitable[Any]], count: int, server_pid: int
) -> tuple[float, float]:
    """`count` calls, 32 at a time: (calls/s, client + server CPU ms per call)."""
    remaining = count

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await call()

    cpu = _cpu_now(server_pid)
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(32)))
    return count / (time.perf_counter() - started), _cpu_ms_per(cpu, server_pid, count)


async def measure_grpc(
    port: int, server_pid: int, calls: int = 2000, stream_len: int = 10_000
) -> dict[str, Any]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        await _wait_grpc(ch)
        unary = ch.unary_unary(f"/{_SERVICE}/Unary")
        for _ in range(200):
            await unary(b"warm")
        durations = []
        cpu = _cpu_now(server_pid)
        for _ in range(calls):
            t0 = time.perf_counter()
            await unary(b"ping")
            durations.append(time.perf_counter() - t0)
        unary_cpu = _cpu_ms_per(cpu, server_pid, calls)
        unary_rps, unary_cpu_c32 = await _at_c32(lambda: unary(b"ping"), calls, server_pid)
        stream = ch.unary_stream(f"/{_SERVICE}/Stream")
        cpu = _cpu_now(server_pid)
        started = time.perf_counter()
        received = 0
        async for _ in stream(str(stream_len).encode()):
            received += 1
        stream_rate = received / (time.perf_counter() - started)
        stream_cpu = _cpu_ms_per(cpu, server_pid, received)
    return {
        "unary_rtt": summary_ms(durations),
        "unary_rps_c32": round(unary_rps, 1),
        "stream_msgs_per_s": round(stream_rate, 1),
        "unary_cpu_ms_per_call": unary_cpu,
        "unary_cpu_ms_per_call_c32": unary_cpu_c32,
        "stream_cpu_ms_per_msg": stream_cpu,
    }


async def _one_event(client: aiohttp.ClientSession, url: str) -> float:
    """Seconds to the first chunk of a 1-event stream, read to its end (as bench.suite.one_run
    reads a run) so that the connection goes back to the pool."""
    started = time.perf_counter()
    first = 0.0
    async with client.get(url, params={"n": "1"}) as resp:
        async for _ in resp.content.iter_any():
            if not first:
                first = time.perf_counter() - started
    return first


async def measure_sse(
    port: int, server_pid: int, events: int = 10_000, requests: int = 1000
) -> dict[str, Any]:
    """With the suite's own SSE client (bench.suite.http_client), counting events per chunk as
    bench.suite.one_run does."""
    url = f"http://127.0.0.1:{port}/events"
    async with http_client(32, timeout=30) as client:
        for _ in range(50):
            try:
                async with client.get(url, params={"n": "1"}) as resp:
                    await resp.read()
                break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.2)
        cpu = _cpu_now(server_pid)
        firsts = [await _one_event(client, url) for _ in range(requests)]
        request_cpu = _cpu_ms_per(cpu, server_pid, requests)
        requests_per_s, request_cpu_c32 = await _at_c32(
            lambda: _one_event(client, url), requests, server_pid
        )
        cpu = _cpu_now(server_pid)
        started = time.perf_counter()
        count = 0
        async with client.get(url, params={"n": str(events)}) as resp:
            async for chunk in resp.content.iter_any():
                count += chunk.count(b"\n\n")
        rate = count / (time.perf_counter() - started)
        event_cpu = _cpu_ms_per(cpu, server_pid, count)
    return {
        "first_event": summary_ms(firsts),
        "events_per_s": round(rate, 1),
        "requests_per_s_c32": round(requests_per_s, 1),
        "cpu_ms_per_request": request_cpu,
        "cpu_ms_per_request_c32": request_cpu_c32,
        "cpu_ms_per_event": event_cpu,
    }


def run_lower_bound(unary_cpu_ms: float, sse_request_cpu_ms: float) -> dict[str, float]:
    """The least CPU a chat run can take on this machine, from the floor alone (its gRPC calls
    and its SSE request; no database, no event log, no application code), and so the most
    runs/s the machine's cores could serve."""
    cpu_ms = RPCS_PER_RUN * unary_cpu_ms + SSE_REQUESTS_PER_RUN * sse_request_cpu_ms
    cores = os.cpu_count() or 1
    return {
        "cpu_ms_per_run": round(cpu_ms, 3),
        "cores": cores,
        "runs_per_s_ceiling": round(cores * 1000 / cpu_ms, 1),
    }


async def measure() -> dict[str, Any]:
    gport, sport = free_port(), free_port()
    procs = [_spawn("serve-grpc", gport), _spawn("serve-sse", sport)]
    try:
        grpc_floor = await measure_grpc(gport, procs[0].pid)
        sse_floor = await measure_sse(sport, procs[1].pid)
        return {
            "grpc": grpc_floor,
            "sse": sse_floor,
            # The cheaper of one-at-a-time and concurrency 32: a bound must not overstate.
            "run_lower_bound": run_lower_bound(
                min(grpc_floor["unary_cpu_ms_per_call"], grpc_floor["unary_cpu_ms_per_call_c32"]),
                min(sse_floor["cpu_ms_per_request"], sse_floor["cpu_ms_per_request_c32"]),
            ),
        }
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "serve-grpc":
        import uvloop

        uvloop.run(_serve_grpc(int(sys.argv[2])))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "serve-sse":
        _serve_sse(int(sys.argv[2]))
        return
    import uvloop

    print(json.dumps(uvloop.run(measure()), indent=2))


if __name__ == "__main__":
    main()
