"""The history tables (SQLAlchemy 2 Core, async). Every statement is scoped by owner_id.

The caller owns the transaction: each function takes the connection of the unit of work.
Positions are dense per thread: a writer first locks the thread row (an UPDATE, which
works the same on PostgreSQL and SQLite, returning the thread's message count), then stores
its messages at the positions after that count and sets the count to the last. Concurrent
appends to one thread therefore commit in position order, and keyset paging by position sees
each message once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Row

from services.history.core import (
    BeginPlan,
    FinishPlan,
    Lease,
    Message,
    Run,
    RunEnd,
    RunState,
    Thread,
    ToolDenial,
    UsageDay,
)
from services.history.deletions import Deletion, DeletionKind, DeletionState, Step
from services.history.pgdirect import Conn, reused
from services.history.visibility import CONTEXT_ASSEMBLY, UI_HISTORY
from shared import outbox
from shared.db import UtcDateTime
from shared.domain import ExecutorKind, MessageKind, RuntimeMode
from shared.profiles import ExecutionProfile

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
metadata_obj = sa.MetaData()

threads = sa.Table(
    "threads",
    metadata_obj,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("runtime_mode", sa.String),
    sa.Column("create_time", UtcDateTime),
    sa.Column("update_time", UtcDateTime),
    sa.Column("message_count", sa.BigInteger),
)

messages = sa.Table(
    "messages",
    metadata_obj,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("thread_id", sa.String),
    sa.Column("position", sa.BigInteger),
    sa.Column("run_id", sa.String),
    sa.Column("role", sa.String),
    sa.Column("kind", sa.String),
    sa.Column("visibility_mask", sa.Integer),
    sa.Column("name", sa.String),
    sa.Column("content", _JSON),
    sa.Column("metadata", _JSON),
    sa.Column("origin", sa.String),
    sa.Column("executor", sa.String),
    sa.Column("execution_profile_name", sa.String),
    sa.Column("input_tokens", sa.BigInteger),
    sa.Column("output_tokens", sa.BigInteger),
    sa.Column("finished_reason", sa.String),
    sa.Column("created_at", UtcDateTime),
    sa.Column("owner_seq", sa.BigInteger),
    sa.Column("message_pb", sa.LargeBinary),
)
# Per owner, the last commit sequence number given to one of their messages.
owner_sequences = sa.Table(
    "owner_sequences",
    metadata_obj,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("last_seq", sa.BigInteger, nullable=False),
)
# Everything but the serving copy: what the domain Message is built from.
MESSAGE_FIELDS = [c for c in messages.c if c.name != "message_pb"]

runs = sa.Table(
    "runs",
    metadata_obj,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("thread_id", sa.String),
    sa.Column("state", sa.String),
    sa.Column("origin", sa.String),
    sa.Column("profile", _JSON),
    sa.Column("profile_name", sa.String),
    sa.Column("create_time", UtcDateTime),
    sa.Column("start_time", UtcDateTime),
    sa.Column("finish_time", UtcDateTime),
    sa.Column("error_code", sa.String),
    sa.Column("error_message", sa.String),
    sa.Column("thread_seq", sa.BigInteger),
    sa.Column("cancel_requested", sa.Boolean),
    sa.Column("rolled_back", sa.Boolean),
    sa.Column("lease_holder", sa.String),
    sa.Column("lease_expire_time", UtcDateTime),
    sa.Column("input_tokens", sa.BigInteger),
    sa.Column("output_tokens", sa.BigInteger),
    sa.Column("usage_estimated", sa.Boolean),
)

tool_denials = sa.Table(
    "tool_denials",
    metadata_obj,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("run_id", sa.String, primary_key=True),
    sa.Column("tool_call_id", sa.String, primary_key=True),
    sa.Column("thread_id", sa.String),
    sa.Column("tool_name", sa.String),
    sa.Column("arguments_sha256", sa.String),
    sa.Column("reason", sa.String),
    sa.Column("origin", sa.String),
    sa.Column("executor", sa.String),
    sa.Column("execution_profile_name", sa.String),
    sa.Column("created_at", UtcDateTime),
)


def _mask_has(bit: int) -> sa.ColumnElement[bool]:
    # Literal constants, exactly as the partial indexes' predicates: a bound parameter
    # would keep PostgreSQL's planner from proving the index applies. (A boolean SQL text,
    # which SQLAlchemy's stubs do not type as the column element every caller combines.)
    return sa.text(f"(messages.visibility_mask & {int(bit)}) <> 0")  # type: ignore[return-value]


IN_HISTORY = _mask_has(UI_HISTORY)
IN_CONTEXT = _mask_has(CONTEXT_ASSEMBLY)


# --- row mapping ------------------------------------------------------------------------


def _thread(row: Row[Any] | SimpleNamespace) -> Thread:
    return Thread(
        owner_id=row.owner_id,
        id=row.id,
        runtime_mode=RuntimeMode(row.runtime_mode),
        create_time=row.create_time,
        update_time=row.update_time,
        message_count=row.message_count,
        # Only the listing statements select it (_SHOWN_COUNT).
        shown_count=getattr(row, "shown_count", 0),
    )


_KINDS = {k.value: k for k in MessageKind}
_MODES = {m.value: m for m in RuntimeMode}
_EXECUTORS: dict[str, ExecutorKind | None] = {e.value: e for e in ExecutorKind}
_EXECUTORS[""] = None


def _message(row: Sequence[Any]) -> Message:
    # Positional unpacking and dict lookups: this runs for every row of every page.
    (
        owner_id,
        id_,
        thread_id,
        position,
        run_id,
        role,
        kind,
        mask,
        name,
        content,
        meta,
        origin,
        executor,
        profile_name,
        input_tokens,
        output_tokens,
        finished_reason,
        created_at,
        owner_seq,
    ) = row
    return Message(
        owner_id=owner_id,
        id=id_,
        thread_id=thread_id,
        position=position,
        run_id=run_id,
        role=role,
        kind=_KINDS[kind],
        visibility_mask=mask,
        name=name,
        content=tuple(content),
        hidden_from_user=bool(meta.get("hidden_from_user", False)),
        origin=_MODES[origin],
        executor=_EXECUTORS[executor],
        execution_profile_name=profile_name,
        extra=meta.get("extra") or {},
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        finished_reason=finished_reason,
        created_at=created_at,
        sequence=owner_seq or 0,
    )


def message_row(m: Message, wire: bytes) -> dict[str, Any]:
    return {
        "message_pb": wire,
        "owner_id": m.owner_id,
        "id": m.id,
        "thread_id": m.thread_id,
        "position": m.position,
        "run_id": m.run_id,
        "role": m.role,
        "kind": m.kind.value,
        "visibility_mask": m.visibility_mask,
        "name": m.name,
        "content": list(m.content),
        "metadata": {
            "hidden_from_user": m.hidden_from_user,
            "origin": m.origin.value,
            "executor": m.executor.value if m.executor else "",
            "execution_profile_name": m.execution_profile_name,
            "extra": dict(m.extra),
        },
        "origin": m.origin.value,
        "executor": m.executor.value if m.executor else "",
        "execution_profile_name": m.execution_profile_name,
        "input_tokens": m.input_tokens,
        "output_tokens": m.output_tokens,
        "finished_reason": m.finished_reason,
        "created_at": m.created_at,
        "owner_seq": m.sequence or None,
    }


def _run(row: Row[Any] | SimpleNamespace) -> Run:
    return Run(
        owner_id=row.owner_id,
        id=row.id,
        thread_id=row.thread_id,
        state=RunState(row.state),
        origin=RuntimeMode(row.origin),
        profile=ExecutionProfile.model_validate(row.profile),
        create_time=row.create_time,
        start_time=row.start_time,
        finish_time=row.finish_time,
        error_code=row.error_code,
        error_message=row.error_message,
        thread_seq=row.thread_seq,
        cancel_requested=bool(row.cancel_requested),
        rolled_back=bool(row.rolled_back),
        lease_holder=row.lease_holder,
        lease_expire_time=row.lease_expire_time,
        input_tokens=row.input_tokens or 0,
        output_tokens=row.output_tokens or 0,
        usage_estimated=bool(row.usage_estimated),
    )


def _insert(conn: Conn, table: sa.Table) -> Any:
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(table)


# --- threads ----------------------------------------------------------------------------


async def get_thread(
    conn: Conn, owner_id: str, thread_id: str, *, counted: bool = False
) -> Thread | None:
    """The thread; `counted`: with its shown_count (a count of its messages, so only where
    the thread itself is answered)."""
    stmt = _GET_THREAD_COUNTED if counted else _GET_THREAD
    row = (await conn.execute(stmt, {"o": owner_id, "t": thread_id})).first()
    return _thread(row) if row else None


# The statements of the run hot path (BeginRun, FinishRun, lease renewal) are built once,
# with bound parameters: no statement construction or cache-key computation per call; on
# PostgreSQL asyncpg runs them directly (services.history.pgdirect).
_T = threads.c
_GET_THREAD = reused(
    sa.select(threads).where(_T.owner_id == sa.bindparam("o"), _T.id == sa.bindparam("t"))
)
# The messages of the thread /history lists: thread.messageCount counts these.
_SHOWN_COUNT = (
    sa.select(sa.func.count())
    .select_from(messages)
    .where(messages.c.owner_id == _T.owner_id, messages.c.thread_id == _T.id, IN_HISTORY)
    .scalar_subquery()
    .label("shown_count")
)
_GET_THREAD_COUNTED = reused(
    sa.select(threads, _SHOWN_COUNT).where(
        _T.owner_id == sa.bindparam("o"), _T.id == sa.bindparam("t")
    )
)
# A no-op UPDATE takes the row lock on PostgreSQL and SQLite alike (SQLite: BEGIN IMMEDIATE).
_LOCK_THREAD = reused(
    sa.update(threads)
    .where(_T.owner_id == sa.bindparam("o"), _T.id == sa.bindparam("t"))
    .values(message_count=_T.message_count)
    .returning(*_T)
)


def _open_thread_stmt(dialect: str) -> Any:
    # An existing thread takes the no-op update (its row lock); a missing one is created.
    # A concurrent creator is waited for, then its thread is locked: no retry needed.
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return (
        insert(threads)
        .values(
            owner_id=sa.bindparam("o"),
            id=sa.bindparam("t"),
            runtime_mode=sa.bindparam("mode"),
            create_time=sa.bindparam("now", type_=UtcDateTime),
            update_time=sa.bindparam("now", type_=UtcDateTime),
            message_count=0,
        )
        .on_conflict_do_update(
            index_elements=["owner_id", "id"], set_={"message_count": _T.message_count}
        )
        .returning(*_T)
    )


_OPEN_THREAD = {d: reused(_open_thread_stmt(d)) for d in ("postgresql", "sqlite")}
# The thread of a run, locked (FinishRun: the run's thread is not in its request).
_LOCK_RUN_THREAD = reused(
    sa.update(threads)
    .where(
        _T.owner_id == sa.bindparam("o"),
        _T.id
        == sa.select(runs.c.thread_id)
        .where(runs.c.owner_id == sa.bindparam("o"), runs.c.id == sa.bindparam("r"))
        .scalar_subquery(),
    )
    .values(message_count=_T.message_count)
    .returning(*_T)
)


async def lock_thread(conn: Conn, owner_id: str, thread_id: str) -> Thread | None:
    """The thread, row-locked until the transaction ends (None if it does not exist)."""
    row = (await conn.execute(_LOCK_THREAD, {"o": owner_id, "t": thread_id})).first()
    return _thread(row) if row else None


async def open_thread(
    conn: Conn, owner_id: str, thread_id: str, mode: RuntimeMode, now: datetime
) -> Thread:
    """The thread, row-locked until the transaction ends; created with `mode` if missing
    (an existing thread keeps its own mode)."""
    row = (
        await conn.execute(
            _OPEN_THREAD[conn.dialect.name],
            {"o": owner_id, "t": thread_id, "mode": mode.value, "now": now},
        )
    ).one()
    return _thread(row)


async def lock_run_thread(conn: Conn, owner_id: str, run_id: str) -> Thread | None:
    """The thread of run `run_id`, row-locked (None if the run does not exist)."""
    row = (await conn.execute(_LOCK_RUN_THREAD, {"o": owner_id, "r": run_id})).first()
    return _thread(row) if row else None


@dataclass(frozen=True)
class ThreadKey:
    update_time: datetime
    id: str


async def list_threads(
    conn: Conn, owner_id: str, after: ThreadKey | None, limit: int
) -> list[Thread]:
    """Newest update first, each with its shown_count."""
    stmt = sa.select(threads, _SHOWN_COUNT).where(threads.c.owner_id == owner_id)
    if after is not None:
        stmt = stmt.where(
            sa.or_(
                threads.c.update_time < after.update_time,
                sa.and_(threads.c.update_time == after.update_time, threads.c.id < after.id),
            )
        )
    stmt = stmt.order_by(threads.c.update_time.desc(), threads.c.id.desc()).limit(limit)
    return [_thread(r) for r in (await conn.execute(stmt)).all()]


# --- messages ---------------------------------------------------------------------------


# PostgreSQL: `id = ANY($2)`, one array parameter, so the SQL text is fixed (an IN list is
# rendered anew for each number of ids). SQLite has no arrays.
_MESSAGES_BY_ID = {
    "postgresql": reused(
        sa.select(*MESSAGE_FIELDS).where(
            messages.c.owner_id == sa.bindparam("o"),
            messages.c.id == sa.any_(sa.bindparam("ids", type_=postgresql.ARRAY(sa.String))),
        )
    ),
    "sqlite": sa.select(*MESSAGE_FIELDS).where(
        messages.c.owner_id == sa.bindparam("o"),
        messages.c.id.in_(sa.bindparam("ids", expanding=True)),
    ),
}
# A writer holds its thread's row lock, so it knows the thread's count: new messages take
# the positions after it, and the count becomes the last one. On PostgreSQL the messages and
# the count are one statement (a data-modifying CTE, run for each row with the same values);
# SQLite has no data-modifying CTEs.
_SET_COUNT = (
    sa.update(threads)
    .where(_T.owner_id == sa.bindparam("count_o"), _T.id == sa.bindparam("count_t"))
    .values(
        message_count=sa.bindparam("count"),
        update_time=sa.bindparam("count_now", type_=UtcDateTime),
    )
)
_INSERT_MESSAGES = sa.insert(messages)
# Parameters named apart from every column (m_<column>), so none is read as a column of the
# other table when the statement is compiled for the given parameter names.
_INSERT_COUNTED_MESSAGES = reused(
    sa.insert(messages)
    .values({c: sa.bindparam(f"m_{c.name}", type_=c.type) for c in messages.c})
    .add_cte(_SET_COUNT.cte("counted"))
)


async def messages_by_id(conn: Conn, owner_id: str, ids: Sequence[str]) -> dict[str, Message]:
    if not ids:
        return {}
    stmt = _MESSAGES_BY_ID[conn.dialect.name]
    rows = (await conn.execute(stmt, {"o": owner_id, "ids": list(ids)})).all()
    return {r.id: _message(r) for r in rows}


def _next_sequences_stmt(insert: Any) -> Any:
    n = sa.bindparam("n", type_=sa.BigInteger)
    stmt = insert(owner_sequences).values(owner_id=sa.bindparam("o", type_=sa.String), last_seq=n)
    return stmt.on_conflict_do_update(
        index_elements=["owner_id"], set_={"last_seq": owner_sequences.c.last_seq + n}
    ).returning(owner_sequences.c.last_seq)


# Built once: it runs in every transaction that stores messages.
_NEXT_SEQUENCES = {
    "postgresql": _next_sequences_stmt(postgresql.insert),
    "sqlite": _next_sequences_stmt(sqlite.insert),
}
_SEQUENCE_HORIZON = sa.select(owner_sequences.c.last_seq).where(
    owner_sequences.c.owner_id == sa.bindparam("o")
)


async def next_sequences(conn: Conn, owner_id: str, n: int) -> int:
    """Takes `n` commit sequence numbers of the owner; the first. The owner's counter row
    stays locked until the caller's transaction ends (PostgreSQL row lock; SQLite has one
    writer), so a transaction that takes numbers after another waits for it to commit or
    roll back: every number below one a reader sees committed is committed too."""
    stmt = _NEXT_SEQUENCES[conn.dialect.name]
    last = (await conn.execute(stmt, {"o": owner_id, "n": n})).scalar_one()
    return int(last) - n + 1


async def sequence_horizon(conn: Conn, owner_id: str) -> int:
    """The owner's last committed sequence number: every message of theirs numbered up to
    it has committed (next_sequences), so a reader that reads after this misses none."""
    found = (await conn.execute(_SEQUENCE_HORIZON, {"o": owner_id})).scalar_one_or_none()
    return int(found or 0)


async def insert_messages(
    conn: Conn,
    owner_id: str,
    thread_id: str,
    stamped: Sequence[tuple[Message, bytes]],
    *,
    count: int,
    now: datetime,
) -> None:
    """Insert messages with their serving copies (see the migration) into a thread whose row
    the caller has locked, and set its message count to `count` and its update time."""
    if not stamped:
        return
    counted = {"count_o": owner_id, "count_t": thread_id, "count": count, "count_now": now}
    if conn.dialect.name == "postgresql":
        rows = [
            {**{f"m_{k}": v for k, v in message_row(m, w).items()}, **counted} for m, w in stamped
        ]
        await conn.execute(_INSERT_COUNTED_MESSAGES, rows)
        return
    await conn.execute(_SET_COUNT, counted)
    await conn.execute(_INSERT_MESSAGES, [message_row(m, w) for m, w in stamped])


async def history_page(
    conn: Conn,
    owner_id: str,
    thread_id: str,
    *,
    after: int | None,
    backward: bool,
    limit: int,
) -> list[tuple[int, bytes]]:
    """(position, serving copy) of messages shown in /history (mask & UI_HISTORY)."""
    stmt = _HISTORY_PAGE[backward, after is not None]
    params: dict[str, Any] = {"o": owner_id, "t": thread_id, "n": limit}
    if after is not None:
        params["a"] = after
    return [(r[0], r[1]) for r in (await conn.execute(stmt, params)).all()]


@dataclass(frozen=True)
class ContextKey:
    """Where a message sits in a context: by position within a thread, by time across."""

    created_at: datetime
    thread_id: str
    position: int


def _after_key(key: ContextKey) -> sa.ColumnElement[bool]:
    c = messages.c
    return sa.or_(
        c.created_at > key.created_at,
        sa.and_(
            c.created_at == key.created_at,
            sa.or_(
                c.thread_id > key.thread_id,
                sa.and_(c.thread_id == key.thread_id, c.position > key.position),
            ),
        ),
    )


def _context_query(
    columns: Sequence[Any],
    owner_id: str,
    thread_id: str | None,
    *,
    upto: int | datetime | None,
    since: datetime | None,
    last_n: int | None,
    after: ContextKey | None,
    limit: int | None,
) -> tuple[Any, bool]:
    c = messages.c
    stmt = sa.select(*columns).where(c.owner_id == owner_id, IN_CONTEXT)
    if thread_id is not None:
        stmt = stmt.where(c.thread_id == thread_id)
        if upto is not None:
            assert isinstance(upto, int)
            stmt = stmt.where(c.position <= upto)
        order: list[Any] = [c.position]
        if after is not None:
            stmt = stmt.where(c.position > after.position)
    else:
        if upto is not None:
            assert isinstance(upto, datetime)
            stmt = stmt.where(c.created_at <= upto)
        order = [c.created_at, c.thread_id, c.position]
        if after is not None:
            stmt = stmt.where(_after_key(after))
    if since is not None:
        stmt = stmt.where(c.created_at >= since)
    if last_n is not None:
        # The newest n, read newest first; the caller reverses them.
        return stmt.order_by(*(o.desc() for o in order)).limit(last_n), True
    stmt = stmt.order_by(*order)
    return (stmt.limit(limit) if limit is not None else stmt), False


async def context_messages(
    conn: Conn,
    owner_id: str,
    thread_id: str | None,
    *,
    upto: int | datetime,
    since: datetime | None = None,
    last_n: int | None = None,
    after: ContextKey | None = None,
    limit: int | None = None,
) -> list[Message]:
    """Context-visible messages (mask & CONTEXT_ASSEMBLY), chronological.

    One thread (ordered by position, bounded by position `upto`) or, with thread_id None,
    every thread of the owner (ordered by time, bounded by created_at `upto`); only chat
    messages ever carry the context bit, so that is the owner's chat history.
    `last_n` keeps the newest n; `after`/`limit` page through the result.
    """
    stmt, newest_first = _context_query(
        MESSAGE_FIELDS,
        owner_id,
        thread_id,
        upto=upto,
        since=since,
        last_n=last_n,
        after=after,
        limit=limit,
    )
    rows = (await conn.execute(stmt)).all()
    found = [_message(r) for r in rows]
    return found[::-1] if newest_first else found


async def context_page(
    conn: Conn,
    owner_id: str,
    thread_id: str | None,
    *,
    upto: int | datetime | None,
    after: ContextKey | None,
    limit: int,
) -> list[bytes]:
    """A page of a context that nothing cuts: the serving copies, chronological.

    Only the serving copy is read: a page's key (for its token) is in its last copy.
    """
    if thread_id is not None and upto is None:
        # One thread, unbounded: the hot path (every run loads it), a pre-built statement.
        stmt = _THREAD_CONTEXT_PAGE[after is not None]
        params: dict[str, Any] = {"o": owner_id, "t": thread_id, "n": limit}
        if after is not None:
            params["a"] = after.position
        return [r[0] for r in (await conn.execute(stmt, params)).all()]
    stmt, _ = _context_query(
        [messages.c.message_pb],
        owner_id,
        thread_id,
        upto=upto,
        since=None,
        last_n=None,
        after=after,
        limit=limit,
    )
    return [r[0] for r in (await conn.execute(stmt)).all()]


@dataclass(frozen=True)
class AuditFilter:
    origin: RuntimeMode | None = None
    executor: ExecutorKind | None = None
    execution_profile_name: str = ""
    thread_id: str = ""
    start_time: datetime | None = None
    end_time: datetime | None = None


def _audit_conditions(c: Any, owner_id: str, flt: AuditFilter) -> list[sa.ColumnElement[bool]]:
    """The owner's rows of an audited table (messages, tool denials) that match `flt`."""
    conditions = [c.owner_id == owner_id]
    if flt.origin is not None:
        conditions.append(c.origin == flt.origin.value)
    if flt.executor is not None:
        conditions.append(c.executor == flt.executor.value)
    if flt.execution_profile_name:
        conditions.append(c.execution_profile_name == flt.execution_profile_name)
    if flt.thread_id:
        conditions.append(c.thread_id == flt.thread_id)
    if flt.start_time is not None:
        conditions.append(c.created_at >= flt.start_time)
    if flt.end_time is not None:
        conditions.append(c.created_at < flt.end_time)
    return conditions


