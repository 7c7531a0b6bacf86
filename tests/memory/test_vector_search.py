"""The vector half of search at the store, with vectors chosen by hand (no model): SQLite
keeps an owner's vectors in memory between searches (services/memory/vector_cache.py),
checked against the owner's stamp, so it must see every change another process commits;
PostgreSQL reads them in the database. Both backends answer alike."""

from __future__ import annotations

import random
import struct
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from services.memory import centering, core, store
from services.memory.service import MIGRATIONS
from shared import db
from shared.settings import Settings
from tests.conftest import USES_POSTGRES

MODEL = "hand-made"
# Queries without a word of any memory: only the vector half finds anything.
QUERY = "zzz"


def axis(i: int, dims: int = 4) -> list[float]:
    return [1.0 if j == i else 0.0 for j in range(dims)]


@pytest.fixture
async def replicas(settings: Settings) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine]]:
    """Two engines of one database: two processes of the memory service, as it were."""
    one, other = db.create_engine(settings, "memory"), db.create_engine(settings, "memory")
    try:
        await db.migrate(one, MIGRATIONS, settings.schema_for("memory"))
        yield one, other
    finally:
        await one.dispose()
        await other.dispose()


async def put(engine: AsyncEngine, owner: str, content: str, vector: list[float]) -> str:
    """Writes the memory (again: a new version) and stores `vector` as its embedding."""
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        memory, _ = await store.write(conn, owner, core.validate_write(content, "", "", []), now)
        task = store.EmbeddingTask(memory.id, owner, memory.content, memory.version, "")
        assert await store.put_embedding(conn, owner, task, MODEL, vector, now)
    return memory.id


async def nearest(
    engine: AsyncEngine, owner: str, vector: list[float], limit: int = 1
) -> list[str]:
    async with engine.connect() as conn:
        found = await store.search(conn, owner, QUERY, limit, embedding=vector, model=MODEL)
    return [m.content for m in found]


async def test_search_by_meaning_sees_every_change_another_replica_makes_to_the_vectors(
    replicas: tuple[AsyncEngine, AsyncEngine],
) -> None:
    searcher, writer = replicas
    await put(writer, "alice", "alpha", axis(0))
    beta = await put(writer, "alice", "beta", axis(1))
    assert await nearest(searcher, "alice", axis(0)) == ["alpha"]
    assert await nearest(searcher, "alice", axis(1)) == ["beta"]

    # Another vector for a memory (its content rewritten and embedded again): nearer to
    # this query than beta now, farther before.
    await put(writer, "alice", "alpha", axis(2))
    assert await nearest(searcher, "alice", store.unit([0, 0.5, 1, 0])) == ["alpha"]

    # A new memory.
    await put(writer, "alice", "gamma", store.unit([0, 0.5, 0, 1]))
    assert await nearest(searcher, "alice", axis(3)) == ["gamma"]

    # A forgotten memory (its embedding goes with it): the next nearest takes its place.
    async with writer.begin() as conn:
        await store.forget_by_id(conn, "alice", beta)
    assert await nearest(searcher, "alice", axis(1)) == ["gamma"]

    # Another owner's change is not this owner's.
    await put(writer, "bob", "delta", axis(1))
    assert await nearest(searcher, "bob", axis(1)) == ["delta"]
    assert await nearest(searcher, "alice", axis(1)) == ["gamma"]

    # Every memory of the owner gone, then a new one: only it is found.
    async with writer.begin() as conn:
        for content in ("alpha", "gamma"):
            await store.forget_matching(conn, "alice", content)
    assert await nearest(searcher, "alice", axis(0), limit=10) == []
    await put(writer, "alice", "epsilon", axis(1))
    assert await nearest(searcher, "alice", axis(1), limit=10) == ["epsilon"]


