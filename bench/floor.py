"""The machine's own floor: a bare grpc.aio unary echo and server-stream echo between two
processes, and a bare HTTP SSE echo, so the suite's numbers can be read as ratios.

    python -m bench.floor            # prints JSON
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx

from bench.stats import summary_ms
from services.launcher import free_port

ROOT = Path(__file__).resolve().parent.parent
_SERVICE = "bench.Echo"


async def _serve_grpc(port: int) -> None:
    async def unary(request: bytes, _ctx: grpc.aio.ServicerContext) -> bytes:
        return request

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

        async def body():  # type: ignore[no-untyped-def]
            for i in range(count):
                yield f'data: {{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"w{i} "}}\n\n'

        return StreamingResponse(body(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/events", events)])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", loop="uvloop")


def _spawn(kind: str, port: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'protos'}")
    return subprocess.Popen([sys.executable, "-m", "bench.floor", kind, str(port)], cwd=ROOT, env=env)


async def _wait_grpc(ch: grpc.aio.Channel) -> None:
    await asyncio.wait_for(ch.channel_ready(), timeout=20)


async def measure_grpc(port: int, calls: int = 2000, stream_len: int = 10_000) -> dict[str, object]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        await _wait_grpc(ch)
        unary = ch.unary_unary(f"/{_SERVICE}/Unary")
        for _ in range(200):
            await unary(b"warm")
        durations = []
        for _ in range(calls):
            t0 = time.perf_counter()
            await unary(b"ping")
            durations.append(time.perf_counter() - t0)
        # Throughput at concurrency 32.
        remaining = calls

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await unary(b"ping")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(32)))
        unary_rps = calls / (time.perf_counter() - started)
        stream = ch.unary_stream(f"/{_SERVICE}/Stream")
        started = time.perf_counter()
        received = 0
        async for _ in stream(str(stream_len).encode()):
            received += 1
        stream_rate = received / (time.perf_counter() - started)
    return {
        "unary_rtt": summary_ms(durations),
        "unary_rps_c32": round(unary_rps, 1),
        "stream_msgs_per_s": round(stream_rate, 1),
    }


async def measure_sse(port: int, events: int = 10_000, requests: int = 300) -> dict[str, object]:
    url = f"http://127.0.0.1:{port}/events"
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(50):
            try:
                await client.get(url, params={"n": "1"})
                break
            except httpx.ConnectError:
                await asyncio.sleep(0.2)
        firsts = []
        for _ in range(requests):
            t0 = time.perf_counter()
            async with client.stream("GET", url, params={"n": "1"}) as resp:
                async for _ in resp.aiter_bytes():
                    firsts.append(time.perf_counter() - t0)
                    break
        started = time.perf_counter()
        count = 0
        async with client.stream("GET", url, params={"n": str(events)}) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data: "):
                    count += 1
        rate = count / (time.perf_counter() - started)
    return {"first_event": summary_ms(firsts), "events_per_s": round(rate, 1)}


async def measure() -> dict[str, object]:
    gport, sport = free_port(), free_port()
    procs = [_spawn("serve-grpc", gport), _spawn("serve-sse", sport)]
    try:
        return {"grpc": await measure_grpc(gport), "sse": await measure_sse(sport)}
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