async def audit_page(
    conn: Conn,
    owner_id: str,
    flt: AuditFilter,
    *,
    after: ContextKey | None,
    limit: int,
) -> list[Message]:
    """Every message of the owner, hidden ones included, by time."""
    c = messages.c
    stmt = sa.select(*MESSAGE_FIELDS).where(*_audit_conditions(c, owner_id, flt))
    if after is not None:
        stmt = stmt.where(_after_key(after))
    stmt = stmt.order_by(c.created_at, c.thread_id, c.position).limit(limit)
    return [_message(r) for r in (await conn.execute(stmt)).all()]


# --- runs -------------------------------------------------------------------------------


_R = runs.c
_ACTIVE = (RunState.QUEUED.value, RunState.RUNNING.value)
# `state IN (...)` for the pre-built statements, as comparisons: SQLAlchemy renders any IN
# list at execution time, which would cost every call a compile step.
_IS_ACTIVE = sa.or_(*(_R.state == s for s in _ACTIVE))
_GET_RUN = reused(
    sa.select(runs).where(_R.owner_id == sa.bindparam("o"), _R.id == sa.bindparam("r"))
)
_LOCK_RUN = reused(
    sa.update(runs)
    .where(_R.owner_id == sa.bindparam("o"), _R.id == sa.bindparam("r"))
    .values(state=_R.state)
    .returning(*_R)
)
# The run, if it exists, and the thread's queued and running runs, in one read: two index
# searches (as one `id = .. OR (thread_id = .. AND ..)` SQLite would read every run of the
# owner). A run that is both comes twice; begin_lookup keeps it once.
_BEGIN_LOOKUP = reused(
    sa.union_all(
        sa.select(runs).where(_R.owner_id == sa.bindparam("o"), _R.id == sa.bindparam("r")),
        sa.select(runs).where(
            _R.owner_id == sa.bindparam("o"), _R.thread_id == sa.bindparam("t"), _IS_ACTIVE
        ),
    ).order_by("thread_seq")
)
# thread_seq: the run's place in its thread, computed by the INSERT itself (the caller holds
# the thread row lock, so no other run of the thread is inserted meanwhile).
_NEXT_THREAD_SEQ = (
    sa.select(sa.func.coalesce(sa.func.max(_R.thread_seq), 0) + 1)
    .where(_R.owner_id == sa.bindparam("seq_o"), _R.thread_id == sa.bindparam("seq_t"))
    .scalar_subquery()
)
_INSERT_RUN = reused(sa.insert(runs).values(thread_seq=_NEXT_THREAD_SEQ).returning(_R.thread_seq))
# The same, only if the run id is unused and the thread has no queued or running run: what
# begin_lookup would have found, asked in the INSERT (one round trip for a run on an idle
# thread, the common case). Two NOT EXISTS: one with an OR would read every run of the owner
# on SQLite, as _BEGIN_LOOKUP's comment says.
_RUN_VALUES = [c for c in runs.c if c.key != "thread_seq"]
_INSERT_RUN_IF_IDLE = reused(
    sa.insert(runs)
    .from_select(
        [*_RUN_VALUES, _R.thread_seq],
        sa.select(
            *(sa.bindparam(c.key, type_=c.type) for c in _RUN_VALUES), _NEXT_THREAD_SEQ
        ).where(
            ~sa.exists().where(_R.owner_id == sa.bindparam("id_o"), _R.id == sa.bindparam("id_r")),
            ~sa.exists().where(
                _R.owner_id == sa.bindparam("active_o"),
                _R.thread_id == sa.bindparam("active_t"),
                _IS_ACTIVE,
            ),
        ),
    )
    .returning(_R.thread_seq)
)
# The state core.plan_finish gives for the run as it is: one for a run whose cancel was
# requested before it finished, one for the others.
_FINISHED_STATE = sa.case(
    (
        _R.cancel_requested.is_(True),
        sa.bindparam("state_if_cancel_requested", type_=sa.String),
    ),
    else_=sa.bindparam("state", type_=sa.String),
)
_FINISH_ACTIVE_RUN = reused(
    sa.update(runs)
    .where(_R.owner_id == sa.bindparam("o"), _R.id == sa.bindparam("r"), _IS_ACTIVE)
    .values(
        state=_FINISHED_STATE,
        finish_time=sa.bindparam("now", type_=UtcDateTime),
        error_code=sa.bindparam("code"),
        error_message=sa.bindparam("message"),
        input_tokens=sa.bindparam("input_tokens", type_=sa.BigInteger),
        output_tokens=sa.bindparam("output_tokens", type_=sa.BigInteger),
        usage_estimated=sa.bindparam("usage_estimated", type_=sa.Boolean),
    )
    .returning(*_R)
)
# PostgreSQL: lock the run's thread and finish the run in one statement. The run's UPDATE
# waits for the thread's (its EXISTS reads the locked row first), so the locks are taken in
# BeginRun's order (thread, then run) as with two statements; each row, if another
# transaction changed it meanwhile, is read again at its newest version before it changes.
_LOCKED_THREAD = _LOCK_RUN_THREAD.cte("locked_thread")
_FINISHED_RUN = _FINISH_ACTIVE_RUN.where(sa.exists(sa.select(1).select_from(_LOCKED_THREAD))).cte(
    "finished_run"
)
_LOCK_THREAD_FINISH_RUN = reused(
    sa.select(
        *(c.label(f"t_{c.key}") for c in _LOCKED_THREAD.c),
        *(c.label(f"r_{c.key}") for c in _FINISHED_RUN.c),
    ).select_from(_LOCKED_THREAD.outerjoin(_FINISHED_RUN, sa.true()))
)
_RENEW_LEASE = reused(
    sa.update(runs)
    .where(
        _R.owner_id == sa.bindparam("o"),
        _R.id == sa.bindparam("r"),
        _IS_ACTIVE,
        _R.lease_holder == sa.bindparam("holder"),
    )
    .values(lease_expire_time=sa.bindparam("expires", type_=UtcDateTime))
    .returning(*_R)
)


