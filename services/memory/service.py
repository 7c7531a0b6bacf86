"""The memory service: owner-scoped durable facts and agent watermarks."""

from __future__ import annotations

from pathlib import Path

import grpc
from agentmesh.memory.v1 import memory_service_pb2, memory_service_pb2_grpc

from services.memory.servicer import MemoryServicer
from shared import db
from shared.pagination import PageTokens
from shared.server import ServiceParts
from shared.settings import Settings

SERVICE = "memory"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
SERVICE_NAME = memory_service_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name


async def migrate(settings: Settings) -> None:
    engine = db.create_engine(settings, SERVICE)
    try:
        await db.migrate(engine, MIGRATIONS, settings.schema_for(SERVICE))
    finally:
        await engine.dispose()


async def build(settings: Settings) -> ServiceParts:
    engine = db.create_engine(settings, SERVICE)
    try:
        await db.migrate(engine, MIGRATIONS, settings.schema_for(SERVICE))
    except BaseException:
        await engine.dispose()
        raise
    servicer = MemoryServicer(engine, PageTokens(settings.page_token_secret))

    def register(server: grpc.aio.Server) -> None:
        memory_service_pb2_grpc.add_MemoryServiceServicer_to_server(servicer, server)

    return ServiceParts(
        register=register,
        service_names=[SERVICE_NAME],
        on_stop=engine.dispose,
        dependencies=db.health_checks(settings, SERVICE),
    )
