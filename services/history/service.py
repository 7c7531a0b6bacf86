"""Wiring of the history service: engine, migrations, servicer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import grpc
from agentmesh.history.v1 import history_service_pb2, history_service_pb2_grpc

from services.history.owner_data import REGISTRY
from services.history.servicer import Clock, HistoryServicer, utc_now
from shared import db, owner_data
from shared.pagination import PageTokens
from shared.server import ServiceParts
from shared.settings import Settings

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
log = logging.getLogger(__name__)
SERVICE_NAME = history_service_pb2.DESCRIPTOR.services_by_name["HistoryService"].full_name


async def migrate(settings: Settings) -> None:
    engine = db.create_engine(settings, "history")
    try:
        await db.migrate(engine, MIGRATIONS, settings.schema_for("history"))
    finally:
        await engine.dispose()


async def build(settings: Settings, *, clock: Clock = utc_now) -> ServiceParts:
    """The service's parts; `clock` lets tests decide when messages are stored."""
    # On SQLite the one writer of its file (replicas need PostgreSQL).
    engine = db.create_engine(settings, "history", inline_sqlite=True)
    await db.migrate(engine, MIGRATIONS, settings.schema_for("history"))
    servicer = HistoryServicer(engine, clock=clock, tokens=PageTokens(settings.page_token_secret))
    background: list[Callable[[], Coroutine[Any, Any, None]]] = []
    if settings.thread_retention_days > 0:

        async def sweep_retention() -> None:
            while True:
                try:
                    # A full page: more threads may have expired, so sweep again at once.
                    while await servicer.expire_threads(settings.thread_retention_days) >= 100:
                        pass
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("retention sweep failed")
                await asyncio.sleep(settings.lifecycle_sweep_seconds)

        background.append(sweep_retention)

    def register(server: grpc.aio.Server) -> None:
        history_service_pb2_grpc.add_HistoryServiceServicer_to_server(servicer, server)

    return ServiceParts(
        register=register,
        service_names=[SERVICE_NAME],
        on_stop=engine.dispose,
        background=background,
        dependencies=db.health_checks(settings, "history"),
        owner_data=owner_data.PlatformServicer(
            REGISTRY, engine, PageTokens(settings.page_token_secret)
        ),
    )
