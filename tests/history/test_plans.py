"""BeginRun's lookup of runs searches indexes by owner and run, and by owner and thread: it
never reads every run of the owner, whose number grows with every run they ever had. Checked
in the plan of the database under test (SQLite: EXPLAIN QUERY PLAN; PostgreSQL: EXPLAIN with
sequential scans discouraged, since on a small table they would be cheaper)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.history import store
from services.history.service import MIGRATIONS
from shared import db
from shared.settings import Settings
from tests.conftest import migrated_engine


@pytest.fixture
async def engine(settings: Settings) -> AsyncIterator[AsyncEngine]:
    async with migrated_engine(settings, "history", MIGRATIONS) as engine:
        yield engine


async def test_begin_run_looks_up_runs_by_index(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        compiled = store._BEGIN_LOOKUP.compile(dialect=conn.dialect)
        values = compiled.construct_params({"o": "alice", "r": "r1", "t": "t1"})
        args = tuple(values[name] for name in compiled.positiontup or ())
        if db.is_postgres(engine):
            await conn.exec_driver_sql("SET enable_seqscan = off")
            rows = (await conn.exec_driver_sql("EXPLAIN " + compiled.string, args)).all()
            plan = "\n".join(r[0] for r in rows)
            assert "Seq Scan" not in plan, plan
            assert plan.count("Index") >= 2, plan
        else:
            rows = (
                await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + compiled.string, args)
            ).all()
            searches = [r[3] for r in rows if "runs" in r[3]]
            assert len(searches) == 2, searches
            keys = ("(owner_id=? AND id=?)", "(owner_id=? AND thread_id=?)")
            assert all(any(k in search for k in keys) for search in searches), searches