async def get_run(conn: Conn, owner_id: str, run_id: str) -> Run | None:
    row = (await conn.execute(_GET_RUN, {"o": owner_id, "r": run_id})).first()
    return _run(row) if row else None


async def lock_run(conn: Conn, owner_id: str, run_id: str) -> Run | None:
    row = (await conn.execute(_LOCK_RUN, {"o": owner_id, "r": run_id})).first()
    return _run(row) if row else None


async def begin_lookup(
    conn: Conn, owner_id: str, thread_id: str, run_id: str
) -> tuple[Run | None, list[Run]]:
    """(the run `run_id` if it exists, the thread's queued and running runs in thread order)."""
    rows = (await conn.execute(_BEGIN_LOOKUP, {"o": owner_id, "r": run_id, "t": thread_id})).all()
    found = list({r.id: _run(r) for r in rows}.values())  # in thread order, each run once
    run = next((r for r in found if r.id == run_id), None)
    return run, [r for r in found if r.active and r.thread_id == thread_id]


def _run_values(run: Run) -> dict[str, Any]:
    """The parameters of _INSERT_RUN and _INSERT_RUN_IF_IDLE for `run`."""
    return {
        "owner_id": run.owner_id,
        "id": run.id,
        "thread_id": run.thread_id,
        "seq_o": run.owner_id,
        "seq_t": run.thread_id,
        "state": run.state.value,
        "origin": run.origin.value,
        "profile": run.profile.model_dump(mode="json"),
        "profile_name": run.profile.name,
        "create_time": run.create_time,
        "start_time": run.start_time,
        "finish_time": run.finish_time,
        "error_code": run.error_code,
        "error_message": run.error_message,
        "cancel_requested": run.cancel_requested,
        "rolled_back": run.rolled_back,
        "lease_holder": run.lease_holder,
        "lease_expire_time": run.lease_expire_time,
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "usage_estimated": run.usage_estimated,
    }


