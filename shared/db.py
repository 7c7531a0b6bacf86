"""SQLAlchemy 2 async engines and Alembic migrations, one schema per service.

Embedded default: a SQLite file per service under the data folder (aiosqlite, WAL).
Distributed: AGENTMESH_DATABASE_URL names a PostgreSQL database (asyncpg); each service
keeps its tables in its own schema (search_path), so no service reads another's tables.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import aiosqlite
from alembic import command
from alembic.config import Config
from sqlalchemy import DateTime, Dialect, TypeDecorator, event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from shared.settings import Settings

_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_T = TypeVar("_T")


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp column: aware datetimes in, stored in UTC, aware UTC datetimes out on
    every backend. A naive datetime is refused (its zone would be a guess)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database")
        value = value.astimezone(UTC)
        # SQLite keeps text; one fixed offset-free form keeps its comparisons correct.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or value.tzinfo is UTC:
            return value
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class _HasDialect(Protocol):
    @property
    def dialect(self) -> Dialect: ...


def is_postgres(bind: _HasDialect) -> bool:
    """Whether an engine or a connection is PostgreSQL's (else the embedded SQLite)."""
    return bind.dialect.name == "postgresql"


# grpc.health.v1 name of a service's database as a dependency (shared.server re-exports it
# with the other health names).
DATABASE = "database"

# How long a statement waits for another connection's lock on a SQLite file.
_BUSY_TIMEOUT_MS = 30_000


