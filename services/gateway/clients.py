"""The gRPC peers of the gateway: one channel and stub per service."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from agentmesh.history.v1 import history_service_pb2_grpc
from agentmesh.memory.v1 import memory_service_pb2_grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2, orchestrator_service_pb2_grpc
from agentmesh.platform.v1 import platform_service_pb2_grpc
from agentmesh.scheduler.v1 import scheduler_service_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.gateway.convert import tool_sources_json
from services.gateway.errors import from_rpc
from shared import owner_data
from shared.clients import open_channel
from shared.identity import call_metadata
from shared.logs import request_id_var
from shared.server import DATABASE, EMBEDDING_MODEL, EVENT_LOG
from shared.settings import Settings

# The services /readyz checks.
PEERS = ("orchestrator", "history", "memory", "scheduler")

# Deadline of one readiness probe.
HEALTH_TIMEOUT_SECONDS = 1.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# The stores a peer reports on (shared.server's health entries), as /readyz names them.
STORES = {DATABASE: "database", EVENT_LOG: "event log"}
# The owner id /readyz asks the tool listing as: the listing is the deployment's, the same for
# every owner (no owner's data is read or written).
READINESS_OWNER = "gateway:readyz"


@dataclass
class Clients:
    orchestrator: orchestrator_service_pb2_grpc.OrchestratorServiceAsyncStub
    history: history_service_pb2_grpc.HistoryServiceAsyncStub
    memory: memory_service_pb2_grpc.MemoryServiceAsyncStub
    scheduler: scheduler_service_pb2_grpc.SchedulerServiceAsyncStub
    channels: dict[str, grpc.aio.Channel] = field(default_factory=dict)

    def platform(self, service: str) -> platform_service_pb2_grpc.PlatformServiceAsyncStub:
        """The service's platform contract (agentmesh.platform.v1): its owner data and its
        webhook outbox, the same for every service."""
        return platform_service_pb2_grpc.PlatformServiceStub(self.channels[service])

    async def not_serving(self) -> dict[str, str]:
        """The peers that do not answer SERVING on grpc.health.v1 within a short deadline,
        each with why: a peer that answers NOT_SERVING is asked which of its stores it lost
        (the health entries DATABASE and EVENT_LOG of shared.server)."""

        async def status(name: str, service: str) -> int | None:
            stub = health_pb2_grpc.HealthStub(self.channels[name])
            try:
                # types-grpcio-health-checking declares HealthStub without its methods.
                reply = await stub.Check(  # type: ignore[attr-defined]
                    health_pb2.HealthCheckRequest(service=service), timeout=HEALTH_TIMEOUT_SECONDS
                )
            except grpc.RpcError:
                return None  # unreachable, or no such entry (NOT_FOUND)
            return int(reply.status)

        async def why(name: str) -> str | None:
            overall = await status(name, "")
            if overall == SERVING:
                return None
            if overall is None:
                return "does not answer SERVING on grpc.health.v1"
            lost = [
                store
                for store, answer in zip(
                    STORES,
                    await asyncio.gather(*(status(name, s) for s in STORES)),
                    strict=True,
                )
                if answer == NOT_SERVING
            ]
            if lost:
                return f"cannot reach its {' and '.join(STORES[s] for s in lost)}"
            return "answers NOT_SERVING on grpc.health.v1"

        names = [n for n in PEERS if n in self.channels]
        reasons = await asyncio.gather(*(why(n) for n in names))
        down = {n: r for n, r in zip(names, reasons, strict=True) if r is not None}
        down.update({n: "is not configured" for n in PEERS if n not in self.channels})
        return down

    async def memory_search(self) -> dict[str, str]:
        """How the memory service searches now, for /readyz: hybrid while its embedding
        model answers (its health entry EMBEDDING_MODEL), lexical-only (degraded) without
        one or while it does not answer."""
        if "memory" not in self.channels:
            return {"status": "degraded", "mode": "lexical", "reason": "no memory service"}
        stub = health_pb2_grpc.HealthStub(self.channels["memory"])
        try:
            # types-grpcio-health-checking declares HealthStub without its methods.
            reply = await stub.Check(  # type: ignore[attr-defined]
                health_pb2.HealthCheckRequest(service=EMBEDDING_MODEL),
                timeout=HEALTH_TIMEOUT_SECONDS,
            )
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.NOT_FOUND:
                why = "no embedding model is configured (AGENTMESH_EMBEDDING_BASE_URL)"
            else:
                why = "the memory service does not answer"
            return {"status": "degraded", "mode": "lexical", "reason": why}
        if reply.status == SERVING:
            return {"status": "ready", "mode": "hybrid"}
        if reply.status == NOT_SERVING:
            why = "the embedding model does not answer"
        else:
            why = "the embedding model has not been checked yet"
        return {"status": "degraded", "mode": "lexical", "reason": why}

    async def tool_sources(self) -> dict[str, Any]:
        """The executor's outside tool sources for /readyz (convert.tool_sources_json), or
        `unknown` when the orchestrator or its executor cannot tell within the probe's
        deadline. Never a reason for a 503: runs that need no such tool still serve."""
        try:
            reply = await self.orchestrator.ListTools(
                orchestrator_service_pb2.ListToolsRequest(),
                metadata=call_metadata(READINESS_OWNER, request_id=request_id_var.get()),
                timeout=HEALTH_TIMEOUT_SECONDS,
            )
        except grpc.RpcError:
            return {
                "status": "unknown",
                "reason": "the orchestrator or its executor does not answer",
                "sources": [],
            }
        return tool_sources_json(reply.sources)

    async def close(self) -> None:
        for ch in self.channels.values():
            await ch.close()


def open_clients(settings: Settings) -> Clients:
    """Channels to every peer at settings.addr(name); call inside the serving event loop."""
    # The platform contract is idempotent on every service (a deletion, an export, the
    # outbox's listing and acknowledgement): safe to retry on UNAVAILABLE.
    platform = owner_data.SERVICE_NAME
    channels = {
        "orchestrator": open_channel(
            settings.addr("orchestrator"), idempotent_services=[platform], peer="orchestrator"
        ),
        # Reads, and writes keyed by ids the caller chose: safe to retry on UNAVAILABLE.
        "history": open_channel(
            settings.addr("history"),
            idempotent_services=["agentmesh.history.v1.HistoryService", platform],
            peer="history",
        ),
        "memory": open_channel(
            settings.addr("memory"),
            idempotent_services=["agentmesh.memory.v1.MemoryService", platform],
            peer="memory",
        ),
        "scheduler": open_channel(
            settings.addr("scheduler"), idempotent_services=[platform], peer="scheduler"
        ),
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
    renames: Mapping[str, str] | None = None,
) -> Any:
    """One unary call on behalf of `owner`, with a deadline; a failure becomes an ApiError
    (`renames`: a proto field -> the name the caller used for it, as in errors.from_rpc)."""
    try:
        return await rpc(
            request,
            metadata=call_metadata(owner, request_id=request_id_var.get(), admin=admin),
            timeout=timeout,
        )
    except grpc.RpcError as err:
        raise from_rpc(err, service, renames=renames) from None
