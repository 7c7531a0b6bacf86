"""PostgreSQL hot-path statements run on the asyncpg connection, past SQLAlchemy's execution
layer.

SQLAlchemy Core builds the services' statements for PostgreSQL and SQLite alike. On
PostgreSQL its execution layer (execution context, greenlet hop, result wrapping) costs
about four times what asyncpg itself does per statement (~300 against ~75 µs of CPU on the
development machine), and a chat run makes a dozen statements. A statement marked with
`direct.reused` is compiled once by SQLAlchemy's own asyncpg dialect (the same SQL text, bind
casts and type processing it would send) and then executed by asyncpg directly. Any other
statement goes through SQLAlchemy, on the same connection and in the same transaction.

`unit` opens a unit of work: a pooled connection, in a transaction asyncpg manages (or in
autocommit, for reads). What it yields answers `execute(statement, params)` as an
AsyncConnection does: `.all()`, `.first()`, `.one()`, `.scalar_one()`, rows with attribute
and positional access, IntegrityError for a constraint violation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.history import direct

if TYPE_CHECKING:
    # Imported where used: the embedded (SQLite) services never load the driver, which
    # keeps their resident memory down.
    import asyncpg


def _broke(err: Exception, raw: asyncpg.Connection) -> bool:
    """Whether the connection is broken, as opposed to an error PostgreSQL reported on a
    working one (a terminated backend can first show as a client error of the protocol's
    state)."""
    import asyncpg

    return raw.is_closed() or isinstance(
        err,
        (
            OSError,
            asyncpg.InterfaceError,
            asyncpg.exceptions.InternalClientError,
            asyncpg.PostgresConnectionError,
            asyncpg.exceptions.OperatorInterventionError,
        ),
    )


# PostgreSQL's plans, shared by every connection (sqlitedirect keeps SQLite's).
_PLANS = direct.Plans()


class Connection:
    """A unit of work's connection: `reused` statements run on asyncpg, others through
    SQLAlchemy's connection `sa`, on the same database connection."""

    def __init__(self, sa: AsyncConnection, raw: asyncpg.Connection) -> None:
        self._sa = sa
        self._autocommit: AsyncConnection | None = None
        self.raw = raw
        self.dialect = sa.dialect

    async def _through_sqlalchemy(self, stmt: Any, params: Any) -> Any:
        # In autocommit, so that SQLAlchemy issues no BEGIN of its own: asyncpg's
        # transaction (unit) holds both paths. Set on first use: most units never need it.
        if self._autocommit is None:
            self._autocommit = await self._sa.execution_options(isolation_level="AUTOCOMMIT")
        return await self._autocommit.execute(stmt, params)

    async def execute(self, stmt: Any, params: Any = None) -> Any:
        if not direct.is_reused(stmt):
            return await self._through_sqlalchemy(stmt, params)
        plan, many, first = _PLANS.of(stmt, self.dialect, params)
        try:
            if many:
                sql, rows = direct.bound_many(plan, params)
                await self.raw.executemany(sql, rows)
                return direct.Result([])
            sql, args = direct.bound(plan, first)
            if not plan.returns_rows:
                await self.raw.execute(sql, *args)
                return direct.Result([])
            records = await self.raw.fetch(sql, *args)
        except Exception as err:
            import asyncpg

            if isinstance(err, asyncpg.IntegrityConstraintViolationError):
                raise exc.IntegrityError(plan.compiled.string, params, err) from err
            raise
        return direct.result(plan, records)


@asynccontextmanager
async def unit(engine: AsyncEngine, *, transaction: bool) -> AsyncIterator[Connection]:
    """A pooled connection for one unit of work: in a transaction (committed when the block
    ends, rolled back when it raises) or, for reads, in autocommit (READ COMMITTED: every
    statement sees what is committed). A connection that broke is dropped from the pool, and
    so is one whose unit was cancelled: a cancel can land while BEGIN is on its way, which
    leaves the connection inside a transaction that asyncpg no longer tracks, and the next
    unit's "transaction" would then be a savepoint of it, never committed."""
    async with engine.connect() as sa:
        pooled = await sa.get_raw_connection()
        raw = pooled.driver_connection
        assert raw is not None
        try:
            if transaction:
                async with raw.transaction():
                    yield Connection(sa, raw)
            else:
                yield Connection(sa, raw)
        except BaseException as err:
            broke = isinstance(err, Exception) and _broke(err, raw)
            if broke:
                # What SQLAlchemy does on a disconnect it sees itself: every pooled
                # connection opened before this one is dropped at its next checkout (a
                # server that went away took them all), so the first units after the
                # database is back do not fail one by one on the dead ones.
                engine.sync_engine.pool._invalidate(pooled, err, _checkin=False)
            if broke or not isinstance(err, Exception):
                await sa.invalidate()
            if broke and raw.is_closed():
                # Said the way SQLAlchemy says a disconnect it saw (shared.errors then
                # answers UNAVAILABLE): what asyncpg raises on a connection whose server
                # end just went away varies with where the loss met the protocol (one of
                # them is "cannot switch to state 11; another operation (2) is in
                # progress"), but the connection is closed by then, each time.
                raise exc.DBAPIError(None, None, err, connection_invalidated=True) from err
            raise
