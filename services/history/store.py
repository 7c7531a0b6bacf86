"""The history store: the functions that read and write history's tables
(services/history/tables.py) with SQLAlchemy 2 Core, async. Every statement is scoped by
owner_id. The statements built once are named in services/history/queries.py, the mapping of
rows to domain types and back is services/history/rows.py; what is left here is which
statement runs when, and the statements whose shape depends on their arguments.

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
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from services.history import queries
from services.history.audit import AuditFilter, DenialKey
from services.history.context import ContextKey
from services.history.core import (
    LedgerEntry,
    Message,
    Run,
    Thread,
    ToolDenial,
    UsageDay,
    ledger_entry,
)
from services.history.deletions import Deletion, DeletionKind, DeletionState
from services.history.rows import (
    deletion_from_row,
    deletion_values,
    denial_from_row,
    denial_values,
    message_from_row,
    message_values,
    part,
    run_from_row,
    run_values,
    thread_from_row,
)
from services.history.runs import BeginPlan, FinishPlan, Lease, RunEnd
from services.history.tables import (
    MESSAGE_FIELDS,
    deletions,
    interrupt_answers,
    messages,
    runs,
    threads,
    tool_denials,
    usage_ledger,
    webhook_outbox,
)
from services.history.unit import Conn
from shared import outbox
from shared.db import is_postgres
from shared.domain import RunState, RuntimeMode
from shared.timestamps import rfc3339


def _insert(conn: Conn, table: sa.Table) -> Any:
    dialect = postgresql if is_postgres(conn) else sqlite
    return dialect.insert(table)


# --- threads ----------------------------------------------------------------------------


async def get_thread(
    conn: Conn, owner_id: str, thread_id: str, *, counted: bool = False
) -> Thread | None:
    """The thread; `counted`: with its shown_count (a count of its messages, so only where
    the thread itself is answered)."""
    stmt = queries.GET_THREAD_COUNTED if counted else queries.GET_THREAD
    row = (await conn.execute(stmt, {"o": owner_id, "t": thread_id})).first()
    return thread_from_row(row) if row else None


async def lock_thread(conn: Conn, owner_id: str, thread_id: str) -> Thread | None:
    """The thread, row-locked until the transaction ends (None if it does not exist)."""
    row = (await conn.execute(queries.LOCK_THREAD, {"o": owner_id, "t": thread_id})).first()
    return thread_from_row(row) if row else None


async def open_thread(
    conn: Conn, owner_id: str, thread_id: str, mode: RuntimeMode, now: datetime
) -> Thread:
    """The thread, row-locked until the transaction ends; created with `mode` if missing
    (an existing thread keeps its own mode)."""
    row = (
        await conn.execute(
            queries.PG_OPEN_THREAD if is_postgres(conn) else queries.SQLITE_OPEN_THREAD,
            {"o": owner_id, "t": thread_id, "mode": mode.value, "now": now},
        )
    ).one()
    return thread_from_row(row)


async def lock_run_thread(conn: Conn, owner_id: str, run_id: str) -> Thread | None:
    """The thread of run `run_id`, row-locked (None if the run does not exist)."""
    row = (await conn.execute(queries.LOCK_RUN_THREAD, {"o": owner_id, "r": run_id})).first()
    return thread_from_row(row) if row else None


@dataclass(frozen=True)
class ThreadKey:
    update_time: datetime
    id: str


async def list_threads(
    conn: Conn, owner_id: str, after: ThreadKey | None, limit: int
) -> list[Thread]:
    """Newest update first, each with its shown_count."""
    stmt = sa.select(threads, queries.SHOWN_COUNT).where(threads.c.owner_id == owner_id)
    if after is not None:
        stmt = stmt.where(
            sa.or_(
                threads.c.update_time < after.update_time,
                sa.and_(threads.c.update_time == after.update_time, threads.c.id < after.id),
            )
        )
    stmt = stmt.order_by(threads.c.update_time.desc(), threads.c.id.desc()).limit(limit)
    return [thread_from_row(r) for r in (await conn.execute(stmt)).all()]


# --- messages ---------------------------------------------------------------------------


async def messages_by_id(conn: Conn, owner_id: str, ids: Sequence[str]) -> dict[str, Message]:
    if not ids:
        return {}
    stmt = queries.PG_MESSAGES_BY_ID if is_postgres(conn) else queries.SQLITE_MESSAGES_BY_ID
    rows = (await conn.execute(stmt, {"o": owner_id, "ids": list(ids)})).all()
    return {r.id: message_from_row(r) for r in rows}


async def next_sequences(conn: Conn, owner_id: str, n: int) -> int:
    """Takes `n` commit sequence numbers of the owner; the first. The owner's counter row
    stays locked until the caller's transaction ends (PostgreSQL row lock; SQLite has one
    writer), so a transaction that takes numbers after another waits for it to commit or
    roll back: every number below one a reader sees committed is committed too."""
    stmt = queries.PG_NEXT_SEQUENCES if is_postgres(conn) else queries.SQLITE_NEXT_SEQUENCES
    last = (await conn.execute(stmt, {"o": owner_id, "n": n})).scalar_one()
    return int(last) - n + 1


async def sequence_horizon(conn: Conn, owner_id: str) -> int:
    """The owner's last committed sequence number: every message of theirs numbered up to
    it has committed (next_sequences), so a reader that reads after this misses none."""
    found = (await conn.execute(queries.SEQUENCE_HORIZON, {"o": owner_id})).scalar_one_or_none()
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
    if is_postgres(conn):
        rows = [
            {**{f"m_{k}": v for k, v in message_values(m, w).items()}, **counted}
            for m, w in stamped
        ]
        await conn.execute(queries.PG_INSERT_COUNTED_MESSAGES, rows)
        return
    await conn.execute(queries.SQLITE_SET_COUNT, counted)
    await conn.execute(queries.SQLITE_INSERT_MESSAGES, [message_values(m, w) for m, w in stamped])


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
    stmt = queries.HISTORY_PAGE[backward, after is not None]
    params: dict[str, Any] = {"o": owner_id, "t": thread_id, "n": limit}
    if after is not None:
        params["a"] = after
    return [(r[0], r[1]) for r in (await conn.execute(stmt, params)).all()]


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
    stmt = sa.select(*columns).where(c.owner_id == owner_id, queries.IN_CONTEXT)
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
    found = [message_from_row(r) for r in rows]
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
        stmt = queries.THREAD_CONTEXT_PAGE[after is not None]
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
    found = [(message_from_row(r[:-1]), r[-1]) for r in rows]
    return found[::-1] if newest_first else found


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
    return [message_from_row(r) for r in (await conn.execute(stmt)).all()]


# --- runs -------------------------------------------------------------------------------


async def get_run(conn: Conn, owner_id: str, run_id: str) -> Run | None:
    row = (await conn.execute(queries.GET_RUN, {"o": owner_id, "r": run_id})).first()
    return run_from_row(row) if row else None


async def lock_run(conn: Conn, owner_id: str, run_id: str) -> Run | None:
    row = (await conn.execute(queries.LOCK_RUN, {"o": owner_id, "r": run_id})).first()
    return run_from_row(row) if row else None


async def begin_lookup(
    conn: Conn, owner_id: str, thread_id: str, run_id: str
) -> tuple[Run | None, list[Run]]:
    """(the run `run_id` if it exists, the thread's queued and running runs in thread order)."""
    rows = (
        await conn.execute(queries.BEGIN_LOOKUP, {"o": owner_id, "r": run_id, "t": thread_id})
    ).all()
    found = list({r.id: run_from_row(r) for r in rows}.values())  # in thread order, each run once
    run = next((r for r in found if r.id == run_id), None)
    return run, [r for r in found if r.active and r.thread_id == thread_id]


async def insert_run(conn: Conn, run: Run) -> Run:
    """Store a new run (its thread row locked by the caller); returns it with its thread_seq."""
    seq = (await conn.execute(queries.INSERT_RUN, run_values(run))).scalar_one()
    return replace(run, thread_seq=seq)


async def insert_run_if_idle(conn: Conn, run: Run) -> Run | None:
    """Store a new run (its thread row locked by the caller) if its id is unused and its
    thread has no queued or running run; returns it with its thread_seq, or None (nothing
    stored: begin_lookup then finds why)."""
    params = run_values(run)
    params.update(id_o=run.owner_id, id_r=run.id, active_o=run.owner_id, active_t=run.thread_id)
    row = (await conn.execute(queries.INSERT_RUN_IF_IDLE, params)).first()
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
    if not is_postgres(conn):
        thread = await lock_run_thread(conn, owner_id, plan.run_id)
        if thread is None:
            return None, None
        row = (await conn.execute(queries.FINISH_ACTIVE_RUN, params)).first()
        run = run_from_row(row) if row else None
    else:
        row = (await conn.execute(queries.PG_LOCK_THREAD_FINISH_RUN, params)).first()
        if row is None:
            return None, None
        finished = part(row, "r_")
        thread = thread_from_row(part(row, "t_"))
        run = run_from_row(finished) if finished.id is not None else None
    if run is not None:
        # Its webhook event and its ledger entry, in the transaction that writes the final
        # state.
        await outbox.add(conn, webhook_outbox, [run_ended_event(run)])
        await record_usage(conn, [run], plan.finish_time)
    return thread, run


async def renew_lease(conn: Conn, owner_id: str, run_id: str, lease: Lease) -> Run | None:
    """Extend the lease of an active run held by `lease.holder`; None if it is not held by it."""
    params = {"o": owner_id, "r": run_id, "holder": lease.holder, "expires": lease.expire_time}
    row = (await conn.execute(queries.RENEW_LEASE, params)).first()
    return run_from_row(row) if row else None


async def update_run(conn: Conn, owner_id: str, run_id: str, **values: Any) -> Run:
    row = (
        await conn.execute(
            sa.update(runs)
            .where(runs.c.owner_id == owner_id, runs.c.id == run_id)
            .values(**values)
            .returning(*runs.c)
        )
    ).one()
    return run_from_row(row)


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
        .where(
            runs.c.owner_id == owner_id, runs.c.id.in_(run_ids), runs.c.state.in_(queries.ACTIVE)
        )
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
        .where(runs.c.state.in_(queries.ACTIVE), runs.c.lease_expire_time < now)
        .limit(limit)
    )
    if is_postgres(conn):
        pick = pick.with_for_update(skip_locked=True)
    picked = (await conn.execute(pick)).all()
    out = []
    for owner_id, run_id in picked:
        row = (
            await conn.execute(
                sa.update(runs)
                .where(
                    runs.c.owner_id == owner_id,
                    runs.c.id == run_id,
                    runs.c.state.in_(queries.ACTIVE),
                )
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
            out.append(run_from_row(row))
    await outbox.add(conn, webhook_outbox, [run_ended_event(r) for r in out])
    await record_usage(conn, out, now)
    return out


# --- the usage ledger ---------------------------------------------------------------------


async def record_usage(conn: Conn, finished: Sequence[Run], now: datetime) -> None:
    """Enter runs that have just finished in the usage ledger, once each: a run entered
    already keeps its first entry (the ledger is append-only)."""
    if finished:
        entries = [_ledger_values(ledger_entry(r, now)) for r in finished]
        await conn.execute(
            queries.PG_RECORD_USAGE if is_postgres(conn) else queries.SQLITE_RECORD_USAGE,
            entries,
        )


def _ledger_values(e: LedgerEntry) -> dict[str, Any]:
    return {
        "owner_id": e.owner_id,
        "run_id": e.run_id,
        "day": e.day,
        "origin": e.origin.value,
        "state": e.state.value,
        "input_tokens": e.input_tokens,
        "output_tokens": e.output_tokens,
        "usage_estimated": e.usage_estimated,
        "duration_ms": e.duration_ms,
        "record_time": e.record_time,
    }


async def keep_usage_totals(conn: Conn, owner_id: str) -> int:
    """An owner deletion's step on the ledger: the owner's entries become their sums per UTC
    day (added to what an earlier deletion of the same owner id kept), and the entries, which
    name runs, go. How many entries went."""
    led = usage_ledger.c
    flag = sa.case((led.usage_estimated, 1), else_=0)
    sums = (
        sa.select(
            led.day,
            sa.func.count(),
            sa.func.sum(sa.case((led.state == RunState.FAILED.value, 1), else_=0)),
            sa.func.sum(sa.case((led.origin == RuntimeMode.AUTOMATION.value, 1), else_=0)),
            sa.func.sum(led.input_tokens),
            sa.func.sum(led.output_tokens),
            sa.func.max(flag),
            sa.func.sum(led.duration_ms),
        )
        .where(led.owner_id == owner_id)
        .group_by(led.day)
    )
    rows = [
        {
            "owner_id": owner_id,
            "day": r[0],
            "runs": int(r[1]),
            "failed_runs": int(r[2]),
            "automation_runs": int(r[3]),
            "input_tokens": int(r[4]),
            "output_tokens": int(r[5]),
            "usage_estimated": bool(r[6]),
            "duration_ms": int(r[7]),
        }
        for r in (await conn.execute(sums)).all()
    ]
    if rows:
        add = queries.PG_ADD_TOTALS if is_postgres(conn) else queries.SQLITE_ADD_TOTALS
        for row in rows:
            await conn.execute(add, row)
    return await _delete_where(conn, usage_ledger, led.owner_id == owner_id)


# --- webhook events (shared/outbox.py) ----------------------------------------------------


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
        data["finishTime"] = rfc3339(run.finish_time)
    return outbox.new_event(run.owner_id, f"run.{run.state.value}", data, outbox.now_ms())


# --- interrupt answers ------------------------------------------------------------------


async def interrupt_answerers(
    conn: Conn, owner_id: str, thread_id: str, tool_call_ids: Sequence[str]
) -> dict[str, str]:
    """The run that took each of `tool_call_ids` of the thread, by id (those taken)."""
    c = interrupt_answers.c
    stmt = sa.select(c.tool_call_id, c.run_id).where(
        c.owner_id == owner_id, c.thread_id == thread_id, c.tool_call_id.in_(tool_call_ids)
    )
    return {row.tool_call_id: row.run_id for row in (await conn.execute(stmt)).all()}


async def take_interrupts(
    conn: Conn,
    owner_id: str,
    thread_id: str,
    run_id: str,
    tool_call_ids: Sequence[str],
    now: datetime,
) -> None:
    """Record `run_id` as the answerer of `tool_call_ids`; one another run took already
    stays that run's (BeginRun checked under the thread's row lock; FinishRun records what
    its output settled, its own answers among them)."""
    if not tool_call_ids:
        return
    stmt = _insert(conn, interrupt_answers).on_conflict_do_nothing(
        index_elements=["owner_id", "thread_id", "tool_call_id"]
    )
    rows = [
        {
            "owner_id": owner_id,
            "thread_id": thread_id,
            "tool_call_id": i,
            "run_id": run_id,
            "created_at": now,
        }
        for i in tool_call_ids
    ]
    await conn.execute(stmt, rows)


# --- tool denials -----------------------------------------------------------------------


async def insert_denials(conn: Conn, denials: Sequence[ToolDenial]) -> None:
    """Store denials; one already stored (a retried FinishRun) stays as it was."""
    if not denials:
        return
    stmt = _insert(conn, tool_denials).on_conflict_do_nothing(
        index_elements=["owner_id", "run_id", "tool_call_id"]
    )
    await conn.execute(stmt, [denial_values(d) for d in denials])


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
    return [denial_from_row(r) for r in (await conn.execute(stmt)).all()]


# --- deletions --------------------------------------------------------------------------

# Children first: tool denials refer to runs; runs and messages to threads.
_OWNED_TABLES = (("tool_denials", tool_denials), ("messages", messages), ("runs", runs))


async def active_run_ids(conn: Conn, owner_id: str, thread_id: str | None = None) -> list[str]:
    """The owner's queued or running runs (of one thread when `thread_id` is given)."""
    stmt = sa.select(runs.c.id).where(runs.c.owner_id == owner_id, runs.c.state.in_(queries.ACTIVE))
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


async def expired_threads(conn: Conn, cutoff: datetime, limit: int) -> list[tuple[str, str]]:
    """(owner_id, thread_id) of threads last updated before `cutoff`, oldest first."""
    stmt = (
        sa.select(threads.c.owner_id, threads.c.id)
        .where(threads.c.update_time < cutoff)
        .order_by(threads.c.update_time)
        .limit(limit)
    )
    return [(o, t) for o, t in (await conn.execute(stmt)).all()]


async def insert_deletion(conn: Conn, d: Deletion) -> None:
    await conn.execute(sa.insert(deletions).values(**deletion_values(d)))


async def save_deletion(conn: Conn, d: Deletion) -> None:
    values = deletion_values(d)
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
    if lock and is_postgres(conn):
        stmt = stmt.with_for_update()
    row = (await conn.execute(stmt)).first()
    return deletion_from_row(row) if row else None


def _unfinished_owner_deletions() -> Any:
    return sa.select(deletions).where(
        deletions.c.state == DeletionState.RUNNING.value,
        deletions.c.kind == DeletionKind.OWNER.value,
    )


async def unfinished_owner_deletion(conn: Conn, owner_id: str) -> Deletion | None:
    stmt = _unfinished_owner_deletions().where(deletions.c.owner_id == owner_id)
    row = (await conn.execute(stmt.order_by(deletions.c.create_time).limit(1))).first()
    return deletion_from_row(row) if row else None


async def unfinished_owner_deletions(conn: Conn, limit: int) -> list[Deletion]:
    stmt = _unfinished_owner_deletions().order_by(deletions.c.create_time).limit(limit)
    return [deletion_from_row(row) for row in (await conn.execute(stmt)).all()]


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
    return [deletion_from_row(row) for row in (await conn.execute(stmt)).all()]


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
    return [run_from_row(row) for row in (await conn.execute(stmt)).all()]


async def owner_usage(conn: Conn, owner_id: str, start: datetime, end: datetime) -> list[UsageDay]:
    """The owner's usage per UTC day of [start, end) (UTC midnights): the usage ledger's
    entries and kept totals of those days, and the runs created then still in flight."""
    first = start.astimezone(UTC).date().isoformat()
    last = (end.astimezone(UTC) - timedelta(days=1)).date().isoformat()
    rows = await conn.execute(
        queries.PG_USAGE if is_postgres(conn) else queries.SQLITE_USAGE,
        {"owner": owner_id, "start": start, "end": end, "first": first, "last": last},
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
