"""The in-process transport against network gRPC: one unary call (grpc.health.v1 Check)
through the same shared.server bootstrap and interceptors, client and server in this process.

    python -m bench.inproc [--calls 3000] [--repeats 3]

Prints, for each transport, the median (min-max) over the repeats of the p50 round trip
and of this process's CPU per call (client and server halves both), alternating the two.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.stats import median_of_runs
from shared import inproc
from shared.clients import open_channel
from shared.server import GrpcServer, ServiceParts

NAME = "bench-inproc"


async def one(kind: str, calls: int) -> dict[str, float]:
    inproc.reset()
    if kind == "inproc":
        inproc.host([NAME])
    server = GrpcServer(
        NAME, ServiceParts(register=lambda _s: None, service_names=[]), grace_seconds=1
    )
    port = await server.start("127.0.0.1", 0)
    channel = open_channel(f"127.0.0.1:{port}", peer=NAME)
    stub = health_pb2_grpc.HealthStub(channel)
    request = health_pb2.HealthCheckRequest(service="")
    try:
        for _ in range(min(200, calls)):
            await stub.Check(request, timeout=5)
        samples = []
        cpu = time.process_time()
        for _ in range(calls):
            started = time.perf_counter()
            await stub.Check(request, timeout=5)
            samples.append(time.perf_counter() - started)
        cpu = time.process_time() - cpu
    finally:
        await channel.close()
        await server.stop()
        inproc.reset()
    return {
        "p50_us": round(statistics.median(samples) * 1e6, 1),
        "cpu_us_per_call": round(cpu / calls * 1e6, 1),
    }


async def measure(calls: int, repeats: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {"network": [], "inproc": []}
    for repeat in range(repeats):
        order = ("network", "inproc") if repeat % 2 == 0 else ("inproc", "network")
        for kind in order:
            runs[kind].append(await one(kind, calls))
    return {
        kind: {key: median_of_runs([r[key] for r in rs]) for key in rs[0]}
        for kind, rs in runs.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.inproc", description=__doc__)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import uvloop

    print(json.dumps(uvloop.run(measure(args.calls, args.repeats)), indent=2))


if __name__ == "__main__":
    main()
