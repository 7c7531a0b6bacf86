"""Wiring of the history service: engine, migrations, servicer."""

from __future__ import annotations

from pathlib import Path

import grpc
from agentmesh.history.v1 import history_service_pb2, history_service_pb2_grpc

from services.history.servicer import Clock, HistoryServicer, utc_now
from shared import db
from shared.pagination import PageTokens
from shared.server import ServiceParts
from shared.settings import Settings

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
SERVICE_NAME = history_service_pb2.DESCRIPTOR.services_by_name["HistoryService"].full_name


async def migrate(settings: Settings) -> None:
    engine = db.create_engine(settings, "history")
    try:
        await db.migrate(engine, MIGRATIONS, settings.schema_for("history"))
    finally:
        await engine.dispose()


async def build(settings: Settings, *, clock: Clock = utc_now) -> ServiceParts:
    """The service's parts; `clock` lets tests decide when messages are stored."""
    engine = db.create_engine(settings, "history")
    await db.migrate(engine, MIGRATIONS, settings.schema_for("history"))
    servicer = HistoryServicer(
        engine, clock=clock, tokens=PageTokens(settings.page_token_secret)
    )

    def register(server: grpc.aio.Server) -> None:
        history_service_pb2_grpc.add_HistoryServiceServicer_to_server(servicer, server)

    return ServiceParts(
        register=register,
        service_names=[SERVICE_NAME],
        on_stop=engine.dispose,
        dependencies=db.health_checks(settings, "history"),
    )
