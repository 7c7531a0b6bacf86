"""The gRPC peers of the gateway: one channel and stub per service."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import grpc
from agentmesh.history.v1 import history_service_pb2_grpc
from agentmesh.memory.v1 import memory_service_pb2_grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2_grpc
from agentmesh.scheduler.v1 import scheduler_service_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.gateway.errors import from_rpc
from shared.clients import open_channel
from shared.identity import call_metadata
from shared.logs import request_id_var
from shared.settings import Settings

# The services /readyz checks.
PEERS = ("orchestrator", "history", "memory", "scheduler")

# Deadline of one readiness probe.
HEALTH_TIMEOUT_SECONDS = 1.0


@dataclass
class Clients:
    orchestrator: orchestrator_service_pb2_grpc.OrchestratorServiceStub
    history: history_service_pb2_grpc.HistoryServiceStub
    memory: memory_service_pb2_grpc.MemoryServiceStub
    scheduler: scheduler_service_pb2_grpc.SchedulerServiceStub
    channels: dict[str, grpc.aio.Channel] = field(default_factory=dict)

    async def not_serving(self) -> list[str]:
        """The peers that do not answer SERVING on grpc.health.v1 within a short deadline."""

        async def probe(name: str) -> bool:
            stub = health_pb2_grpc.HealthStub(self.channels[name])
            try:
                reply = await stub.Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=HEALTH_TIMEOUT_SECONDS
                )
            except grpc.RpcError:
                return False
            return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

        names = [n for n in PEERS if n in self.channels]
        results = await asyncio.gather(*(probe(n) for n in names))
        missing = [n for n in PEERS if n not in self.channels]
        return [n for n, ok in zip(names, results, strict=True) if not ok] + missing

    async def close(self) -> None:
        for ch in self.channels.values():
            await ch.close()


def open_clients(settings: Settings) -> Clients:
    """Channels to every peer at settings.addr(name); call inside the serving event loop."""
    channels = {
        "orchestrator": open_channel(settings.addr("orchestrator")),
        # Reads, and writes keyed by ids the caller chose: safe to retry on UNAVAILABLE.
        "history": open_channel(
            settings.addr("history"), idempotent_services=["agentmesh.history.v1.HistoryService"]
        ),
        "memory": open_channel(
            settings.addr("memory"), idempotent_services=["agentmesh.memory.v1.MemoryService"]
        ),
        "scheduler": open_channel(settings.addr("scheduler")),
    }
    orchestrator = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channels["orchestrator"])
    return Clients(
        orchestrator=orchestrator,
        history=history_service_pb2_grpc.HistoryServiceStub(channels["history"]),
        memory=memory_service_pb2_grpc.MemoryServiceStub(channels["memory"]),
        scheduler=scheduler_service_pb2_grpc.SchedulerServiceStub(channels["scheduler"]),
        channels=channels,
    )


async def unary(
    rpc: Any,
    request: Any,
    *,
    owner: str,
    service: str,
    timeout: float,
    admin: bool = False,
) -> Any:
    """One unary call on behalf of `owner`, with a deadline; a failure becomes an ApiError."""
    try:
        return await rpc(
            request,
            metadata=call_metadata(owner, request_id=request_id_var.get(), admin=admin),
            timeout=timeout,
        )
    except grpc.RpcError as err:
        raise from_rpc(err, service) from None
