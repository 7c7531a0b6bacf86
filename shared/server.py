"""The one bootstrap every gRPC service uses: grpc.aio server, standard health service,
reflection, the error interceptor, signal handling and graceful shutdown.

Shutdown: the health service turns NOT_SERVING (so balancers stop sending), then the
server stops accepting calls and gives in-flight calls and streams `grace_seconds` to
finish, then the service's own resources close.

Observability: every response carries `x-agentmesh-version` trailing metadata; the start-up
log line names the version and the gRPC services served; /metrics is served on
AGENTMESH_METRICS_PORT when set (shared/metrics.py); tracing is on when
AGENTMESH_OTLP_ENDPOINT is set (shared/telemetry.py).

`python -m services.<name>` serves; `python -m services.<name> migrate` only applies the
service's migrations (what a Kubernetes migration Job runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from shared import heap, inproc, logs, metrics, owner_data, telemetry
from shared.db import DATABASE as DATABASE
from shared.interceptors import ServerInterceptor
from shared.settings import Settings, get_settings
from shared.transport import (
    KEEPALIVE_SERVER_OPTIONS,
    MAX_CONNECTION_AGE_GRACE_MS,
    MAX_CONNECTION_AGE_MS,
    MAX_MESSAGE_BYTES,
)
from shared.version import VERSION

log = logging.getLogger("agentmesh.server")

# grpc.health.v1 names of the stores a service depends on (ServiceParts.dependencies; the
# database's, DATABASE, is shared.db's, imported above), and the entry that only says the
# process is alive (Kubernetes' liveness probe: an outage of
# a store makes every replica unready, but restarting them would not bring it back).
EVENT_LOG = "event_log"
LIVENESS = "liveness"
# grpc.health.v1 name of the memory service's embedding model (ServiceParts.features): its
# search is hybrid while it answers, lexical-only (degraded) otherwise.
EMBEDDING_MODEL = "embedding_model"


@dataclass
class ServiceParts:
    """What a service contributes to the shared server."""

    # Adds the service's servicers to the server.
    register: Callable[[grpc.aio.Server], None]
    # Full names of the gRPC services it serves (health and reflection).
    service_names: Sequence[str]
    # Closes what the service opened (engines, channels, background tasks).
    on_stop: Callable[[], Awaitable[None]] | None = None
    # Background tasks to run while serving (e.g. the scheduler's claim loop).
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)
    # The stores the service cannot serve without, by health name (DATABASE, EVENT_LOG),
    # each with a cheap check that raises when the store cannot be reached. The server
    # checks them every health_probe_seconds: while one fails, the server and its services
    # are NOT_SERVING on grpc.health.v1, and so is the entry of that name. A check that
    # holds a connection of its own (shared.db.HealthCheck) has an `aclose`: the server
    # closes it when it stops, after on_stop.
    dependencies: Mapping[str, Callable[[], Awaitable[None]]] = field(default_factory=dict)
    # What the service serves degraded without (the memory service's embedding model), by
    # health name, each with a cheap check as for `dependencies`. Checked as often, each
    # has its own health entry (SERVING while its check passes, UNKNOWN before the first),
    # and never changes the service's own status: it still serves.
    features: Mapping[str, Callable[[], Awaitable[None]]] = field(default_factory=dict)
    # The platform contract over the service's owner-data registry (shared/owner_data.py),
    # served like grpc.health.v1; None: the service holds no owner data (an empty registry).
    owner_data: owner_data.PlatformServicer | None = None


class GrpcServer:
    def __init__(
        self,
        name: str,
        parts: ServiceParts,
        *,
        grace_seconds: float,
        metrics_port: int = 0,
        metrics_host: str = "127.0.0.1",
        health_probe_seconds: float = 2.0,
    ) -> None:
        self.name = name
        self.parts = parts
        self.grace_seconds = grace_seconds
        self.health_probe_seconds = health_probe_seconds
        # The dependencies found unreachable at the last check.
        self.unreachable: frozenset[str] = frozenset()
        # The features found unavailable at the last check.
        self.unavailable: frozenset[str] = frozenset()
        # 0: no /metrics endpoint (and nothing recorded).
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self._stop_metrics: Callable[[], None] | None = None
        self.health = health.aio.HealthServicer()
        interceptor = ServerInterceptor(name, VERSION)
        # A service whose peers share its process (--target) also serves them in process
        # (shared/inproc.py): the same servicers, health and interceptors, no socket.
        self.local = inproc.InProcessServer(name, [interceptor]) if inproc.hosted(name) else None
        self.server = grpc.aio.server(
            interceptors=[interceptor],
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                *KEEPALIVE_SERVER_OPTIONS,
                # Clients re-resolve DNS only when a connection closes: ageing connections out
                # lets round_robin clients find replicas added after they connected. The
                # grace outlasts the longest run stream, so no run is cut.
                ("grpc.max_connection_age_ms", MAX_CONNECTION_AGE_MS),
                ("grpc.max_connection_age_grace_ms", MAX_CONNECTION_AGE_GRACE_MS),
            ],
        )
        self._tasks: list[asyncio.Task[None]] = []
        self.port = 0

    def _register(self, server: grpc.aio.Server | inproc.InProcessServer) -> None:
        # The in-process server has the registration methods that the generated
        # add_*_to_server functions call, the only part of grpc.aio.Server they use.
        target = cast(grpc.aio.Server, server)
        self.parts.register(target)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, target)
        platform = self.parts.owner_data or owner_data.PlatformServicer(
            owner_data.Registry(self.name), None, None
        )
        owner_data.register(target, platform)
        names = [
            *self.parts.service_names,
            owner_data.SERVICE_NAME,
            health.SERVICE_NAME,
            reflection.SERVICE_NAME,
        ]
        # The asyncio servicer on both (enable_server_reflection picks it for grpc.aio
        # servers only, and the in-process server is not one). The reflection stubs leave
        # its generated module untyped.
        reflection_pb2_grpc.add_ServerReflectionServicer_to_server(  # type: ignore[no-untyped-call]
            reflection.aio.ReflectionServicer(names), target
        )

    async def start(self, host: str, port: int) -> int:
        self._register(self.server)
        self.port = self.server.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise RuntimeError(f"{self.name}: cannot listen on {host}:{port}")
        await self.server.start()
        if self.local is not None:
            self._register(self.local)
            inproc.register(self.local)
            self.local.start()
        if self.metrics_port:
            self._stop_metrics = metrics.serve(self.metrics_port, self.metrics_host)
        for task_factory in self.parts.background:
            self._tasks.append(asyncio.create_task(task_factory()))
        names = [*self.parts.service_names, "", LIVENESS, *self.parts.dependencies]
        for service_name in names:
            await self.health.set(service_name, health_pb2.HealthCheckResponse.SERVING)
        for name in self.parts.features:
            await self.health.set(name, health_pb2.HealthCheckResponse.UNKNOWN)
        if self.parts.dependencies:
            self._tasks.append(asyncio.create_task(self._watch_dependencies()))
        if self.parts.features:
            self._tasks.append(asyncio.create_task(self._watch_features()))
        log.info(
            "serving",
            extra={
                "fields": {
                    "service": self.name,
                    "port": self.port,
                    "version": VERSION,
                    "grpc_services": list(self.parts.service_names),
                    "metrics_port": self.metrics_port or None,
                }
            },
        )
        return self.port

    async def check_dependencies(self) -> frozenset[str]:
        """Check every dependency once (each within health_probe_seconds), publish the
        result on grpc.health.v1 when it changed; the names found unreachable."""
        checks = self.parts.dependencies
        names = list(checks)
        results = await asyncio.gather(
            *(asyncio.wait_for(checks[n](), self.health_probe_seconds) for n in names),
            return_exceptions=True,
        )
        failed = {n: r for n, r in zip(names, results, strict=True) if isinstance(r, Exception)}
        lost = frozenset(failed)
        if lost != self.unreachable:
            self.unreachable = lost
            serving = health_pb2.HealthCheckResponse.SERVING
            not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
            for name in names:
                await self.health.set(name, not_serving if name in lost else serving)
            for service_name in [*self.parts.service_names, ""]:
                await self.health.set(service_name, not_serving if lost else serving)
            fields: dict[str, object] = {"service": self.name, "unreachable": sorted(lost)}
            if lost:
                fields["errors"] = {n: type(e).__name__ for n, e in failed.items()}
                log.warning("dependency unreachable: NOT_SERVING", extra={"fields": fields})
            else:
                log.info("dependencies reachable again: SERVING", extra={"fields": fields})
        return lost

    async def check_features(self) -> frozenset[str]:
        """Check every feature once (each within health_probe_seconds) and publish each
        one's status on its health entry; the names found unavailable."""
        checks = self.parts.features
        names = list(checks)
        results = await asyncio.gather(
            *(asyncio.wait_for(checks[n](), self.health_probe_seconds) for n in names),
            return_exceptions=True,
        )
        lost = frozenset(n for n, r in zip(names, results, strict=True) if isinstance(r, Exception))
        serving = health_pb2.HealthCheckResponse.SERVING
        not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
        for name in names:
            await self.health.set(name, not_serving if name in lost else serving)
        if lost != self.unavailable:
            self.unavailable = lost
            fields = {"service": self.name, "unavailable": sorted(lost)}
            log.info("degraded features changed", extra={"fields": fields})
        return lost

    async def _watch_features(self) -> None:
        while True:
            await self.check_features()
            await asyncio.sleep(self.health_probe_seconds)

    async def _watch_dependencies(self) -> None:
        while True:
            await asyncio.sleep(self.health_probe_seconds)
            await self.check_dependencies()

    async def stop(self) -> None:
        await self.health.enter_graceful_shutdown()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.local is None:
            await self.server.stop(self.grace_seconds)
        else:
            await asyncio.gather(
                self.server.stop(self.grace_seconds), self.local.stop(self.grace_seconds)
            )
            inproc.unregister(self.local)
        if self.parts.on_stop is not None:
            await self.parts.on_stop()
        for check in [*self.parts.dependencies.values(), *self.parts.features.values()]:
            close = getattr(check, "aclose", None)
            if close is not None:
                await close()
        if self._stop_metrics is not None:
            self._stop_metrics()
            self._stop_metrics = None


