"""shared.db with inline_sqlite: statements run on the event loop's thread, and one that
finds the file locked by another connection waits for it without stopping the loop."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from shared import db
from tests.conftest import make_settings


def _engine(tmp_path: Path, inline: bool) -> AsyncEngine:
    # SQLite whatever the backend under test: this is the embedded engine's behaviour.
    settings = make_settings(tmp_path, "t_", database_url="")
    return db.create_engine(settings, "inline", inline_sqlite=inline)


async def _thread_of_statements(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        raw = await conn.get_raw_connection()
        # The driver connection is aiosqlite's; its sqlite3 connection is private.
        sqlite_conn = raw.driver_connection._conn  # type: ignore[union-attr]
        sqlite_conn.create_function("tid", 0, threading.get_ident)
        return int((await conn.execute(sa.text("SELECT tid()"))).scalar_one())


async def test_inline_statements_run_on_the_loops_thread(tmp_path: Path) -> None:
    inline, threaded = _engine(tmp_path / "a", True), _engine(tmp_path / "b", False)
    try:
        assert await _thread_of_statements(inline) == threading.get_ident()
        assert await _thread_of_statements(threaded) != threading.get_ident()
    finally:
        await inline.dispose()
        await threaded.dispose()


async def test_a_statement_that_finds_the_file_locked_waits_without_stopping_the_loop(
    tmp_path: Path,
) -> None:
    engine = _engine(tmp_path, True)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
        path = tmp_path / "data" / "inline.db"
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the file

        async def insert() -> None:
            async with engine.begin() as conn:
                await conn.execute(sa.text("INSERT INTO t VALUES (1)"))

        writing = asyncio.create_task(insert())
        ticks, began = 0, time.monotonic()
        while time.monotonic() - began < 0.5:
            await asyncio.sleep(0.01)
            ticks += 1
        assert not writing.done()  # it waits for the lock...
        assert ticks >= 10  # ...and the loop goes on meanwhile
        other.rollback()
        await asyncio.wait_for(writing, 10)
        other.close()
        async with engine.connect() as conn:
            assert (await conn.execute(sa.text("SELECT count(*) FROM t"))).scalar_one() == 1
    finally:
        await engine.dispose()
