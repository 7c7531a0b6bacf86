"""PostgreSQL hot-path statements run on the asyncpg connection, past SQLAlchemy's execution
layer.

SQLAlchemy Core builds the services' statements for PostgreSQL and SQLite alike. On
PostgreSQL its execution layer (execution context, greenlet hop, result wrapping) costs
about four times what asyncpg itself does per statement (~300 against ~75 µs of CPU on the
development machine), and a chat run makes a dozen statements. A statement marked with
`reused` is compiled once by SQLAlchemy's own asyncpg dialect (the same SQL text, bind
casts and type processing it would send) and then executed by asyncpg directly. Any other
statement goes through SQLAlchemy, on the same connection and in the same transaction.

`unit` opens a unit of work: a pooled connection, in a transaction asyncpg manages (or in
autocommit, for reads). What it yields answers `execute(statement, params)` as an
AsyncConnection does: `.all()`, `.first()`, `.one()`, `.scalar_one()`, rows with attribute
and positional access, IntegrityError for a constraint violation.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from sqlalchemy import exc
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter

if TYPE_CHECKING:
    # Imported where used: the embedded (SQLite) services never load the driver, which
    # keeps their resident memory down.
    import asyncpg

    from services.history.sqlitedirect import Connection as SqliteConnection

S = TypeVar("S")

# Statements compiled once, by id (kept alive here: module-level statements live anyway).
_REUSED: dict[int, Any] = {}


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


def reused(stmt: S) -> S:
    """Mark a statement built once (bound parameters only) to run directly on PostgreSQL.
    An IN list, even of literals, is rendered anew on every call (SQLAlchemy renders IN at
    execution time): hot statements use comparisons or `= ANY(array)` instead."""
    _REUSED[id(stmt)] = stmt
    return stmt


@dataclass(frozen=True)
class _Plan:
    compiled: SQLCompiler
    # Bind processors by parameter name (SQLAlchemy's, for this dialect).
    processors: dict[str, Callable[[Any], Any]]
    # Parameters rendered late (IN lists): the SQL text depends on the values.
    expanding: bool
    row: Any  # a namedtuple class named after the result columns
    # (column index, result processor) of the columns that have one.
    results: tuple[tuple[int, Callable[[Any], Any]], ...]
    returns_rows: bool
    # Per positional parameter (not expanding): the bind's key and name, its processor, and
    # the bind (its own value when the parameters lack it), as construct_params reads them.
    positions: tuple[tuple[str, str, Callable[[Any], Any] | None, BindParameter[Any]], ...]


def _positions(
    compiled: SQLCompiler, processors: dict[str, Callable[[Any], Any]]
) -> tuple[tuple[str, str, Callable[[Any], Any] | None, BindParameter[Any]], ...]:
    # The bind of each (escaped) name; a later bind of a name wins, as in construct_params.
    by_name = {
        compiled.escaped_bind_names.get(name, name): (bind, name)
        for bind, name in compiled.bind_names.items()
    }
    return tuple(
        (by_name[p][0].key, by_name[p][1], processors.get(p), by_name[p][0])
        for p in compiled.positiontup or ()
    )


def _plan(stmt: Any, dialect: Dialect, keys: Sequence[str]) -> _Plan:
    compiled = stmt.compile(dialect=dialect, column_keys=list(keys))
    processors = {}
    for name, bind in compiled.binds.items():
        proc = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if proc is not None:
            processors[name] = proc
    columns = list(stmt.exported_columns)
    results = []
    for i, column in enumerate(columns):
        proc = column.type.dialect_impl(dialect).result_processor(dialect, None)
        if proc is not None:
            results.append((i, proc))
    expanding = bool(compiled.post_compile_params)
    return _Plan(
        compiled=compiled,
        processors=processors,
        expanding=expanding,
        row=namedtuple("Row", [c.key for c in columns], rename=True),
        results=tuple(results),
        returns_rows=bool(columns),
        positions=() if expanding else _positions(compiled, processors),
    )


class Result:
    """Fetched rows, with the accessors of SQLAlchemy's result that the services use."""

    __slots__ = ("_rows",)

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def all(self) -> list[Any]:
        return self._rows

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def one(self) -> Any:
        if len(self._rows) != 1:
            raise (exc.NoResultFound if not self._rows else exc.MultipleResultsFound)(
                f"expected one row, got {len(self._rows)}"
            )
        return self._rows[0]

    def scalar_one(self) -> Any:
        return self.one()[0]


def _result(plan: _Plan, records: Sequence[Any]) -> Result:
    """The driver's rows as rows of the statement's columns, processed as SQLAlchemy would."""
    make = plan.row._make
    if not plan.results:
        return Result([make(r) for r in records])
    out = []
    for record in records:
        values = list(record)
        for i, proc in plan.results:
            values[i] = proc(values[i])
        out.append(make(values))
    return Result(out)


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
        if id(stmt) not in _REUSED:
            return await self._through_sqlalchemy(stmt, params)
        many = isinstance(params, list)
        first = (params[0] if params else {}) if many else (params or {})
        key = (id(stmt), tuple(first))
        plan = _PLANS.get(key)
        if plan is None:
            plan = _PLANS[key] = _plan(stmt, self.dialect, key[1])
        try:
            if many and len(params) > 1:
                sql, rows = _bound_many(plan, params)
                await self.raw.executemany(sql, rows)
                return Result([])
            sql, args = _bound(plan, first)
            if not plan.returns_rows:
                await self.raw.execute(sql, *args)
                return Result([])
            records = await self.raw.fetch(sql, *args)
        except Exception as err:
            import asyncpg

            if isinstance(err, asyncpg.IntegrityConstraintViolationError):
                raise exc.IntegrityError(plan.compiled.string, params, err) from err
            raise
        return _result(plan, records)


# What the services' statement functions take: SQLAlchemy's connection, this, or its
# SQLite twin (services/history/sqlitedirect.py).
Conn: TypeAlias = "AsyncConnection | Connection | SqliteConnection"

# Plans by (statement id, parameter names), shared by every connection.
_PLANS: dict[tuple[int, tuple[str, ...]], _Plan] = {}


def _bound(plan: _Plan, params: dict[str, Any]) -> tuple[str, list[Any]]:
    """The SQL text and its positional arguments, processed as SQLAlchemy would."""
    compiled = plan.compiled
    if plan.expanding:
        state = compiled.construct_expanded_state(params)
        processors = {**plan.processors, **state.processors}
        return state.statement, [
            processors[name](value) if name in processors else value
            for name, value in zip(
                state.positiontup or (), state.positional_parameters or (), strict=True
            )
        ]
    # SQLCompiler.construct_params' rule, read from the plan: the value given by the bind's
    # key or name, else the bind's own; it builds a dict of every bind for each call.
    args = []
    for key, name, processor, bind in plan.positions:
        if key in params:
            value = params[key]
        elif name in params:
            value = params[name]
        elif bind.required:
            compiled.construct_params(params)  # raises what SQLAlchemy raises
            raise AssertionError("unreachable")
        else:
            value = bind.effective_value if bind.callable else bind.value
        args.append(value if processor is None else processor(value))
    return compiled.string, args


def _bound_many(plan: _Plan, params: list[dict[str, Any]]) -> tuple[str, list[list[Any]]]:
    sql = ""
    rows = []
    for p in params:
        sql, args = _bound(plan, p)
        rows.append(args)
    return sql, rows


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