Builder = Callable[[Settings], Awaitable[ServiceParts]]


async def serve(name: str, build: Builder, settings: Settings) -> None:
    telemetry.configure(name, settings)
    parts = await build(settings)
    server = GrpcServer(
        name,
        parts,
        grace_seconds=settings.grace_seconds,
        metrics_port=settings.metrics_port,
        metrics_host=settings.host,
        health_probe_seconds=settings.health_probe_seconds,
    )
    await server.start(settings.host, settings.listen_port(name))
    heap.freeze_start_up()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down", extra={"fields": {"grace_seconds": settings.grace_seconds}})
    await server.stop()
    telemetry.shutdown()
    log.info("stopped")


def run_main(
    name: str,
    build: Builder,
    migrate: Callable[[Settings], Coroutine[Any, Any, None]] | None = None,
    argv: Sequence[str] | None = None,
) -> None:
    """Entry point of `python -m services.<name> [serve|migrate]`."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else "serve"
    settings = get_settings()
    logs.configure(name, settings.log_level, contents=settings.log_contents)
    runner: Callable[[Coroutine[Any, Any, None]], None] = asyncio.run
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # uvloop is optional (not on every platform)
        pass
    if command == "migrate":
        if migrate is None:
            print(f"{name} owns no tables: nothing to migrate")
            return
        runner(migrate(settings))
        return
    if command != "serve":
        raise SystemExit(f"usage: python -m services.{name} [serve|migrate]")
    runner(serve(name, build, settings))
