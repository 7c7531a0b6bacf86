"""The memory service: owner-scoped durable facts and agent watermarks."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import grpc
from agentmesh.memory.v1 import memory_service_pb2, memory_service_pb2_grpc

from services.memory import conversation_tasks
from services.memory.conversation_tasks import ConversationEmbedder
from services.memory.embeddings import Embedder, EmbeddingClient, EmbeddingConfig
from services.memory.owner_data import REGISTRY
from services.memory.servicer import MemoryServicer
from shared import db, owner_data
from shared.pagination import PageTokens
from shared.server import EMBEDDING_MODEL, ServiceParts
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
    # On SQLite the one writer of its file (replicas need PostgreSQL).
    engine = db.create_engine(settings, SERVICE, inline_sqlite=True)
    try:
        await db.migrate(engine, MIGRATIONS, settings.schema_for(SERVICE))
    except BaseException:
        await engine.dispose()
        raise
    config = EmbeddingConfig.from_settings(settings)
    embedder = None if config is None else Embedder(engine, EmbeddingClient(config))
    said = None if embedder is None else ConversationEmbedder(engine, embedder.client)
    servicer = MemoryServicer(engine, PageTokens(settings.page_token_secret), embedder, said)
    background: list[Callable[[], Coroutine[Any, Any, None]]] = []
    if embedder is not None and said is not None:
        background += [embedder.run, said.run]
    if settings.thread_retention_days > 0:
        days, every = settings.thread_retention_days, settings.lifecycle_sweep_seconds
        background.append(lambda: conversation_tasks.expire_forever(engine, days, every))

    def register(server: grpc.aio.Server) -> None:
        memory_service_pb2_grpc.add_MemoryServiceServicer_to_server(servicer, server)

    async def on_stop() -> None:
        if embedder is not None:
            await embedder.client.aclose()
        await engine.dispose()

    return ServiceParts(
        register=register,
        service_names=[SERVICE_NAME],
        on_stop=on_stop,
        background=background,
        dependencies=db.health_checks(settings, SERVICE),
        # Search is hybrid while the model answers, lexical-only (degraded) otherwise: the
        # gateway's /readyz says which.
        features={} if embedder is None else {EMBEDDING_MODEL: embedder.client.check},
        owner_data=owner_data.PlatformServicer(
            REGISTRY, engine, PageTokens(settings.page_token_secret)
        ),
    )
