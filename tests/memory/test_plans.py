"""ListMemories' later pages search the owner's index from the page position: they never read
again every newer memory of the owner, whose number grows with every memory they keep.
Checked in the plan of the database under test (SQLite: EXPLAIN QUERY PLAN; PostgreSQL:
EXPLAIN with sequential scans discouraged, since on a small table they would be cheaper)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.memory import queries, store
from services.memory.service import MIGRATIONS
from shared import db
from shared.settings import Settings
from tests.conftest import USES_POSTGRES, migrated_engine


@pytest.fixture
async def engine(settings: Settings) -> AsyncIterator[AsyncEngine]:
    async with migrated_engine(settings, "memory", MIGRATIONS) as engine:
        yield engine


async def query_sent(
    engine: AsyncEngine, call: Callable[[AsyncConnection], Awaitable[Any]]
) -> tuple[str, tuple[Any, ...]]:
    """The one query `call` sends, as the driver gets it (the store builds it per call)."""
    sent: list[tuple[str, tuple[Any, ...]]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            sent.append((statement, tuple(parameters)))

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        async with engine.connect() as conn:
            await call(conn)
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)
    [query] = sent
    return query


async def test_list_page_after_a_position_searches_the_index_from_it(engine: AsyncEngine) -> None:
    after = (datetime(2025, 3, 1, 12, 30, tzinfo=UTC), "0b6f2a0e-5d0c-4c36-9d8e-2f1c8a7b9e10")
    statement, args = await query_sent(
        engine, lambda conn: store.list_page(conn, "alice", after, 21)
    )
    async with engine.connect() as conn:
        if db.is_postgres(engine):
            await conn.exec_driver_sql("SET enable_seqscan = off")
            rows = (await conn.exec_driver_sql("EXPLAIN " + statement, args)).all()
            plan = "\n".join(r[0] for r in rows)
            assert "ix_memories_owner_update" in plan, plan
            conditions = [line for line in plan.splitlines() if "Index Cond" in line]
            assert len(conditions) == 1 and "ROW(update_time" in conditions[0], plan
            assert "Filter" not in plan and "Sort" not in plan, plan
        else:
            rows = (await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, args)).all()
            assert [r[3] for r in rows] == [
                "SEARCH memories USING INDEX ix_memories_owner_update "
                "(owner_id=? AND (update_time,id)<(?,?))"
            ]


async def test_search_of_an_owner_without_memories_is_one_probe_of_the_owner_index(
    engine: AsyncEngine,
) -> None:
    """Every chat run recalls, and an owner may have nothing to recall: their search is one
    query, answered from the owner's index, not a full-text query."""
    statement, args = await query_sent(
        engine, lambda conn: store.search(conn, "alice", "green tea", 10)
    )
    async with engine.connect() as conn:
        if db.is_postgres(engine):
            await conn.exec_driver_sql("SET enable_seqscan = off")
            rows = (await conn.exec_driver_sql("EXPLAIN " + statement, args)).all()
            plan = "\n".join(r[0] for r in rows)
            assert "ix_memories_owner_update" in plan, plan
            assert "search_tsv" not in plan, plan
        else:
            rows = (await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, args)).all()
            plan = [r[3] for r in rows]
            assert "SEARCH memories USING INDEX ix_memories_owner_update (owner_id=?)" in plan
            assert not any("memories_fts" in p for p in plan), plan


@pytest.mark.skipif(not USES_POSTGRES, reason="SQLite's vector search is an exact scan in numpy")
async def test_the_nearest_memories_query_reads_the_query_vector_once(engine: AsyncEngine) -> None:
    """asyncpg prepares every statement, and PostgreSQL soon runs a prepared one by its
    generic plan: there a cast of the vector parameter in the ORDER BY was parsed again for
    every row read (384 numbers as text each time: 115-175 ms for an owner's 2,000
    memories). The vector is parsed once per search (an InitPlan), whatever the plan."""
    sql = queries.pg_nearest(3).text
    for i, name in enumerate([":vector", ":owner", ":model", ":dims", ":limit"], 1):
        sql = sql.replace(name, f"${i}")
    async with engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        await raw.execute("SET plan_cache_mode = force_generic_plan")
        await raw.execute(f"PREPARE nearest(text, text, text, int, int) AS {sql}")
        rows = await raw.fetch("EXPLAIN EXECUTE nearest('[1,0,0]', 'alice', 'm', 3, 5)")
        await raw.execute("DEALLOCATE nearest")
        await raw.execute("RESET plan_cache_mode")
    plan = "\n".join(r[0] for r in rows)
    keys = [line for line in plan.splitlines() if "Sort Key" in line or "Order By" in line]
    assert keys and "InitPlan" in plan, plan
    assert not any(re.search(r"\(\$\d+\)::public\.vector", line) for line in keys), plan