async def insert_run(conn: Conn, run: Run) -> Run:
    """Store a new run (its thread row locked by the caller); returns it with its thread_seq."""
    seq = (await conn.execute(_INSERT_RUN, _run_values(run))).scalar_one()
    return replace(run, thread_seq=seq)


async def insert_run_if_idle(conn: Conn, run: Run) -> Run | None:
    """Store a new run (its thread row locked by the caller) if its id is unused and its
    thread has no queued or running run; returns it with its thread_seq, or None (nothing
    stored: begin_lookup then finds why)."""
    params = _run_values(run)
    params.update(id_o=run.owner_id, id_r=run.id, active_o=run.owner_id, active_t=run.thread_id)
    row = (await conn.execute(_INSERT_RUN_IF_IDLE, params)).first()
    return None if row is None else replace(run, thread_seq=row[0])


async def write_begin(conn: Conn, plan: BeginPlan) -> Run:
    """Write BeginRun's plan (the caller holds the thread's row lock); the run as stored."""
    owner_id = plan.run.owner_id
    await request_cancel(conn, owner_id, plan.cancel, rollback=plan.rollback)
    await hide_run_messages(conn, owner_id, plan.hide)
    if plan.insert:
        return await insert_run(conn, plan.run)
    values: dict[str, Any] = {}
    if plan.start:
        values.update(state=plan.run.state.value, start_time=plan.run.start_time)
    if plan.lease is not None:
        values.update(lease_holder=plan.lease.holder, lease_expire_time=plan.lease.expire_time)
    return await update_run(conn, owner_id, plan.run.id, **values) if values else plan.run


