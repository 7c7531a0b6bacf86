"""Orchestrator wiring: peers, the run event log, the profile registry, the run manager.

The orchestrator owns no tables (nothing to migrate); what it owns is the run event log
(a Redis stream per run, or in memory in the embedded mode)."""

from __future__ import annotations

import grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2, orchestrator_service_pb2_grpc

from services.orchestrator.clients import Peers
from services.orchestrator.runs import RunManager
from services.orchestrator.servicer import OrchestratorServicer
from shared.eventlog import open_event_log
from shared.profiles import ProfileFileError, ProfileRegistry
from shared.server import ServiceParts
from shared.settings import Settings
from shared.tools import REGISTERED_TOOLS

SERVICE_NAME = orchestrator_service_pb2.DESCRIPTOR.services_by_name["OrchestratorService"].full_name

migrate = None


def load_profiles(settings: Settings) -> ProfileRegistry:
    """The built-ins plus AGENTMESH_PROFILES_FILE, all validated; a bad file stops the
    service with a message naming the file, the entry and the field (nothing half-loaded)."""
    try:
        return ProfileRegistry.load(settings.profiles_file, REGISTERED_TOOLS)
    except ProfileFileError as err:
        raise SystemExit(f"orchestrator: AGENTMESH_PROFILES_FILE is invalid: {err}") from None


async def build(settings: Settings, *, profiles: ProfileRegistry | None = None) -> ServiceParts:
    registry = profiles or load_profiles(settings)
    event_log = open_event_log(
        settings.event_log_url, settings.event_log_retention_seconds, settings.event_log_prefix
    )
    peers = Peers(settings)
    runs = RunManager(peers, event_log, rpc_timeout_seconds=settings.rpc_timeout_seconds)
    servicer = OrchestratorServicer(runs, event_log, registry, settings)

    def register(server: grpc.aio.Server) -> None:
        orchestrator_service_pb2_grpc.add_OrchestratorServiceServicer_to_server(servicer, server)

    async def on_stop() -> None:
        await runs.aclose(settings.grace_seconds)
        await peers.aclose()
        await event_log.aclose()

    return ServiceParts(register=register, service_names=[SERVICE_NAME], on_stop=on_stop)
