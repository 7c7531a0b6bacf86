"""The pipeline's own floor: the suite's shape with nothing inside it.

Five processes stand in for the gateway, orchestrator, history, router and executor. They make
the calls a chat run makes (StartRun stream; BeginRun, Route, Execute stream, FinishRun) with
the messages of a real run of "Hello benchmark" (counted on the suite: StartRun sends 6
messages carrying 19 events, Execute 1 carrying 15 items), on the same stack (grpc.aio and
uvloop in every process; uvicorn and Starlette SSE in the gateway), and are driven by the same
load clients as `make bench` (bench.suite.load). Each handler only hands on canned bytes: no
database, no event log, no protobuf, no interceptors, no authentication.

So its runs/s and latencies are what this machine can do with this architecture before any
application code: the ceiling of the suite's numbers, measured rather than summed from
per-call costs (bench/floor.py's lower bound leaves out thread wake-ups, stream messages and
the cores' sharing between seven busy processes).

    python -m bench.skeleton [--concurrency 1,32] [--duration 5] [--processes 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from services.launcher import free_port

ROOT = Path(__file__).resolve().parent.parent
ROLES = ("history", "router", "executor", "orchestrator", "gateway")


def _event(kind: str, extra: str = "") -> bytes:
    """One AG-UI event as the gateway writes it (about the size of the suite's)."""
    return (
        f'{{"type":"{kind}","threadId":"b-0123456789ab","runId":"r-0123456789ab"{extra},'
        f'"timestamp":1764547200000}}'
    ).encode()


_TEXT = ',"messageId":"m-0123456789abcdef0123456789abcdef"'
SEP = b"\x1e"
# History's answers carry the run record and the stored messages: a few hundred bytes.
RECORD = b"r" * 400
# The suite's StartRun messages for one run, in order, as the bytes sent (events joined by
# SEP); the fourth is relayed from Execute's answer, which also carries the step's result.
RUN_STARTED = _event("RUN_STARTED")
ROUTER_STARTED = _event("STEP_STARTED", ',"stepName":"router"')
ROUTED = SEP.join(
    [
        _event("STEP_FINISHED", ',"stepName":"router"'),
        _event("STEP_STARTED", ',"stepName":"worker"'),
    ]
)
EXECUTED = SEP.join(
    [
        _event("TEXT_MESSAGE_START", _TEXT + ',"role":"assistant"'),
        *(_event("TEXT_MESSAGE_CONTENT", _TEXT + f',"delta":"w{i} "') for i in range(11)),
        _event("TEXT_MESSAGE_END", _TEXT),
        RECORD,
    ]
)
WORKER_FINISHED = _event("STEP_FINISHED", ',"stepName":"worker"')
RUN_FINISHED = _event("RUN_FINISHED", ',"outcome":"success"')


def _service(port: int, methods: dict[str, grpc.RpcMethodHandler]) -> grpc.aio.Server:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("skeleton.S", methods),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    return server


async def _serve_leaf(role: str, port: int) -> None:
    async def unary(request: bytes, _ctx: grpc.aio.ServicerContext) -> bytes:
        return RECORD

    async def execute(request: bytes, _ctx: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        # The worker's model turn: its text and the step's result, in one batch (a model at
        # zero latency has produced every item before the first is sent).
        yield EXECUTED

    methods = {
        "history": {"BeginRun": unary, "FinishRun": unary},
        "router": {"Route": unary},
        "executor": {"Execute": execute},
    }[role]
    handlers = {
        name: (
            grpc.unary_stream_rpc_method_handler(fn)
            if name == "Execute"
            else grpc.unary_unary_rpc_method_handler(fn)
        )
        for name, fn in methods.items()
    }
    server = _service(port, handlers)
    await server.start()
    await server.wait_for_termination()


async def _serve_orchestrator(port: int, peers: dict[str, str]) -> None:
    channels = {role: grpc.aio.insecure_channel(addr) for role, addr in peers.items()}
    begin_run = channels["history"].unary_unary("/skeleton.S/BeginRun")
    finish_run = channels["history"].unary_unary("/skeleton.S/FinishRun")
    route = channels["router"].unary_unary("/skeleton.S/Route")
    execute = channels["executor"].unary_stream("/skeleton.S/Execute")

    async def start_run(request: bytes, _ctx: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        yield RUN_STARTED
        await begin_run(request)
        yield ROUTER_STARTED
        await route(request)
        yield ROUTED
        async for batch in execute(request):
            # The text is streamed on; the step's result is not.
            yield SEP.join(item for item in batch.split(SEP) if item.startswith(b"{"))
        yield WORKER_FINISHED
        await finish_run(request)
        yield RUN_FINISHED

    server = _service(port, {"StartRun": grpc.unary_stream_rpc_method_handler(start_run)})
    await server.start()
    await server.wait_for_termination()


def _serve_gateway(port: int, orchestrator: str) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    state: dict[str, Any] = {}

    async def runs(request: Request) -> StreamingResponse:
        body = await request.body()
        if "start" not in state:
            state["start"] = grpc.aio.insecure_channel(orchestrator).unary_stream(
                "/skeleton.S/StartRun"
            )
        call = state["start"](body)

        async def stream() -> AsyncIterator[bytes]:
            async for message in call:
                yield b"".join(b"data: " + e + b"\n\n" for e in message.split(SEP))

        return StreamingResponse(stream(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/api/v1/agent/runs", runs, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", loop="uvloop")


class Skeleton:
    """The five processes; `gateway_url` as bench.suite.load expects of a suite."""

    def __init__(self) -> None:
        self.ports = {role: free_port() for role in ROLES}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['gateway']}"

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'protos'}")
        peers = [f"{r}=127.0.0.1:{self.ports[r]}" for r in ("history", "router", "executor")]
        for role in ROLES:
            args = [sys.executable, "-m", "bench.skeleton", "serve", role, str(self.ports[role])]
            if role == "orchestrator":
                args += peers
            if role == "gateway":
                args.append(f"127.0.0.1:{self.ports['orchestrator']}")
            self.procs[role] = subprocess.Popen(args, cwd=ROOT, env=env)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float = 60) -> None:
        """Until one run goes through. While a process is still starting, a run fails:
        refused, or cut off mid-stream when a peer of the orchestrator is not up yet."""
        import http.client
        import urllib.request

        deadline = time.monotonic() + timeout
        while True:
            try:
                req = urllib.request.Request(f"{self.gateway_url}/api/v1/agent/runs", data=b"{}")
                with urllib.request.urlopen(req, timeout=5) as resp:
                    if b"RUN_FINISHED" in resp.read():
                        return
            except (OSError, http.client.HTTPException):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the skeleton did not start")
            time.sleep(0.2)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def cpu(self) -> dict[str, float]:
        from bench.cpu import cpu_seconds

        return {role: cpu_seconds(proc.pid) for role, proc in self.procs.items()}


def measure(concurrency: list[int], duration: float, processes: int) -> dict[str, Any]:
    """Runs/s, latencies and CPU per run of the skeleton at each concurrency."""
    from bench.suite import load  # aiohttp: the bench extra

    skeleton = Skeleton()
    skeleton.start()
    try:
        # The skeleton serves the same HTTP as the suite the load function drives.
        load(skeleton, 8, 2, processes)  # type: ignore[arg-type]  # warm-up
        results = []
        for c in concurrency:
            before = skeleton.cpu()
            # The skeleton serves the same HTTP as the suite (as above).
            result = load(skeleton, c, duration, processes)  # type: ignore[arg-type]
            after = skeleton.cpu()
            runs = max(result["runs"], 1)
            per_role = {r: round((after[r] - before[r]) * 1000 / runs, 3) for r in ROLES}
            result["cpu_ms_per_run"] = per_role
            result["suite_cpu_ms_per_run"] = round(sum(per_role.values()), 3)
            results.append(result)
        return {"runs": results}
    finally:
        skeleton.stop()


def table(result: dict[str, Any]) -> str:
    lines = [
        "| concurrency | runs/s | first event p50 / p99 (ms) | RUN_FINISHED p50 / p99 (ms) "
        "| CPU ms per run (5 processes) |",
        "|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        lines.append(
            f"| {r['concurrency']} | {r['runs_per_s']} | {r['first_event']['p50_ms']} / "
            f"{r['first_event']['p99_ms']} | {r['run_finished']['p50_ms']} / "
            f"{r['run_finished']['p99_ms']} | {r['suite_cpu_ms_per_run']} |"
        )
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) >= 4 and sys.argv[1] == "serve":
        role, port = sys.argv[2], int(sys.argv[3])
        if role == "gateway":
            _serve_gateway(port, sys.argv[4])
            return
        import uvloop

        if role == "orchestrator":
            peers = dict(arg.split("=", 1) for arg in sys.argv[4:])
            uvloop.run(_serve_orchestrator(port, peers))
        else:
            uvloop.run(_serve_leaf(role, port))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    concurrency = [int(c) for c in args.concurrency.split(",")]
    result = measure(concurrency, args.duration, args.processes)
    print(json.dumps(result, indent=2))
    print(table(result))


if __name__ == "__main__":
    main()