def _part(row: Row[Any], prefix: str) -> SimpleNamespace:
    """The columns of `row` labelled `prefix`<name>, by name."""
    return SimpleNamespace(
        **{k[len(prefix) :]: v for k, v in row._asdict().items() if k.startswith(prefix)}
    )


async def lock_thread_finish_run(
    conn: Conn, owner_id: str, plan: FinishPlan
) -> tuple[Thread | None, Run | None]:
    """lock_run_thread, then write `plan` if the run is queued or running: (the run's thread,
    row-locked, or None if the run does not exist; the run finished, or None if it was not
    queued or running, and then left as it was). One round trip on PostgreSQL."""
    end, usage = plan.end, plan.usage
    params = {
        "o": owner_id,
        "r": plan.run_id,
        "state": end.state.value,
        "state_if_cancel_requested": plan.state_if_cancel_requested.value,
        "now": plan.finish_time,
        "code": end.error_code,
        "message": end.error_message,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "usage_estimated": usage.estimated,
    }
    if conn.dialect.name != "postgresql":
        thread = await lock_run_thread(conn, owner_id, plan.run_id)
        if thread is None:
            return None, None
        row = (await conn.execute(_FINISH_ACTIVE_RUN, params)).first()
        run = _run(row) if row else None
    else:
        row = (await conn.execute(_LOCK_THREAD_FINISH_RUN, params)).first()
        if row is None:
            return None, None
        finished = _part(row, "r_")
        thread = _thread(_part(row, "t_"))
        run = _run(finished) if finished.id is not None else None
    if run is not None:
        # Its webhook event, in the transaction that writes the final state.
        await outbox.add(conn, webhook_outbox, [run_ended_event(run)])
    return thread, run


