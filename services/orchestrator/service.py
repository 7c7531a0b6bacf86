"""Orchestrator wiring: peers, the run event log, the profile registry, the run manager.

The orchestrator owns no tables (nothing to migrate); what it owns is the run event log
(a Redis stream per run, or in memory in the embedded mode)."""

from __future__ import annotations

import functools

import grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2, orchestrator_service_pb2_grpc
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.orchestrator.clients import Peers
from services.orchestrator.core import RunPolicy
from services.orchestrator.eventlog import RedisEventLog, open_event_log
from services.orchestrator.owner_data import registry as owner_data_registry
from services.orchestrator.runs import RunManager
from services.orchestrator.servicer import OrchestratorServicer
from shared import owner_data
from shared.admission import InFlight
from shared.model.cards import CardError
from shared.model.factory import agent_problem, check_endpoints
from shared.pagination import PageTokens
from shared.profiles import ProfileFileError, ProfileRegistry
from shared.server import EVENT_LOG, ServiceParts
from shared.settings import Settings
from shared.tools import KnownTools, deployment_tools

SERVICE_NAME = orchestrator_service_pb2.DESCRIPTOR.services_by_name["OrchestratorService"].full_name

migrate = None


class RunSettings(BaseSettings):
    """The orchestrator's own run timing (AGENTMESH_RUN_LEASE_SECONDS,
    AGENTMESH_RUN_QUEUE_POLL_SECONDS); no other service reads them."""

    model_config = SettingsConfigDict(env_prefix="AGENTMESH_", extra="ignore")

    # How long a run's record stays held without a renewal; a run whose orchestrator died
    # is marked failed within about this long (plus one sweep interval).
    run_lease_seconds: float = 15.0
    # How often a queued run asks whether it may start.
    run_queue_poll_seconds: float = 0.25
    # AGENTMESH_APPROVAL_TTL_SECONDS: how long a tool call waits for a person's approval
    # (the AG-UI interrupt's expiresAt); later it is recorded as denied.
    approval_ttl_seconds: float = 3600.0

    def policy(self) -> RunPolicy:
        return RunPolicy(
            lease_seconds=max(self.run_lease_seconds, 1.0),
            queue_poll_seconds=max(self.run_queue_poll_seconds, 0.01),
            approval_ttl_seconds=max(self.approval_ttl_seconds, 0.1),
        )


def known_tools(settings: Settings) -> KnownTools:
    """The deployment's tools (built-ins and AGENTMESH_TOOLS_FILE); a bad file stops the service."""
    return deployment_tools(settings, "orchestrator")[1]


def load_profiles(settings: Settings) -> ProfileRegistry:
    """The built-ins plus AGENTMESH_PROFILES_FILE, all validated; a bad file stops the
    service with a message naming the file, the entry and the field (nothing half-loaded)."""
    try:
        # Each profile's agent is checked against the model cards the executor will use.
        check = functools.partial(agent_problem, settings)
        return ProfileRegistry.load(settings.profiles_file, known_tools(settings), check)
    except ProfileFileError as err:
        raise SystemExit(f"orchestrator: AGENTMESH_PROFILES_FILE is invalid: {err}") from None


async def check_model_endpoints(settings: Settings, registry: ProfileRegistry) -> None:
    """The deployment's card and each profile's against their endpoints' model lists: a card
    whose endpoint lists models but not the card's stops the service naming the card; an
    endpoint that has no list or is down is a logged warning (shared.model.factory)."""
    names = [None, *(registry.get(name).agent.model_card for name in registry.names())]
    try:
        await check_endpoints(settings, names)
    except CardError as err:
        raise SystemExit(f"orchestrator: {err}") from None


async def build(
    settings: Settings,
    *,
    profiles: ProfileRegistry | None = None,
    policy: RunPolicy | None = None,
) -> ServiceParts:
    registry = profiles or load_profiles(settings)
    await check_model_endpoints(settings, registry)
    event_log = open_event_log(
        settings.event_log_url,
        settings.event_log_retention_seconds,
        settings.event_log_prefix,
        memory_mb=settings.event_log_memory_mb,
    )
    peers = Peers(settings)
    runs = RunManager(
        peers,
        event_log,
        rpc_timeout_seconds=settings.rpc_timeout_seconds,
        policy=policy or RunSettings().policy(),
        in_flight=InFlight(
            limit=settings.max_runs_in_flight, per_owner=settings.max_runs_in_flight_per_owner
        ),
    )
    runs.start_sweeper()
    servicer = OrchestratorServicer(runs, event_log, registry, settings, known_tools(settings))

    def register(server: grpc.aio.Server) -> None:
        orchestrator_service_pb2_grpc.add_OrchestratorServiceServicer_to_server(servicer, server)

    async def on_stop() -> None:
        await runs.aclose(settings.grace_seconds)
        await peers.aclose()
        await event_log.aclose()

    return ServiceParts(
        register=register,
        service_names=[SERVICE_NAME],
        on_stop=on_stop,
        dependencies={EVENT_LOG: event_log.check} if isinstance(event_log, RedisEventLog) else {},
        owner_data=owner_data.PlatformServicer(
            owner_data_registry(event_log), None, PageTokens(settings.page_token_secret)
        ),
    )
