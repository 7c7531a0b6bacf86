"""Migration 0002 on a database that already holds memories: their search tokens are filled
in, so the new lexical index finds them (English words and Chinese inside sentences)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import sqlalchemy as sa

from services.memory import core, store, tables
from services.memory.service import MIGRATIONS
from shared import db
from shared.settings import Settings


async def test_memories_written_before_0002_are_found_after_it(settings: Settings) -> None:
    engine = db.create_engine(settings, "memory")
    schema = settings.schema_for("memory")
    try:
        await db.migrate(engine, MIGRATIONS, schema, revision="0001")
        async with engine.begin() as conn:
            now = datetime.now(UTC)
            # The table as 0001 made it (no search_text).
            old = sa.Table(
                "memories",
                sa.MetaData(),
                *(sa.Column(c.name, c.type) for c in tables.memories.c if c.name != "search_text"),
            )
            for content in ("User likes hiking in the mountains", "我每天早上都会喝一杯绿茶"):
                key = core.content_key(content)
                await conn.execute(
                    sa.insert(old).values(
                        id=str(uuid.uuid4()),
                        owner_id="alice",
                        content=content,
                        content_key=key,
                        content_hash=store._hash(key),
                        kind="fact",
                        source_run_id="",
                        source_message_ids=[],
                        create_time=now,
                        update_time=now,
                        version=1,
                    )
                )
        await db.migrate(engine, MIGRATIONS, schema)
        async with engine.connect() as conn:
            hikes = await store.search(conn, "alice", "hike", 10)
            tea = await store.search(conn, "alice", "绿茶", 10)
            other = await store.search(conn, "bob", "绿茶", 10)
        assert [m.content for m in hikes] == ["User likes hiking in the mountains"]
        assert [m.content for m in tea] == ["我每天早上都会喝一杯绿茶"]
        assert other == []
    finally:
        await engine.dispose()