class _InlineSqlite(aiosqlite.Connection):
    """An aiosqlite connection that runs each call on the event loop's thread, not through
    aiosqlite's worker thread: a local SQLite statement of the hot path takes microseconds,
    and every hop to that thread and back (several per statement: cursor, execute, fetch,
    close) cost more than the statement (a quarter of target all's samples under load were
    these hops: docs/performance.md). Its busy timeout is 0, so a call never
    sleeps on the loop: one that finds the file locked by another connection (a test's, a
    replica's) is run again in the thread, which waits for the lock as any connection does.
    Opening still goes through the thread (aiosqlite starts it, and stops it on close)."""

    # Calls of this connection running in aiosqlite's thread now (a statement waiting for a
    # lock): while one does, every other call queues behind it in that thread. A sqlite3
    # connection used from two threads at once crashes the process (seen: a close on the
    # loop's thread, from a cancelled task's cleanup, while a statement waited in the thread).
    _in_thread = 0

    async def _execute(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        if not self._running or self._connection is None:
            raise ValueError("Connection closed")  # what aiosqlite raises
        run_in_thread: Callable[..., Awaitable[Any]] = super()._execute  # untyped in aiosqlite
        if not self._in_thread:
            try:
                return fn(*args, **kwargs)
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:  # and its extended codes
                    raise
        # A statement that failed with SQLITE_BUSY did nothing: running it again is safe.
        # Counted until the thread is done with it, even if this caller is cancelled first.
        work = asyncio.ensure_future(run_in_thread(self._waiting, fn, *args, **kwargs))
        self._in_thread += 1
        work.add_done_callback(self._thread_done)
        return cast(_T, await asyncio.shield(work))

    def _thread_done(self, work: asyncio.Future[Any]) -> None:
        self._in_thread -= 1
        if not work.cancelled():
            work.exception()  # retrieved: a caller cancelled meanwhile no longer wants it

    def _waiting(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        self._conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
        try:
            return fn(*args, **kwargs)
        finally:
            self._conn.execute("PRAGMA busy_timeout=0")


def inline_sqlite3(driver: object) -> sqlite3.Connection | None:
    """The sqlite3 connection behind a pooled driver connection when it is an open inline
    one (_InlineSqlite: its calls run on the loop's thread, busy timeout 0), else None: only
    then may a caller run sqlite3 calls on it directly without blocking the loop on a lock."""
    if isinstance(driver, _InlineSqlite):
        return driver._connection
    return None


class _InlineConnection(AsyncConnection):
    """An engine's connection that, leaving its `async with`, closes (rolls back what is
    left and returns its SQLite connection to the pool) in the caller's task.

    SQLAlchemy's own runs the close in a task of its own (so a cancellation cannot abandon
    it halfway), and a new task waits behind every callback already ready on the loop: on
    a loop that is never idle (target all at c=32) that kept the one pooled connection of
    history checked out, committed but unused, for a whole loop turn after every unit
    of work, while the units waiting for it queued (asyncio.Queue: one that a newcomer
    overtakes goes to the back again, so some runs waited seconds; docs/performance.md).
    On an _InlineSqlite connection the close does not wait for anything, so there is no
    point where a cancellation could land: it runs to its end in the caller's step. If it
    does wait (a statement sent to aiosqlite's thread), the rest of it runs in a shielded
    task of its own, as SQLAlchemy's does."""

    async def __aexit__(self, type_: Any, value: Any, traceback: Any) -> None:
        closing = self.close()
        try:
            awaited = closing.send(None)
        except StopIteration:
            return  # closed without waiting: the usual case
        rest = asyncio.ensure_future(_resume(closing, awaited))
        cancelled: asyncio.CancelledError | None = None
        while True:
            try:
                await asyncio.shield(rest)
            except asyncio.CancelledError as err:
                if rest.done():
                    raise
                cancelled = err
            else:
                break
        if cancelled is not None:
            raise cancelled


@types.coroutine
def _resume(coro: Coroutine[Any, Any, None], awaited: Any) -> Generator[Any, Any, None]:
    """The rest of `coro`, which has run up to the point where it awaits `awaited` (the
    future it yielded): hands each future it awaits to the task running this, as a task
    would."""
    while True:
        try:
            yield awaited
        except BaseException as exc:  # thrown into the task: the coroutine gets it
            try:
                awaited = coro.throw(exc)
            except StopIteration:
                return
        else:
            try:
                awaited = coro.send(None)
            except StopIteration:
                return


class _InlineEngine(AsyncEngine):
    """An engine whose connections are _InlineConnection's."""

    _connection_cls = _InlineConnection


def create_engine(
    settings: Settings,
    service: str,
    *,
    pool_size: int | None = None,
    inline_sqlite: bool = False,
) -> AsyncEngine:
    """The service's engine. `inline_sqlite`: on SQLite, run its statements on the event
    loop's thread (_InlineSqlite). For a service whose process is its file's only writer in
    normal operation (SQLite's one connection per process, below, and no replica sharing
    the data folder): then no statement waits for a lock; one that does waits in the
    thread, so a second writer (a test's connection, a replica) is slower, never stuck."""
    if not settings.database_url:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        path = (settings.data_dir / f"{service}.db").resolve()
        options: dict[str, Any] = {}
        if inline_sqlite:

            async def connect() -> aiosqlite.Connection:
                def connector() -> sqlite3.Connection:
                    # Busy timeout 0 from the start: the connect-time pragmas run on the loop too.
                    return sqlite3.connect(path, timeout=0, check_same_thread=False)

                conn = _InlineSqlite(connector, iter_chunk_size=64)
                conn._thread.daemon = True  # as SQLAlchemy's aiosqlite dialect does
                return await conn

            options["async_creator"] = connect
        # One connection per process: SQLite has one writer at a time anyway, and waiting
        # for the pool is an asyncio wait, where waiting on the file lock is SQLite's
        # busy handler sleeping in growing steps (hundreds of ms under concurrency).
        engine = create_async_engine(
            f"sqlite+aiosqlite:///{path}",
            connect_args={"timeout": 30},
            pool_size=1,
            max_overflow=0,
            pool_timeout=60,
            **options,
        )
        _sqlite_pragmas(engine, busy_timeout_ms=0 if inline_sqlite else _BUSY_TIMEOUT_MS)
        return _InlineEngine(engine.sync_engine) if inline_sqlite else engine
    url = make_url(settings.database_url)
    if url.drivername in ("postgresql", "postgres", "postgresql+psycopg2"):
        url = url.set(drivername="postgresql+asyncpg")
    if url.drivername != "postgresql+asyncpg":
        raise ValueError(f"AGENTMESH_DATABASE_URL: unsupported database {url.drivername!r}")
    schema = settings.schema_for(service)
    if not _SCHEMA_RE.match(schema):
        raise ValueError(f"AGENTMESH_DB_SCHEMA_PREFIX: {schema!r} is not a valid schema name")
    return create_async_engine(
        url,
        # No overflow: an overflow connection is closed as soon as it is returned, so a
        # load just above the pool would open (and re-prepare every statement on) a new
        # connection per transaction.
        pool_size=pool_size or settings.database_pool_size,
        max_overflow=0,
        # No pre-ping: it costs a round trip on every checkout of a hot path. A connection
        # that died with its server raises a disconnect error, which invalidates the pool,
        # and the caller's next attempt gets a fresh one.
        pool_pre_ping=False,
        pool_recycle=1800,
        connect_args={"server_settings": {"search_path": schema}},
    )


class HealthCheck:
    """`SELECT 1` on a PostgreSQL connection of its own (the service's pool may be busy
    with real work, which must not read as an outage). A failed check drops the
    connection, so the next one connects afresh and sees the database come back."""

    def __init__(self, settings: Settings, service: str) -> None:
        self.engine = create_engine(settings, service, pool_size=1)

    async def __call__(self) -> None:
        try:
            async with self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except BaseException:
            await self.engine.dispose()
            raise

    async def aclose(self) -> None:
        await self.engine.dispose()


def health_checks(settings: Settings, service: str) -> dict[str, HealthCheck]:
    """The service's database as a dependency (shared.server.ServiceParts.dependencies,
    which closes the check when the server stops); none for SQLite, a file of the service's
    own host that cannot be lost apart from it."""
    return {DATABASE: HealthCheck(settings, service)} if settings.database_url else {}


def _sqlite_pragmas(engine: AsyncEngine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        # Deleted and replaced content is overwritten with zeros, not left in free space of
        # the file (an owner deletion must leave nothing on disk; shared/owner_data.py).
        cur.execute("PRAGMA secure_delete=ON")
        cur.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        cur.close()
        # Let SQLAlchemy's "begin" event issue BEGIN (the driver would issue a deferred one).
        dbapi_conn.isolation_level = None

    # SQLite's default deferred transactions fail with "database is locked" when two
    # writers upgrade at once; BEGIN IMMEDIATE takes the write lock up front instead.
    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


async def migrate(
    engine: AsyncEngine, migrations_dir: Path, schema: str, revision: str = "head"
) -> None:
    """Apply the service's Alembic migrations up to `revision` (safe with many replicas at
    once)."""
    async with engine.begin() as conn:
        if is_postgres(engine):
            # One replica migrates at a time; the others wait, then find nothing to do.
            await conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:s))"), {"s": schema})
            await conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
        await conn.run_sync(_upgrade, str(migrations_dir), revision)


def _upgrade(conn: Connection, migrations_dir: str, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", migrations_dir)
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, revision)
