"""`python -m services --target LIST [serve|migrate]`: one process hosting any set of services
(as Grafana Loki and Mimir do with -target).

`--target` (or AGENTMESH_TARGET) is `all` or a comma-separated list of services
(`orchestrator,router,executor`, `history`, ...). Every hosted gRPC service gets its own
shared.server.GrpcServer (health, graceful drain, interceptors, metrics labels, spans) and
listens on the port of its own address (AGENTMESH_<SERVICE>_ADDR, default DEFAULT_PORTS)
for the processes that host its other peers; between services of this process, calls go
in process (shared/inproc.py). A hosted gateway serves HTTP on AGENTMESH_PORT (default 8080)
in the same event loop.

Start: history, memory, router, executor, orchestrator, scheduler, then the gateway (each
ready before the next is built). SIGTERM/SIGINT: the gateway drains first, then each gRPC
service in the reverse order, so no service stops while one still calling it is serving.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from shared import heap, inproc, logs, metrics, telemetry
from shared.server import Builder, GrpcServer
from shared.settings import DEFAULT_PORTS, GRPC_SERVICES, Settings, get_settings

if TYPE_CHECKING:
    from services.gateway.__main__ import EmbeddedServer

log = logging.getLogger("agentmesh.targets")

# The start order (a service's peers come before it); the stop order is its reverse.
ALL_TARGETS = (*GRPC_SERVICES, "gateway")
TARGET_ENV = "AGENTMESH_TARGET"


def parse_targets(value: str) -> tuple[str, ...]:
    """The services `value` names, in start order; ValueError naming what is unknown."""
    names = [part.strip() for part in value.split(",") if part.strip()]
    if not names:
        raise ValueError("--target: name at least one service, or all")
    unknown = [n for n in names if n != "all" and n not in ALL_TARGETS]
    if unknown:
        raise ValueError(
            f"--target: unknown service {', '.join(repr(n) for n in unknown)} "
            f"(known: all, {', '.join(ALL_TARGETS)})"
        )
    wanted = set(ALL_TARGETS) if "all" in names else set(names)
    return tuple(n for n in ALL_TARGETS if n in wanted)


def label(targets: Sequence[str]) -> str:
    """How logs and spans name a process of these targets."""
    return "all" if tuple(targets) == ALL_TARGETS else ",".join(targets)


def grpc_port(settings: Settings, name: str, targets: Sequence[str]) -> int:
    """The port gRPC service `name` listens on: AGENTMESH_PORT when it is the process's only
    service (as `python -m services.<name>`), else the port of its own address, which is
    where its peers in other processes call it."""
    if tuple(targets) == (name,):
        return settings.listen_port(name)
    address = settings.addr(name)
    port = address.rsplit(":", 1)[-1]
    if port.isdigit():
        return int(port)
    return DEFAULT_PORTS[name]


def _check_port_setting(settings: Settings, targets: Sequence[str]) -> None:
    grpc_hosted = [n for n in targets if n != "gateway"]
    if settings.port is not None and "gateway" not in targets and len(grpc_hosted) > 1:
        raise SystemExit(
            "AGENTMESH_PORT names one port, and this process hosts several gRPC services: "
            "unset it (each listens on the port of its AGENTMESH_<SERVICE>_ADDR)"
        )


def _builder(name: str) -> tuple[Builder, Callable[[Settings], Awaitable[None]] | None]:
    module = importlib.import_module(f"services.{name}.service")
    return module.build, module.migrate


class Host:
    """The hosted services of one process, started and stopped in order."""

    def __init__(self, targets: Sequence[str], settings: Settings) -> None:
        self.targets = tuple(targets)
        self.settings = settings
        self.servers: list[GrpcServer] = []
        self._gateway: EmbeddedServer | None = None
        self._gateway_task: asyncio.Task[None] | None = None
        self._stop_metrics: Callable[[], None] | None = None

    async def start(self) -> None:
        settings = self.settings
        _check_port_setting(settings, self.targets)
        inproc.host(n for n in self.targets if n != "gateway")
        telemetry.configure(label(self.targets), settings)
        if settings.metrics_port:
            # One /metrics for the process; its series carry each service's labels.
            self._stop_metrics = metrics.serve(settings.metrics_port, settings.host)
        for name in self.targets:
            if name == "gateway":
                continue
            build, _ = _builder(name)
            parts = await build(settings)
            server = GrpcServer(
                name,
                parts,
                grace_seconds=settings.grace_seconds,
                health_probe_seconds=settings.health_probe_seconds,
            )
            self.servers.append(server)
            await server.start(settings.host, grpc_port(settings, name, self.targets))
        if "gateway" in self.targets:
            await self._start_gateway()

    async def _start_gateway(self) -> None:
        from services.gateway.__main__ import EmbeddedServer, uvicorn_config
        from services.gateway.app import create_app

        server = EmbeddedServer(uvicorn_config(create_app(self.settings), self.settings))
        self._gateway = server
        self._gateway_task = asyncio.create_task(server.serve())
        while not server.started:
            if self._gateway_task.done():
                self._gateway_task.result()  # its error, if it failed to start
                raise RuntimeError("gateway: stopped while starting")
            await asyncio.sleep(0.02)

    def gateway_stopped(self) -> asyncio.Task[None] | None:
        return self._gateway_task

    async def stop(self) -> None:
        if self._gateway_task is not None:
            assert self._gateway is not None
            self._gateway.should_exit = True
            with contextlib.suppress(Exception):
                await self._gateway_task
        for server in reversed(self.servers):
            await server.stop()
        self.servers.clear()
        if self._stop_metrics is not None:
            self._stop_metrics()
            self._stop_metrics = None


async def serve(targets: Sequence[str], settings: Settings) -> None:
    host = Host(targets, settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await host.start()
        # Every part exists now: out of the collector's walks (shared/heap.py).
        heap.freeze_start_up()
        log.info(
            "serving targets",
            extra={"fields": {"targets": list(host.targets), "pid": os.getpid()}},
        )
        waits: list[asyncio.Task[Any]] = [asyncio.create_task(stop.wait())]
        gateway = host.gateway_stopped()
        if gateway is not None:
            waits.append(gateway)
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        log.info("shutting down", extra={"fields": {"grace_seconds": settings.grace_seconds}})
    finally:
        await host.stop()
        telemetry.shutdown()
        inproc.reset()
    log.info("stopped")


async def migrate(targets: Sequence[str], settings: Settings) -> None:
    for name in targets:
        if name == "gateway":
            continue
        _, run = _builder(name)
        if run is not None:
            await run(settings)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m services", description="Host any set of agentmesh services."
    )
    parser.add_argument("command", nargs="?", default="serve", choices=("serve", "migrate"))
    parser.add_argument(
        "--target",
        default=os.environ.get(TARGET_ENV, "all"),
        help="all, or services separated by commas (default: $AGENTMESH_TARGET, else all)",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        targets = parse_targets(args.target)
    except ValueError as err:
        parser.error(str(err))
    settings = get_settings()
    logs.configure(label(targets), settings.log_level, contents=settings.log_contents)
    runner: Callable[[Coroutine[Any, Any, None]], None] = asyncio.run
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # uvloop is optional (not on every platform)
        pass
    if args.command == "migrate":
        runner(migrate(targets, settings))
        return
    runner(serve(targets, settings))
