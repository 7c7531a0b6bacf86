"""History's units of work: each RPC runs in one, a read (no transaction on PostgreSQL) or a
write (one transaction), on the connection of the backend's direct SQL layer
(services/history/pgdirect.py, services/history/sqlitedirect.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TypeAlias, TypeVar

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.history import pgdirect, sqlitedirect
from shared.db import is_postgres
from shared.errors import Aborted

# What the store's functions take: SQLAlchemy's connection, or a direct layer's.
Conn: TypeAlias = AsyncConnection | pgdirect.Connection | sqlitedirect.Connection

T = TypeVar("T")


class Units:
    """Opens history's units of work on one engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._postgres = is_postgres(engine)

    @asynccontextmanager
    async def _unit(self, *, write: bool) -> AsyncIterator[Conn]:
        # Reads need no transaction on PostgreSQL (READ COMMITTED: each statement sees
        # committed data anyway); autocommit saves the BEGIN/ROLLBACK round trips. SQLite
        # keeps shared.db's transaction handling; its write units run their hot statements
        # on sqlite3 directly (services/history/sqlitedirect.py).
        if self._postgres:
            async with pgdirect.unit(self._engine, transaction=write) as conn:
                yield conn
        elif write:
            async with self._engine.begin() as sqlite:
                yield await sqlitedirect.connection(sqlite)
        else:
            async with self._engine.connect() as sqlite:
                yield sqlite

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Conn]:
        """A write unit: committed when the block ends, rolled back when it raises."""
        try:
            async with self._unit(write=True) as conn:
                yield conn
        except IntegrityError:
            # Two requests created the same id at once; the retry finds the stored one.
            raise Aborted("a concurrent request stored the same ids; retry") from None

    def read(self) -> AbstractAsyncContextManager[Conn]:
        return self._unit(write=False)

    async def write_trusting_ids(self, work: Callable[[Conn, bool], Awaitable[T]]) -> T:
        """`work(conn, check_ids)` in a write unit: first trusting that the ids of the
        messages it stores are new, which saves looking them up (a round trip); if one was
        not, the unique violation rolls everything back and it runs again, checking them.
        Run ids and message ids are new in nearly every run; a repeated one is a retry."""
        try:
            async with self._unit(write=True) as conn:
                return await work(conn, False)
        except IntegrityError:
            pass
        async with self.write() as conn:
            return await work(conn, True)
