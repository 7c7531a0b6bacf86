"""The conversation index's background work: embedding new messages (with an embedding model
configured, as services.memory.embeddings.Embedder embeds memories) and forgetting threads
older than the retention period (AGENTMESH_THREAD_RETENTION_DAYS, as history expires them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from services.memory import conversation_store
from services.memory.embeddings import EmbeddingClient

log = logging.getLogger(__name__)

_MAX_BACKOFF_SECONDS = 60.0
# The embedder reads on from the last message it saw (messages are only ever added), and
# from the start again this often: a message whose number was taken before a higher one's
# but committed after it (PostgreSQL sequences) is caught by the next full pass.
_FULL_PASS_SECONDS = 600.0
# Threads expired per transaction of the retention sweep.
_EXPIRE_BATCH = 100


class ConversationEmbedder:
    """Embeds indexed messages without a vector until none is left, then waits for an
    IndexConversation (wake) or the poll interval. Until a message has its vector, the
    lexical half finds it."""

    def __init__(self, engine: AsyncEngine, client: EmbeddingClient) -> None:
        self.engine = engine
        self.client = client
        self._wake = asyncio.Event()
        # The highest message number looked at since the last full pass.
        self._after = 0
        self._pass_start = 0.0

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        backoff = 0.0
        while True:
            if time.monotonic() - self._pass_start > _FULL_PASS_SECONDS:
                self._after, self._pass_start = 0, time.monotonic()
            try:
                done = await self.embed_batch()
                backoff = 0.0
            except Exception as err:  # the endpoint or the database: back off, outlive it
                backoff = min(_MAX_BACKOFF_SECONDS, max(1.0, backoff * 2))
                log.warning("conversation embedder: %r; retrying in %.0f s", err, backoff)
                await asyncio.sleep(backoff)
                continue
            if done == 0:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), self.client.config.poll_seconds)
                except TimeoutError:
                    pass

    async def embed_batch(self) -> int:
        """Embeds one batch of messages without a vector; how many (0: none left)."""
        config = self.client.config
        async with self.engine.connect() as conn:
            pending = await conversation_store.unembedded(
                conn, config.model, config.dimensions, config.batch_size, self._after
            )
        if not pending:
            return 0
        vectors = await self.client.embed([text for _, _, text in pending], query=False)
        async with self.engine.begin() as conn:
            for (seq, owner, _), vector in zip(pending, vectors, strict=True):
                await conversation_store.put_embedding(conn, seq, owner, config.model, vector)
        self._after = pending[-1][0]
        return len(pending)


async def expire_forever(engine: AsyncEngine, days: int, every_seconds: float) -> None:
    """Every `every_seconds` (history's retention sweep's interval): forget the threads whose
    newest indexed message is older than `days` days, less one interval. History expires a
    thread by its last update, never before its newest message, and sweeps as often: so
    whatever history has expired, this sweep had removed already."""
    while True:
        try:
            await expire_once(engine, days, early_seconds=every_seconds)
        except Exception:
            log.exception("conversation retention sweep failed")
        await asyncio.sleep(every_seconds)


async def expire_once(
    engine: AsyncEngine, days: int, now: datetime | None = None, early_seconds: float = 0.0
) -> int:
    """One sweep (threads older than `days` days less `early_seconds`); how many messages
    went."""
    cutoff = (now or datetime.now(UTC)) - timedelta(days=days) + timedelta(seconds=early_seconds)
    total = 0
    while True:
        async with engine.begin() as conn:
            gone = await conversation_store.expire(conn, cutoff, _EXPIRE_BATCH)
        total += gone
        if gone == 0:
            return total
