"""What the two direct SQL layers share: statements marked `reused`, compiled once per
dialect into a plan, bound as SQLAlchemy would bind them, and their rows processed as
SQLAlchemy would. pgdirect.py runs the plans on asyncpg, sqlitedirect.py on sqlite3; both
import this module and neither imports the other.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import exc
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter

S = TypeVar("S")

# Statements compiled once, by id (kept alive here: module-level statements live anyway).
_REUSED: dict[int, Any] = {}


def reused(stmt: S) -> S:
    """Mark a statement built once (bound parameters only) to run directly on PostgreSQL.
    An IN list, even of literals, is rendered anew on every call (SQLAlchemy renders IN at
    execution time): hot statements use comparisons or `= ANY(array)` instead."""
    _REUSED[id(stmt)] = stmt
    return stmt


@dataclass(frozen=True)
class Plan:
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


class Plans:
    """One dialect's plans by (statement id, parameter names)."""

    def __init__(self) -> None:
        self._plans: dict[tuple[int, tuple[str, ...]], Plan] = {}

    def of(self, stmt: Any, dialect: Dialect, params: Any) -> tuple[Plan, bool, dict[str, Any]]:
        """The plan of a `reused` statement for these parameters (a dict, or a list of dicts
        for executemany): the plan, whether the call is one of many, its first parameters."""
        many = isinstance(params, list)
        first = (params[0] if params else {}) if many else (params or {})
        key = (id(stmt), tuple(first))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = _plan(stmt, dialect, key[1])
        return plan, many and len(params) > 1, first


def is_reused(stmt: Any) -> bool:
    return id(stmt) in _REUSED


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


def _plan(stmt: Any, dialect: Dialect, keys: Sequence[str]) -> Plan:
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
    return Plan(
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


def result(plan: Plan, records: Sequence[Any]) -> Result:
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


def bound(plan: Plan, params: dict[str, Any]) -> tuple[str, list[Any]]:
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


def bound_many(plan: Plan, params: list[dict[str, Any]]) -> tuple[str, list[list[Any]]]:
    sql = ""
    rows = []
    for p in params:
        sql, args = bound(plan, p)
        rows.append(args)
    return sql, rows