async def test_a_search_of_unchanged_vectors_does_not_read_them_again(
    replicas: tuple[AsyncEngine, AsyncEngine],
) -> None:
    """SQLite: the owner's vectors are read once, then its stamp only, until they change."""
    searcher, writer = replicas
    for i in range(4):
        await put(writer, "alice", f"fact {i}", axis(i))
    await nearest(searcher, "alice", axis(0))
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    event.listen(searcher.sync_engine, "before_cursor_execute", record)
    try:
        assert await nearest(searcher, "alice", axis(1)) == ["fact 1"]
        reads = [s for s in sent if "FROM memory_embeddings" in s]
        if USES_POSTGRES:
            assert reads  # the database searches its vectors itself, every time
        else:
            assert reads == []
        await put(writer, "alice", "fact 4", store.unit([0, 0.1, 1, 0]))
        sent.clear()
        assert await nearest(searcher, "alice", axis(2), limit=2) == ["fact 2", "fact 4"]
        assert any("FROM memory_embeddings" in s for s in sent)
    finally:
        event.remove(searcher.sync_engine, "before_cursor_execute", record)


async def put_as_at_0004(
    engine: AsyncEngine, owner: str, content: str, vector: list[float]
) -> None:
    """Writes the memory and its embedding as the store did at migration 0004 (no script
    column yet)."""
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        memory, _ = await store.write(conn, owner, core.validate_write(content, "", "", []), now)
        stored: str | bytes = (
            store._vector_text(vector) if USES_POSTGRES else struct.pack("<4f", *vector)
        )
        cast = "CAST(CAST(:embedding AS text) AS public.vector)" if USES_POSTGRES else ":embedding"
        await conn.execute(
            sa.text(
                "INSERT INTO memory_embeddings (memory_id, owner_id, model, dimensions, "
                "memory_version, content_digest, update_time, embedding) VALUES (:memory_id, "
                f":owner_id, :model, 4, :version, :digest, :now, {cast})"
            ),
            {
                "memory_id": memory.id,
                "owner_id": owner,
                "model": MODEL,
                "version": memory.version,
                "digest": store.digest(content),
                "now": now,
                "embedding": stored,
            },
        )


async def test_vectors_stored_before_migrations_0005_and_0006_are_searched_after_them(
    settings: Settings,
) -> None:
    engine = db.create_engine(settings, "memory")
    schema = settings.schema_for("memory")
    try:
        await db.migrate(engine, MIGRATIONS, schema, revision="0004_conversation")
        await put_as_at_0004(engine, "alice", "alpha", axis(0))
        await put_as_at_0004(engine, "alice", "贝塔 beta", axis(1))
        await db.migrate(engine, MIGRATIONS, schema)
        assert await nearest(engine, "alice", axis(1)) == ["贝塔 beta"]
        assert await nearest(engine, "alice", axis(0)) == ["alpha"]
        # Each vector's script, filled from its memory's content (0006).
        async with engine.connect() as conn:
            rows = await conn.execute(
                sa.text(
                    "SELECT m.content, e.cjk FROM memory_embeddings e "
                    "JOIN memories m ON m.id = e.memory_id"
                )
            )
            assert {r.content: bool(r.cjk) for r in rows} == {"alpha": False, "贝塔 beta": True}
    finally:
        await engine.dispose()


async def test_a_centered_search_averages_the_owners_vectors_again_only_after_a_change(
    replicas: tuple[AsyncEngine, AsyncEngine],
) -> None:
    """PostgreSQL keeps each owner's per-script means while the owner's vectors have not
    moved (a search averaged every vector of the owner each time); another replica's
    change is seen at the next search."""
    searcher, writer = replicas
    rng = random.Random(31)
    for i in range(centering.MIN_PER_SCRIPT):
        await put(writer, "alice", f"fact {i}", store.unit([rng.random() for _ in range(4)]))
        await put(writer, "alice", f"事实 {i}", store.unit([rng.random() for _ in range(4)]))
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    def averaged() -> bool:
        return any("avg(" in s for s in sent)

    event.listen(searcher.sync_engine, "before_cursor_execute", record)
    try:
        first = await nearest(searcher, "alice", axis(0), limit=20)
        assert averaged() == USES_POSTGRES
        sent.clear()
        assert await nearest(searcher, "alice", axis(0), limit=20) == first
        assert not averaged()
        # Another replica moves one vector (the same memory, a new version): averaged again,
        # and the ranking follows the new vector.
        await put(writer, "alice", "fact 0", store.unit([0, 0, 0, 1]))
        sent.clear()
        moved = await nearest(searcher, "alice", axis(3), limit=1)
        assert averaged() == USES_POSTGRES
        assert moved == ["fact 0"]
    finally:
        event.remove(searcher.sync_engine, "before_cursor_execute", record)