async def renew_lease(conn: Conn, owner_id: str, run_id: str, lease: Lease) -> Run | None:
    """Extend the lease of an active run held by `lease.holder`; None if it is not held by it."""
    params = {"o": owner_id, "r": run_id, "holder": lease.holder, "expires": lease.expire_time}
    row = (await conn.execute(_RENEW_LEASE, params)).first()
    return _run(row) if row else None


async def update_run(conn: Conn, owner_id: str, run_id: str, **values: Any) -> Run:
    row = (
        await conn.execute(
            sa.update(runs)
            .where(runs.c.owner_id == owner_id, runs.c.id == run_id)
            .values(**values)
            .returning(*runs.c)
        )
    ).one()
    return _run(row)


async def request_cancel(
    conn: Conn, owner_id: str, run_ids: Sequence[str], *, rollback: bool = False
) -> None:
    """Mark active runs cancel_requested (and rolled_back): their holders stop them."""
    if not run_ids:
        return
    values: dict[str, Any] = {"cancel_requested": True}
    if rollback:
        values["rolled_back"] = True
    await conn.execute(
        sa.update(runs)
        .where(runs.c.owner_id == owner_id, runs.c.id.in_(run_ids), runs.c.state.in_(_ACTIVE))
        .values(**values)
    )


async def hide_run_messages(conn: Conn, owner_id: str, run_ids: Sequence[str]) -> None:
    """Rollback: the runs' messages leave history and context (mask 0); they are never
    deleted, so audit keeps them. (The serving copy keeps its old mask field, but every
    history and context read filters on the column first.)"""
    if run_ids:
        await conn.execute(
            sa.update(messages)
            .where(messages.c.owner_id == owner_id, messages.c.run_id.in_(run_ids))
            .values(visibility_mask=0)
        )


async def expire_leases(conn: Conn, now: datetime, end: RunEnd, *, limit: int) -> list[Run]:
    """End the active runs whose lease ended before `now` as `end` says; each is returned to
    one caller only (PostgreSQL: SKIP LOCKED; SQLite has one writer)."""
    pick = (
        sa.select(runs.c.owner_id, runs.c.id)
        .where(runs.c.state.in_(_ACTIVE), runs.c.lease_expire_time < now)
        .limit(limit)
    )
    if conn.dialect.name == "postgresql":
        pick = pick.with_for_update(skip_locked=True)
    picked = (await conn.execute(pick)).all()
    out = []
    for owner_id, run_id in picked:
        row = (
            await conn.execute(
                sa.update(runs)
                .where(runs.c.owner_id == owner_id, runs.c.id == run_id, runs.c.state.in_(_ACTIVE))
                .values(
                    state=end.state.value,
                    finish_time=now,
                    error_code=end.error_code,
                    error_message=end.error_message,
                )
                .returning(*runs.c)
            )
        ).first()
        if row is not None:
            out.append(_run(row))
    await outbox.add(conn, webhook_outbox, [run_ended_event(r) for r in out])
    return out


# --- webhook outbox (shared/outbox.py) ----------------------------------------------------

webhook_outbox = outbox.table(metadata_obj)
# FinishRun writes its event on the hot path: straight to asyncpg on PostgreSQL.
reused(outbox.insert_statement(webhook_outbox))


def run_ended_event(run: Run) -> outbox.Event:
    """The webhook event of a run that reached its final state."""
    data: dict[str, Any] = {
        "runId": run.id,
        "threadId": run.thread_id,
        "state": run.state.value,
        "origin": run.origin.value,
        "inputTokens": run.input_tokens,
        "outputTokens": run.output_tokens,
    }
    if run.error_code:
        data["errorCode"] = run.error_code
    if run.error_message:
        data["errorMessage"] = run.error_message[:1000]
    if run.finish_time is not None:
        data["finishTime"] = run.finish_time.isoformat().replace("+00:00", "Z")
    return outbox.new_event(run.owner_id, f"run.{run.state.value}", data, outbox.now_ms())


# --- tool denials -----------------------------------------------------------------------


async def insert_denials(conn: Conn, denials: Sequence[ToolDenial]) -> None:
    """Store denials; one already stored (a retried FinishRun) stays as it was."""
    if not denials:
        return
    stmt = _insert(conn, tool_denials).on_conflict_do_nothing(
        index_elements=["owner_id", "run_id", "tool_call_id"]
    )
    await conn.execute(
        stmt,
        [
            {
                "owner_id": d.owner_id,
                "run_id": d.run_id,
                "tool_call_id": d.tool_call_id,
                "thread_id": d.thread_id,
                "tool_name": d.tool_name,
                "arguments_sha256": d.arguments_sha256,
                "reason": d.reason,
                "origin": d.origin.value,
                "executor": d.executor.value,
                "execution_profile_name": d.execution_profile_name,
                "created_at": d.created_at,
            }
            for d in denials
        ],
    )


@dataclass(frozen=True)
class DenialKey:
    created_at: datetime
    run_id: str
    tool_call_id: str


def _denial(row: Row[Any]) -> ToolDenial:
    return ToolDenial(
        owner_id=row.owner_id,
        run_id=row.run_id,
        thread_id=row.thread_id,
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        arguments_sha256=row.arguments_sha256,
        reason=row.reason,
        origin=RuntimeMode(row.origin),
        executor=ExecutorKind(row.executor),
        execution_profile_name=row.execution_profile_name,
        created_at=row.created_at,
    )


