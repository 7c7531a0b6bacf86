"""The history store's named statements, per dialect (procrastinate's queries.sql, in
Python): each a constant, or for a statement with variants a mapping of its variants, with a
line saying what it does and takes. These are the statements built once: the reads and
writes of the run hot path (BeginRun, FinishRun, lease renewal) and of every page, with bound
parameters only, so no call constructs a statement or computes a cache key; those marked
`reused` (services/history/direct.py) run directly on asyncpg on PostgreSQL
(services/history/pgdirect.py), and on sqlite3 in SQLite's write units
(services/history/sqlitedirect.py). Statements whose shape depends on their arguments
(filters, keysets, IN lists) are built where they are used, in services/history/store.py.

Parameters are named (:o the owner, :t a thread, :r a run, ...); each statement's line
names what it takes.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from services.history.core import RunState
from services.history.direct import reused
from services.history.tables import (
    MESSAGE_FIELDS,
    messages,
    owner_sequences,
    runs,
    threads,
    usage_ledger,
    usage_totals,
    webhook_outbox,
)
from services.history.visibility import CONTEXT_ASSEMBLY, UI_HISTORY
from shared import outbox
from shared.db import UtcDateTime
from shared.domain import RuntimeMode

_T = threads.c
_R = runs.c


def _mask_has(bit: int) -> sa.ColumnElement[bool]:
    # Literal constants, exactly as the partial indexes' predicates: a bound parameter
    # would keep PostgreSQL's planner from proving the index applies. (A boolean SQL text,
    # which SQLAlchemy's stubs do not type as the column element every caller combines.)
    return sa.text(f"(messages.visibility_mask & {int(bit)}) <> 0")  # type: ignore[return-value]


# A message shown in /history (mask & UI_HISTORY).
IN_HISTORY = _mask_has(UI_HISTORY)
# A message in the context a run assembles (mask & CONTEXT_ASSEMBLY).
IN_CONTEXT = _mask_has(CONTEXT_ASSEMBLY)
# The states of a queued or running run.
ACTIVE = (RunState.QUEUED.value, RunState.RUNNING.value)
# `state IN (...)` for the pre-built statements, as comparisons: SQLAlchemy renders any IN
# list at execution time, which would cost every call a compile step.
_IS_ACTIVE = sa.or_(*(_R.state == s for s in ACTIVE))

# --- threads ------------------------------------------------------------------------------

# The thread :t of :o.
GET_THREAD = reused(
    sa.select(threads).where(_T.owner_id == sa.bindparam("o"), _T.id == sa.bindparam("t"))
)
# The number of a thread's messages /history lists (thread.messageCount counts these), as
# the column shown_count of a statement that selects threads.
SHOWN_COUNT = (
    sa.select(sa.func.count())
    .select_from(messages)
    .where(messages.c.owner_id == _T.owner_id, messages.c.thread_id == _T.id, IN_HISTORY)
    .scalar_subquery()
    .label("shown_count")
)
# The thread :t of :o with its shown_count.
GET_THREAD_COUNTED = reused(
    sa.select(threads, SHOWN_COUNT).where(
        _T.owner_id == sa.bindparam("o"), _T.id == sa.bindparam("t")
    )
)
# Lock the thread :t of :o until the transaction ends, returning it. A no-op UPDATE takes
# the row lock on PostgreSQL and SQLite alike (SQLite: BEGIN IMMEDIATE).
LOCK_THREAD = reused(
    sa.update(threads)
    .where(_T.owner_id == sa.bindparam("o"), _T.id == sa.bindparam("t"))
    .values(message_count=_T.message_count)
    .returning(*_T)
)


def _open_thread_stmt(insert: Any) -> Any:
    # An existing thread takes the no-op update (its row lock); a missing one is created.
    # A concurrent creator is waited for, then its thread is locked: no retry needed.
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


# Lock the thread of the run :r of :o, returning it (FinishRun: the run's thread is not in
# its request).
LOCK_RUN_THREAD = reused(
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

# --- messages -----------------------------------------------------------------------------

# The last commit sequence number taken for :o (no row: none taken yet).
SEQUENCE_HORIZON = sa.select(owner_sequences.c.last_seq).where(
    owner_sequences.c.owner_id == sa.bindparam("o")
)


def _next_sequences_stmt(insert: Any) -> Any:
    n = sa.bindparam("n", type_=sa.BigInteger)
    stmt = insert(owner_sequences).values(owner_id=sa.bindparam("o", type_=sa.String), last_seq=n)
    return stmt.on_conflict_do_update(
        index_elements=["owner_id"], set_={"last_seq": owner_sequences.c.last_seq + n}
    ).returning(owner_sequences.c.last_seq)


# A writer holds its thread's row lock, so it knows the thread's count: new messages take
# the positions after it, and the count becomes the last one. Set the count of thread
# :count_t of :count_o to :count and its update time to :count_now.
_SET_COUNT = (
    sa.update(threads)
    .where(_T.owner_id == sa.bindparam("count_o"), _T.id == sa.bindparam("count_t"))
    .values(
        message_count=sa.bindparam("count"),
        update_time=sa.bindparam("count_now", type_=UtcDateTime),
    )
)


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


# By (backward, after): up to :n (position, serving copy) of the messages of thread :t of :o
# shown in /history, in position order (backward: newest first), after position :a. One
# statement per variant keeps each a plain range scan of its partial index.
HISTORY_PAGE = {
    (b, a): reused(_history_page_stmt(b, a)) for b in (False, True) for a in (False, True)
}
# By after: up to :n serving copies of the context messages of thread :t of :o, in position
# order, after position :a (every run loads its thread's context this way).
THREAD_CONTEXT_PAGE = {a: reused(_thread_context_page_stmt(a)) for a in (False, True)}

# --- runs ---------------------------------------------------------------------------------

# The run :r of :o.
GET_RUN = reused(
    sa.select(runs).where(_R.owner_id == sa.bindparam("o"), _R.id == sa.bindparam("r"))
)
# Lock the run :r of :o until the transaction ends (a no-op UPDATE), returning it.
LOCK_RUN = reused(
    sa.update(runs)
    .where(_R.owner_id == sa.bindparam("o"), _R.id == sa.bindparam("r"))
    .values(state=_R.state)
    .returning(*_R)
)
# The run :r of :o, if it exists, and the queued and running runs of thread :t, in thread
# order, in one read: two index searches (as one `id = .. OR (thread_id = .. AND ..)` SQLite
# would read every run of the owner). A run that is both comes twice; the caller keeps it
# once.
BEGIN_LOOKUP = reused(
    sa.union_all(
        sa.select(runs).where(_R.owner_id == sa.bindparam("o"), _R.id == sa.bindparam("r")),
        sa.select(runs).where(
            _R.owner_id == sa.bindparam("o"), _R.thread_id == sa.bindparam("t"), _IS_ACTIVE
        ),
    ).order_by("thread_seq")
)
# thread_seq: the run's place in its thread (of :seq_t of :seq_o), computed by the INSERT
# itself (the caller holds the thread row lock, so no other run of the thread is inserted
# meanwhile).
_NEXT_THREAD_SEQ = (
    sa.select(sa.func.coalesce(sa.func.max(_R.thread_seq), 0) + 1)
    .where(_R.owner_id == sa.bindparam("seq_o"), _R.thread_id == sa.bindparam("seq_t"))
    .scalar_subquery()
)
# Insert a run (its columns by name, :seq_o, :seq_t), returning its thread_seq.
INSERT_RUN = reused(sa.insert(runs).values(thread_seq=_NEXT_THREAD_SEQ).returning(_R.thread_seq))
# The same, only if the run id (:id_r of :id_o) is unused and the thread (:active_t of
# :active_o) has no queued or running run: what BEGIN_LOOKUP would have found, asked in the
# INSERT (one round trip for a run on an idle thread, the common case). Two NOT EXISTS: one
# with an OR would read every run of the owner on SQLite, as BEGIN_LOOKUP's line says.
_RUN_VALUES = [c for c in runs.c if c.key != "thread_seq"]
INSERT_RUN_IF_IDLE = reused(
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
# The state runs.plan_finish gives for the run as it is: :state_if_cancel_requested for a
# run whose cancel was requested before it finished, :state for the others.
_FINISHED_STATE = sa.case(
    (
        _R.cancel_requested.is_(True),
        sa.bindparam("state_if_cancel_requested", type_=sa.String),
    ),
    else_=sa.bindparam("state", type_=sa.String),
)
# Finish the run :r of :o if it is queued or running: its final state (_FINISHED_STATE), at
# :now, with :code, :message and its usage (:input_tokens, :output_tokens,
# :usage_estimated); returning it.
FINISH_ACTIVE_RUN = reused(
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
# Move the lease of the active run :r of :o held by :holder to :expires, returning the run.
RENEW_LEASE = reused(
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

# --- usage --------------------------------------------------------------------------------


def _usage_stmt(dialect: str) -> Any:
    """An owner's usage per UTC day in [:first, :last] (YYYY-MM-DD, both included), oldest
    first: the ledger's entries of finished runs, the totals an owner deletion kept, and the
    runs still queued or running (created in [:start, :end), without tokens yet)."""
    c, led, tot = runs.c, usage_ledger.c, usage_totals.c
    if dialect == "postgresql":
        # Constants inline: a bound one in SELECT and another in GROUP BY are two different
        # expressions to PostgreSQL.
        utc = sa.func.timezone(sa.literal_column("'UTC'"), c.create_time)
        day: Any = sa.func.to_char(utc, sa.literal_column("'YYYY-MM-DD'"))
    else:
        # SQLite keeps UTC timestamps as text, "YYYY-MM-DD HH:MM:SS..." (UtcDateTime).
        day = sa.func.substr(c.create_time, 1, 10)

    def flag(condition: sa.ColumnElement[bool]) -> Any:
        return sa.case((condition, 1), else_=0)

    zero: Any = sa.literal_column("0")
    in_days = (sa.bindparam("first", type_=sa.String), sa.bindparam("last", type_=sa.String))
    ledger = sa.select(
        led.day.label("day"),
        sa.literal_column("1").label("runs"),
        flag(led.state == RunState.FAILED.value).label("failed"),
        flag(led.origin == RuntimeMode.AUTOMATION.value).label("automation"),
        led.input_tokens.label("input_tokens"),
        led.output_tokens.label("output_tokens"),
        led.duration_ms.label("duration_ms"),
        flag(led.usage_estimated).label("estimated"),
    ).where(led.owner_id == sa.bindparam("owner"), led.day.between(*in_days))
    kept = sa.select(
        tot.day,
        tot.runs,
        tot.failed_runs,
        tot.automation_runs,
        tot.input_tokens,
        tot.output_tokens,
        tot.duration_ms,
        flag(tot.usage_estimated),
    ).where(tot.owner_id == sa.bindparam("owner"), tot.day.between(*in_days))
    active = sa.select(
        day,
        sa.literal_column("1"),
        zero,
        flag(c.origin == RuntimeMode.AUTOMATION.value),
        zero,
        zero,
        zero,
        zero,
    ).where(
        c.owner_id == sa.bindparam("owner"),
        c.state.in_(ACTIVE),
        c.create_time >= sa.bindparam("start", type_=UtcDateTime),
        c.create_time < sa.bindparam("end", type_=UtcDateTime),
    )
    every = sa.union_all(ledger, kept, active).subquery("usage")
    u = every.c
    return (
        sa.select(
            u.day,
            sa.func.sum(u.runs),
            sa.func.sum(u.failed),
            sa.func.sum(u.automation),
            sa.func.sum(u.input_tokens),
            sa.func.sum(u.output_tokens),
            sa.func.sum(u.duration_ms),
            sa.func.max(u.estimated),
        )
        .group_by(u.day)
        .order_by(u.day)
    )


def _record_usage_stmt(insert: Any) -> Any:
    return insert(usage_ledger).on_conflict_do_nothing(
        index_elements=[usage_ledger.c.owner_id, usage_ledger.c.run_id]
    )


def _add_totals_stmt(insert: Any) -> Any:
    stmt = insert(usage_totals)
    ex = stmt.excluded
    t = usage_totals.c
    summed = ("runs", "failed_runs", "automation_runs", "input_tokens", "output_tokens")
    return stmt.on_conflict_do_update(
        index_elements=[t.owner_id, t.day],
        set_={
            **{n: t[n] + ex[n] for n in (*summed, "duration_ms")},
            "usage_estimated": sa.or_(t.usage_estimated, ex.usage_estimated),
        },
    )


# --- webhook outbox -----------------------------------------------------------------------

# FinishRun writes its event on the hot path (shared/outbox.py's insert of :owner_id's event
# columns): straight to asyncpg on PostgreSQL.
reused(outbox.insert_statement(webhook_outbox))

# --- PostgreSQL ---------------------------------------------------------------------------

# Lock thread :t of :o, creating it in :mode at :now if missing, returning it.
PG_OPEN_THREAD = reused(_open_thread_stmt(postgresql.insert))
# Take :n commit sequence numbers of :o, returning the last.
PG_NEXT_SEQUENCES = _next_sequences_stmt(postgresql.insert)
# The messages :ids (an array) of :o. `id = ANY($2)`, one array parameter, so the SQL text
# is fixed (an IN list is rendered anew for each number of ids).
PG_MESSAGES_BY_ID = reused(
    sa.select(*MESSAGE_FIELDS).where(
        messages.c.owner_id == sa.bindparam("o"),
        messages.c.id == sa.any_(sa.bindparam("ids", type_=postgresql.ARRAY(sa.String))),
    )
)
# Insert messages (executemany: each row's columns as :m_<column>) and set their thread's
# count (_SET_COUNT's parameters, the same in every row) in one statement, a data-modifying
# CTE. Parameters are named apart from every column (m_<column>), so none is read as a
# column of the other table when the statement is compiled for the given parameter names.
PG_INSERT_COUNTED_MESSAGES = reused(
    sa.insert(messages)
    .values({c: sa.bindparam(f"m_{c.name}", type_=c.type) for c in messages.c})
    .add_cte(_SET_COUNT.cte("counted"))
)
# Lock the thread of run :r of :o and finish the run (FINISH_ACTIVE_RUN's parameters) in one
# statement: the thread's columns as t_<column>, the run's as r_<column> (all NULL if it was
# not queued or running); no row if the run does not exist. The run's UPDATE waits for the
# thread's (its EXISTS reads the locked row first), so the locks are taken in BeginRun's
# order (thread, then run) as with two statements; each row, if another transaction changed
# it meanwhile, is read again at its newest version before it changes.
_LOCKED_THREAD = LOCK_RUN_THREAD.cte("locked_thread")
_FINISHED_RUN = FINISH_ACTIVE_RUN.where(sa.exists(sa.select(1).select_from(_LOCKED_THREAD))).cte(
    "finished_run"
)
PG_LOCK_THREAD_FINISH_RUN = reused(
    sa.select(
        *(c.label(f"t_{c.key}") for c in _LOCKED_THREAD.c),
        *(c.label(f"r_{c.key}") for c in _FINISHED_RUN.c),
    ).select_from(_LOCKED_THREAD.outerjoin(_FINISHED_RUN, sa.true()))
)
# The usage of :owner per UTC day in [:first, :last] (ledger, kept totals, and the active
# runs created in [:start, :end)), oldest first: day, runs, failed, automation runs, input
# and output tokens, run milliseconds, any estimated (0/1). Not on a hot path (the gateway
# caches what it reads), so not `reused`.
PG_USAGE = _usage_stmt("postgresql")
# Enter finished runs in the usage ledger (executemany: each row's columns by name); a run
# entered already keeps its entry.
PG_RECORD_USAGE = reused(_record_usage_stmt(postgresql.insert))
# Add a deleted owner's sums of one day to its kept totals (each row's columns by name).
PG_ADD_TOTALS = _add_totals_stmt(postgresql.insert)

# --- SQLite -------------------------------------------------------------------------------

# Lock thread :t of :o, creating it in :mode at :now if missing, returning it.
SQLITE_OPEN_THREAD = reused(_open_thread_stmt(sqlite.insert))
# Take :n commit sequence numbers of :o, returning the last.
SQLITE_NEXT_SEQUENCES = reused(_next_sequences_stmt(sqlite.insert))
# The messages :ids (expanded into an IN list: SQLite has no arrays) of :o.
SQLITE_MESSAGES_BY_ID = sa.select(*MESSAGE_FIELDS).where(
    messages.c.owner_id == sa.bindparam("o"),
    messages.c.id.in_(sa.bindparam("ids", expanding=True)),
)
# Set thread :count_t of :count_o's count to :count and its update time to :count_now (with
# SQLITE_INSERT_MESSAGES: SQLite has no data-modifying CTEs).
SQLITE_SET_COUNT = reused(_SET_COUNT)
# Insert messages (executemany: each row's columns by name).
SQLITE_INSERT_MESSAGES = reused(sa.insert(messages))
# The usage per UTC day, as PG_USAGE.
SQLITE_USAGE = _usage_stmt("sqlite")
# As PG_RECORD_USAGE.
SQLITE_RECORD_USAGE = reused(_record_usage_stmt(sqlite.insert))
# As PG_ADD_TOTALS.
SQLITE_ADD_TOTALS = _add_totals_stmt(sqlite.insert)
