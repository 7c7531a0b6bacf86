"""SQLite hot-path statements run on the sqlite3 connection, past SQLAlchemy's execution
layer: the embedded twin of services/history/pgdirect.py.

On the embedded backend history's engine runs SQLite on the event loop's thread
(shared.db's inline SQLite), and SQLAlchemy's execution layer around each statement
(execution context, greenlet hop, parameter and result processing through its generic
paths, the aiosqlite cursor) cost about half of what SQLite itself did for the statements
of a chat run. A statement marked `direct.reused` is compiled once by SQLAlchemy's own
SQLite dialect (the same SQL text and type processing it would use) and then executed on
the sqlite3 connection directly, inside the unit's transaction, which SQLAlchemy still
opens (BEGIN IMMEDIATE) and commits or rolls back. Any other statement goes through
SQLAlchemy, on the same connection and in the same transaction.

Only in write units, whose transaction is open before the first statement, and only on a
connection that runs on the loop's thread with a busy timeout of 0: a statement that finds
the file locked (SQLITE_BUSY: it did nothing) is run again through SQLAlchemy, whose
connection waits for the lock in aiosqlite's thread. Errors are SQLAlchemy's (DBAPIError
and its subclasses, IntegrityError for a constraint), as on the other path.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy import exc
from sqlalchemy.ext.asyncio import AsyncConnection

from services.history import direct
from shared import db


class Connection:
    """A write unit's connection: `reused` statements run on sqlite3, others through
    SQLAlchemy's connection `sa`, on the same database connection and transaction."""

    def __init__(self, sa: AsyncConnection, raw: sqlite3.Connection) -> None:
        self._sa = sa
        self.raw = raw
        self.dialect = sa.dialect

    async def execute(self, stmt: Any, params: Any = None) -> Any:
        if not direct.is_reused(stmt):
            return await self._sa.execute(stmt, params)
        plan, many, first = _PLANS.of(stmt, self.dialect, params)
        sql = plan.compiled.string
        try:
            if many:
                sql, rows = direct.bound_many(plan, params)
                self.raw.executemany(sql, rows).close()
                return direct.Result([])
            sql, args = direct.bound(plan, first)
            cursor = self.raw.execute(sql, args)
            try:
                records = cursor.fetchall() if plan.returns_rows else []
            finally:
                cursor.close()
        except sqlite3.OperationalError as err:
            if err.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                return await self._sa.execute(stmt, params)
            raise _sqlalchemy_error(sql, params, err) from err
        except sqlite3.Error as err:
            raise _sqlalchemy_error(sql, params, err) from err
        return direct.result(plan, records)


def _sqlalchemy_error(sql: str, params: Any, err: sqlite3.Error) -> exc.StatementError:
    """The error SQLAlchemy raises for this driver error (IntegrityError, OperationalError...)."""
    return exc.DBAPIError.instance(sql, params, err, sqlite3.Error)


# SQLite's plans, shared by every connection (pgdirect keeps PostgreSQL's).
_PLANS = direct.Plans()


async def connection(sa: AsyncConnection) -> Connection | AsyncConnection:
    """The connection of a write unit opened with `engine.begin()` on SQLite: direct when the
    driver connection runs on the loop's thread (shared.db's inline SQLite), else `sa`."""
    pooled = await sa.get_raw_connection()
    # Only the inline connection runs sqlite3 calls on this thread with busy timeout 0:
    # a direct call on another would block the event loop while it waits for a lock.
    raw = db.inline_sqlite3(pooled.driver_connection)
    return sa if raw is None else Connection(sa, raw)