async def denial_page(
    conn: Conn,
    owner_id: str,
    flt: AuditFilter,
    *,
    after: DenialKey | None,
    limit: int,
) -> list[ToolDenial]:
    """The owner's refused tool calls matching the audit filter, by time."""
    c = tool_denials.c
    stmt = sa.select(tool_denials).where(*_audit_conditions(c, owner_id, flt))
    if after is not None:
        stmt = stmt.where(
            sa.or_(
                c.created_at > after.created_at,
                sa.and_(
                    c.created_at == after.created_at,
                    sa.or_(
                        c.run_id > after.run_id,
                        sa.and_(c.run_id == after.run_id, c.tool_call_id > after.tool_call_id),
                    ),
                ),
            )
        )
    stmt = stmt.order_by(c.created_at, c.run_id, c.tool_call_id).limit(limit)
    return [_denial(r) for r in (await conn.execute(stmt)).all()]


# --- pre-built read statements ------------------------------------------------------------
# The reads every page or run makes (a history page, a thread's context page) are built
# once with bound parameters, as the run statements are: no statement construction or
# cache-key generation per call. One statement per variant keeps each a plain range scan
# of its partial index.


def _history_page_stmt(backward: bool, after: bool) -> Any:
    c = messages.c
    stmt = sa.select(c.position, c.message_pb).where(
        c.owner_id == sa.bindparam("o"), c.thread_id == sa.bindparam("t"), IN_HISTORY
    )
    if after:
        a = sa.bindparam("a", type_=sa.BigInteger)
        stmt = stmt.where(c.position < a if backward else c.position > a)
    order = c.position.desc() if backward else c.position.asc()
    return stmt.order_by(order).limit(sa.bindparam("n", type_=sa.Integer))


def _thread_context_page_stmt(after: bool) -> Any:
    c = messages.c
    stmt = sa.select(c.message_pb).where(
        c.owner_id == sa.bindparam("o"), IN_CONTEXT, c.thread_id == sa.bindparam("t")
    )
    if after:
        stmt = stmt.where(c.position > sa.bindparam("a", type_=sa.BigInteger))
    return stmt.order_by(c.position).limit(sa.bindparam("n", type_=sa.Integer))


_HISTORY_PAGE = {
    (b, a): reused(_history_page_stmt(b, a)) for b in (False, True) for a in (False, True)
}
_THREAD_CONTEXT_PAGE = {a: reused(_thread_context_page_stmt(a)) for a in (False, True)}


async def context_messages_served(
    conn: Conn,
    owner_id: str,
    thread_id: str | None,
    *,
    upto: int | datetime,
    since: datetime | None,
    last_n: int | None,
) -> list[tuple[Message, bytes]]:
    """context_messages with each message's serving copy, for a context the rules cut:
    the rules read the messages, the response is the copies of those they keep."""
    stmt, newest_first = _context_query(
        [*MESSAGE_FIELDS, messages.c.message_pb],
        owner_id,
        thread_id,
        upto=upto,
        since=since,
        last_n=last_n,
        after=None,
        limit=None,
    )
    rows = (await conn.execute(stmt)).all()
    found = [(_message(r[:-1]), r[-1]) for r in rows]
    return found[::-1] if newest_first else found


# --- deletions --------------------------------------------------------------------------

deletions = sa.Table(
    "deletions",
    metadata_obj,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("kind", sa.String),
    sa.Column("thread_id", sa.String),
    sa.Column("state", sa.String),
    sa.Column("steps", _JSON),
    sa.Column("requested_by", sa.String),
    sa.Column("create_time", UtcDateTime),
    sa.Column("finish_time", UtcDateTime),
)

# Children first: tool denials refer to runs; runs and messages to threads.
_OWNED_TABLES = (("tool_denials", tool_denials), ("messages", messages), ("runs", runs))


async def active_run_ids(conn: Conn, owner_id: str, thread_id: str | None = None) -> list[str]:
    """The owner's queued or running runs (of one thread when `thread_id` is given)."""
    stmt = sa.select(runs.c.id).where(runs.c.owner_id == owner_id, runs.c.state.in_(_ACTIVE))
    if thread_id is not None:
        stmt = stmt.where(runs.c.thread_id == thread_id)
    return list((await conn.execute(stmt.order_by(runs.c.id))).scalars())


async def _delete_where(conn: Conn, table: sa.Table, *where: sa.ColumnElement[bool]) -> int:
    result = await conn.execute(sa.delete(table).where(*where))
    return int(result.rowcount or 0)


async def thread_run_ids(conn: Conn, owner_id: str, thread_id: str) -> list[str]:
    stmt = sa.select(runs.c.id).where(runs.c.owner_id == owner_id, runs.c.thread_id == thread_id)
    return list((await conn.execute(stmt.order_by(runs.c.id))).scalars())


async def delete_thread_data(conn: Conn, owner_id: str, thread_id: str) -> dict[str, int]:
    """Delete a thread with its messages, runs and tool denials; how many of each went."""
    counts = {
        name: await _delete_where(
            conn, table, table.c.owner_id == owner_id, table.c.thread_id == thread_id
        )
        for name, table in _OWNED_TABLES
    }
    counts["threads"] = await _delete_where(
        conn, threads, threads.c.owner_id == owner_id, threads.c.id == thread_id
    )
    return counts


async def delete_owner_data(conn: Conn, owner_id: str) -> dict[str, int]:
    """Delete every thread, message, run and tool denial of the owner (deletions stay)."""
    counts = {
        name: await _delete_where(conn, table, table.c.owner_id == owner_id)
        for name, table in _OWNED_TABLES
    }
    counts["threads"] = await _delete_where(conn, threads, threads.c.owner_id == owner_id)
    counts["webhookEvents"] = await outbox.delete_owner(conn, webhook_outbox, owner_id)
    return counts


async def expired_threads(conn: Conn, cutoff: datetime, limit: int) -> list[tuple[str, str]]:
    """(owner_id, thread_id) of threads last updated before `cutoff`, oldest first."""
    stmt = (
        sa.select(threads.c.owner_id, threads.c.id)
        .where(threads.c.update_time < cutoff)
        .order_by(threads.c.update_time)
        .limit(limit)
    )
    return [(o, t) for o, t in (await conn.execute(stmt)).all()]


def _steps_json(steps: Sequence[Step]) -> list[dict[str, Any]]:
    return [
        {
            "service": s.service,
            "done": s.done,
            "attempts": s.attempts,
            "last_error": s.last_error,
            "update_time": s.update_time.isoformat() if s.update_time else None,
            "deleted_counts": dict(s.deleted_counts),
        }
        for s in steps
    ]


def _deletion(row: Row[Any]) -> Deletion:
    steps = tuple(
        Step(
            service=s["service"],
            done=s["done"],
            attempts=s["attempts"],
            last_error=s["last_error"],
            update_time=datetime.fromisoformat(s["update_time"]) if s["update_time"] else None,
            deleted_counts=s["deleted_counts"],
        )
        for s in row.steps
    )
    return Deletion(
        owner_id=row.owner_id,
        id=row.id,
        kind=DeletionKind(row.kind),
        state=DeletionState(row.state),
        steps=steps,
        requested_by=row.requested_by,
        create_time=row.create_time,
        thread_id=row.thread_id,
        finish_time=row.finish_time,
    )


