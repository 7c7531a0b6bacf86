"""shared.db with inline_sqlite: statements run on the event loop's thread, and one that
finds the file locked by another connection waits for it without stopping the loop."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

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


async def test_calls_made_while_a_statement_waits_in_the_thread_queue_behind_it(
    tmp_path: Path,
) -> None:
    """A sqlite3 connection used from two threads at once crashes the process: a whole-suite
    run segfaulted when a cancelled task's cleanup closed a connection on the loop's thread
    while its statement waited for the lock in aiosqlite's thread."""
    engine = _engine(tmp_path, True)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
        other = sqlite3.connect(tmp_path / "data" / "inline.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the file
        async with engine.connect() as conn:
            raw = (await conn.get_raw_connection()).driver_connection
            sqlite_conn = raw._conn  # type: ignore[union-attr]
            ran: list[str] = []  # statements in the order sqlite evaluated them

            def step(name: str) -> int:
                ran.append(name)
                return threading.get_ident()

            sqlite_conn.create_function("step", 1, step)

            async def call(sql: str) -> int:
                result = await raw.execute(sql)  # type: ignore[union-attr]
                row = await result.fetchone()
                return int(row[0]) if row else 0

            waiting = asyncio.create_task(call("INSERT INTO t SELECT step('insert')"))
            await asyncio.sleep(0.2)  # the insert found the file locked: it waits in the thread
            meanwhile = asyncio.create_task(call("SELECT step('select')"))
            await asyncio.sleep(0.2)
            assert not meanwhile.done()  # not run on the loop's thread beside the waiting one
            other.rollback()
            await asyncio.wait_for(asyncio.gather(waiting, meanwhile), 10)
            # The select ran after the insert, in the thread (which of the two callers is
            # resumed first afterwards is the loop's business, not the connection's).
            assert ran[-2:] == ["insert", "select"]
            assert meanwhile.result() != threading.get_ident()
            inserted = await (await raw.execute("SELECT x FROM t")).fetchone()  # type: ignore[union-attr]
            assert inserted[0] != threading.get_ident()
            await conn.rollback()
        other.close()
    finally:
        await engine.dispose()


async def _turns_taken(work: Callable[[], Awaitable[None]]) -> int:
    """How many times the loop let another task run while `work` ran."""
    turns = 0

    async def tick() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)  # the ticker is waiting for its next turn
    before = turns
    await work()
    taken = turns - before
    ticker.cancel()
    return taken


async def test_a_unit_of_work_gives_its_connection_back_without_giving_up_the_loop(
    tmp_path: Path,
) -> None:
    # A unit that waited a loop turn to give its connection back kept it from the units
    # queued for it for that turn: under load they queued for seconds (docs/performance.md).
    engine = _engine(tmp_path, True)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))

        async def write() -> None:
            async with engine.begin() as conn:
                await conn.execute(sa.text("INSERT INTO t VALUES (1)"))

        async def read() -> None:
            async with engine.connect() as conn:
                await conn.execute(sa.text("SELECT count(*) FROM t"))

        assert await _turns_taken(write) == 0
        assert await _turns_taken(read) == 0
        # A QueuePool at run time; the stubs type engine.pool as the Pool base, without it.
        assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        await engine.dispose()


async def test_a_close_that_waits_ends_even_when_its_caller_is_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(tmp_path, True)
    closing = asyncio.Event()
    real_close = AsyncConnection.close

    async def slow_close(self: AsyncConnection) -> None:
        closing.set()
        await asyncio.sleep(0.05)  # as a close sent to aiosqlite's thread would wait
        await real_close(self)

    monkeypatch.setattr(AsyncConnection, "close", slow_close)
    try:

        async def read() -> None:
            async with engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))

        reading = asyncio.create_task(read())
        await closing.wait()
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        # The cancellation waited for the close: the connection is back in the pool.
        # A QueuePool at run time; the stubs type engine.pool as the Pool base, without it.
        assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        await engine.dispose()
