"""Wiring of the scheduler: engine and migrations, orchestrator and history channels,
dispatcher, claim loop (a background task of the shared server) and the gRPC servicer."""

from __future__ import annotations

from pathlib import Path

import grpc
from agentmesh.history.v1 import history_service_pb2
from agentmesh.scheduler.v1 import scheduler_service_pb2, scheduler_service_pb2_grpc
from sqlalchemy.ext.asyncio import AsyncEngine

from services.scheduler.dispatch import ClaimLoop, Dispatcher, replica_id
from services.scheduler.owner_data import REGISTRY
from services.scheduler.servicer import SchedulerServicer
from services.scheduler.settings import SchedulerSettings
from shared import db, owner_data
from shared.clients import open_channel
from shared.pagination import PageTokens
from shared.server import ServiceParts
from shared.settings import Settings
from shared.tools import deployment_tools

NAME = "scheduler"
MIGRATIONS = Path(__file__).parent / "migrations"
SERVICE_NAME = scheduler_service_pb2.DESCRIPTOR.services_by_name["SchedulerService"].full_name
HISTORY_SERVICE = history_service_pb2.DESCRIPTOR.services_by_name["HistoryService"].full_name


async def _migrated_engine(settings: Settings) -> AsyncEngine:
    engine = db.create_engine(settings, NAME)
    await db.migrate(engine, MIGRATIONS, settings.schema_for(NAME))
    return engine


async def migrate(settings: Settings) -> None:
    engine = await _migrated_engine(settings)
    await engine.dispose()


async def build(settings: Settings, cfg: SchedulerSettings | None = None) -> ServiceParts:
    cfg = cfg or SchedulerSettings()
    engine = await _migrated_engine(settings)
    channel = open_channel(settings.addr("orchestrator"), peer="orchestrator")
    # Only history's run lookup (GetRun, a read) goes there: retried on UNAVAILABLE.
    history = open_channel(
        settings.addr("history"), idempotent_services=[HISTORY_SERVICE], peer="history"
    )
    dispatcher = Dispatcher(engine, channel, history, settings, cfg, replica_id())
    loop = ClaimLoop(engine, dispatcher, cfg)
    _, known = deployment_tools(settings, NAME)
    servicer = SchedulerServicer(
        engine, dispatcher, cfg, PageTokens(settings.page_token_secret), known
    )

    def register(server: grpc.aio.Server) -> None:
        scheduler_service_pb2_grpc.add_SchedulerServiceServicer_to_server(servicer, server)

    async def on_stop() -> None:
        await dispatcher.close(settings.grace_seconds)
        await channel.close()
        await history.close()
        await engine.dispose()

    return ServiceParts(
        register=register,
        service_names=[SERVICE_NAME],
        on_stop=on_stop,
        background=[loop.run_forever],
        dependencies=db.health_checks(settings, NAME),
        owner_data=owner_data.PlatformServicer(
            REGISTRY, engine, PageTokens(settings.page_token_secret)
        ),
    )
