"""BeginRun's reads of runs (the lookup, and the INSERT that admits a run on an idle thread)
search indexes by owner and run, and by owner and thread: they never read every run of the
owner, whose number grows with every run they ever had. Checked in the plan of the database
under test (SQLite: EXPLAIN QUERY PLAN; PostgreSQL: EXPLAIN with sequential scans
discouraged, since on a small table they would be cheaper)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.history import queries
from services.history.service import MIGRATIONS
from shared import db
from shared.settings import Settings
from tests.conftest import migrated_engine


@pytest.fixture
async def engine(settings: Settings) -> AsyncIterator[AsyncEngine]:
    async with migrated_engine(settings, "history", MIGRATIONS) as engine:
        yield engine


# (statement, its reads of runs): the lookup's two; the INSERT's two NOT EXISTS and its
# next thread_seq.
STATEMENTS = {
    "lookup": (queries.BEGIN_LOOKUP, 2),
    "insert if idle": (queries.INSERT_RUN_IF_IDLE, 3),
}


@pytest.mark.parametrize("name", STATEMENTS)
async def test_begin_run_reads_runs_by_index(engine: AsyncEngine, name: str) -> None:
    statement, reads = STATEMENTS[name]
    async with engine.connect() as conn:
        compiled = statement.compile(dialect=conn.dialect)
        # Every parameter the caller gives (the run's columns: any value will do), not the
        # statement's own literals.
        values = {key: None for key, bind in compiled.binds.items() if bind.value is None}
        values.update(o="alice", r="r1", t="t1", id_o="alice", id_r="r1")
        values.update(active_o="alice", active_t="t1", seq_o="alice", seq_t="t1")
        values = compiled.construct_params(values)
        args = tuple(values[key] for key in compiled.positiontup or ())
        if db.is_postgres(engine):
            await conn.exec_driver_sql("SET enable_seqscan = off")
            rows = (await conn.exec_driver_sql("EXPLAIN " + compiled.string, args)).all()
            plan = "\n".join(r[0] for r in rows)
            assert "Seq Scan" not in plan, plan
            assert plan.count("Index") >= reads, plan
        else:
            rows = (await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + compiled.string, args)).all()
            searches = [r[3] for r in rows if "runs" in r[3]]
            assert len(searches) == reads, searches
            keys = ("(owner_id=? AND id=?)", "(owner_id=? AND thread_id=?)")
            assert all(any(k in search for k in keys) for search in searches), searches