def _deletion_values(d: Deletion) -> dict[str, Any]:
    return {
        "owner_id": d.owner_id,
        "id": d.id,
        "kind": d.kind.value,
        "thread_id": d.thread_id,
        "state": d.state.value,
        "steps": _steps_json(d.steps),
        "requested_by": d.requested_by,
        "create_time": d.create_time,
        "finish_time": d.finish_time,
    }


async def insert_deletion(conn: Conn, d: Deletion) -> None:
    await conn.execute(sa.insert(deletions).values(**_deletion_values(d)))


async def save_deletion(conn: Conn, d: Deletion) -> None:
    values = _deletion_values(d)
    await conn.execute(
        sa.update(deletions)
        .where(deletions.c.owner_id == d.owner_id, deletions.c.id == d.id)
        .values(state=values["state"], steps=values["steps"], finish_time=values["finish_time"])
    )


async def get_deletion(
    conn: Conn, owner_id: str, deletion_id: str, *, lock: bool = False
) -> Deletion | None:
    stmt = sa.select(deletions).where(
        deletions.c.owner_id == owner_id, deletions.c.id == deletion_id
    )
    if lock and conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    row = (await conn.execute(stmt)).first()
    return _deletion(row) if row else None


def _unfinished_owner_deletions() -> Any:
    return sa.select(deletions).where(
        deletions.c.state == DeletionState.RUNNING.value,
        deletions.c.kind == DeletionKind.OWNER.value,
    )


async def unfinished_owner_deletion(conn: Conn, owner_id: str) -> Deletion | None:
    stmt = _unfinished_owner_deletions().where(deletions.c.owner_id == owner_id)
    row = (await conn.execute(stmt.order_by(deletions.c.create_time).limit(1))).first()
    return _deletion(row) if row else None


async def unfinished_owner_deletions(conn: Conn, limit: int) -> list[Deletion]:
    stmt = _unfinished_owner_deletions().order_by(deletions.c.create_time).limit(limit)
    return [_deletion(row) for row in (await conn.execute(stmt)).all()]


def _keyset(
    time_col: Any, id_col: Any, after: tuple[datetime, str] | None, *, newest_first: bool
) -> list[sa.ColumnElement[bool]]:
    """The rows after `after` (a (time, id) key) in the listing's order."""
    if after is None:
        return []
    when, item_id = after
    if newest_first:
        return [sa.or_(time_col < when, sa.and_(time_col == when, id_col < item_id))]
    return [sa.or_(time_col > when, sa.and_(time_col == when, id_col > item_id))]


@dataclass(frozen=True)
class DeletionKey:
    create_time: datetime
    id: str


async def list_deletions(
    conn: Conn, owner_id: str, after: DeletionKey | None, limit: int
) -> list[Deletion]:
    """The owner's deletion records, newest first."""
    key = (after.create_time, after.id) if after else None
    stmt = sa.select(deletions).where(
        deletions.c.owner_id == owner_id,
        *_keyset(deletions.c.create_time, deletions.c.id, key, newest_first=True),
    )
    stmt = stmt.order_by(deletions.c.create_time.desc(), deletions.c.id.desc()).limit(limit)
    return [_deletion(row) for row in (await conn.execute(stmt)).all()]


@dataclass(frozen=True)
class RunKey:
    create_time: datetime
    id: str


async def list_runs(conn: Conn, owner_id: str, after: RunKey | None, limit: int) -> list[Run]:
    """The owner's runs of every thread, oldest first."""
    key = (after.create_time, after.id) if after else None
    stmt = sa.select(runs).where(
        runs.c.owner_id == owner_id,
        *_keyset(runs.c.create_time, runs.c.id, key, newest_first=False),
    )
    stmt = stmt.order_by(runs.c.create_time, runs.c.id).limit(limit)
    return [_run(row) for row in (await conn.execute(stmt)).all()]


def _usage_stmt(dialect: str) -> Any:
    """An owner's runs created in [:start, :end), summed per UTC day, oldest first."""
    c = runs.c
    if dialect == "postgresql":
        # Constants inline: a bound one in SELECT and another in GROUP BY are two different
        # expressions to PostgreSQL.
        utc = sa.func.timezone(sa.literal_column("'UTC'"), c.create_time)
        day: Any = sa.func.to_char(utc, sa.literal_column("'YYYY-MM-DD'"))
        ran_ms: Any = sa.extract("epoch", c.finish_time - c.start_time) * 1000
    else:
        # SQLite keeps UTC timestamps as text, "YYYY-MM-DD HH:MM:SS..." (UtcDateTime).
        day = sa.func.substr(c.create_time, 1, 10)
        ran_ms = (sa.func.julianday(c.finish_time) - sa.func.julianday(c.start_time)) * 86_400_000

    def count(condition: sa.ColumnElement[bool]) -> Any:
        return sa.func.coalesce(sa.func.sum(sa.case((condition, 1), else_=0)), 0)

    stmt = (
        sa.select(
            day.label("day"),
            sa.func.count().label("runs"),
            count(c.state == RunState.FAILED.value),
            count(c.origin == RuntimeMode.AUTOMATION.value),
            sa.func.coalesce(sa.func.sum(c.input_tokens), 0),
            sa.func.coalesce(sa.func.sum(c.output_tokens), 0),
            sa.func.coalesce(sa.func.sum(ran_ms), 0),
            sa.func.coalesce(sa.func.max(sa.case((c.usage_estimated, 1), else_=0)), 0),
        )
        .where(
            c.owner_id == sa.bindparam("owner"),
            c.create_time >= sa.bindparam("start", type_=UtcDateTime),
            c.create_time < sa.bindparam("end", type_=UtcDateTime),
        )
        .group_by(sa.text("day"))
        .order_by(sa.text("day"))
    )
    return stmt


# Not on a hot path (the gateway caches what it reads), so not `reused`.
_USAGE = {name: _usage_stmt(name) for name in ("postgresql", "sqlite")}


async def owner_usage(conn: Conn, owner_id: str, start: datetime, end: datetime) -> list[UsageDay]:
    """The owner's usage per UTC day of the runs created in [start, end)."""
    rows = await conn.execute(
        _USAGE[conn.dialect.name], {"owner": owner_id, "start": start, "end": end}
    )
    return [
        UsageDay(
            day=str(r[0]),
            runs=int(r[1]),
            failed_runs=int(r[2]),
            automation_runs=int(r[3]),
            input_tokens=int(r[4]),
            output_tokens=int(r[5]),
            duration_ms=round(float(r[6])),
            tokens_estimated=bool(r[7]),
        )
        for r in rows.all()
    ]
