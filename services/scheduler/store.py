"""automation_jobs and job_runs (SQLAlchemy 2 Core, async). Every function runs on the
caller's connection: the transaction belongs to the use case that knows the unit of work.

PostgreSQL locks rows (FOR UPDATE SKIP LOCKED) so replicas claim disjoint batches. SQLite has
no row locks: a write transaction there starts with BEGIN IMMEDIATE (shared.db), and the
claim still updates each job with a compare-and-set on (id, version, next_run_at).

The tables are in services/scheduler/tables.py, the statements that differ by dialect in
services/scheduler/queries.py, the mapping of rows to domain types and back in
services/scheduler/rows.py; what is left here is which statement runs when.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from services.scheduler import queries
from services.scheduler.core import (
    ClaimPlan,
    Job,
    JobRun,
    JobStatus,
    Position,
    RunError,
    RunState,
    RunTrigger,
    new_id,
)
from services.scheduler.rows import (
    error_json,
    job_from_row,
    job_values,
    leased_runs,
    position,
    run_from_row,
    run_values,
    utc,
)
from services.scheduler.schedule import ScheduleType
from services.scheduler.tables import jobs, runs
from shared import outbox
from shared.db import is_postgres
from shared.timestamps import rfc3339


def job_run_ended_event(
    run: JobRun, job: Job, *, failed: bool, now: datetime, orchestrator_run_id: str, error: str
) -> outbox.Event:
    """The webhook event of a job run that reached its final state."""
    data: dict[str, Any] = {
        "jobRunId": run.id,
        "jobId": job.id,
        "jobTitle": job.spec.title,
        "state": "failed" if failed else "succeeded",
        "trigger": run.trigger.value,
        "scheduledSlot": rfc3339(run.scheduled_slot),
        "attempt": run.attempt,
        "finishTime": rfc3339(now),
    }
    if orchestrator_run_id:
        data["runId"] = orchestrator_run_id
    if error:
        data["error"] = error[:1000]
    kind = "job_run.failed" if failed else "job_run.succeeded"
    return outbox.new_event(run.owner_id, kind, data, int(now.timestamp() * 1000))


# Rows per multi-row statement (well below both databases' bound-parameter limits).
_CHUNK = 1000


def _insert(conn: AsyncConnection, table: sa.Table) -> Any:
    return (postgresql.insert if is_postgres(conn) else sqlite_dialect.insert)(table)


async def db_now(conn: AsyncConnection) -> datetime:
    """The database's clock (PostgreSQL: the transaction's start), an aware UTC datetime."""
    if is_postgres(conn):
        value: datetime = (await conn.execute(queries.PG_NOW)).scalar_one()
        return value.astimezone(UTC)
    text = (await conn.execute(queries.SQLITE_NOW)).scalar_one()
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# --- jobs -------------------------------------------------------------------------------


async def insert_job(conn: AsyncConnection, job: Job, *, request_id: str | None = None) -> bool:
    """Insert `job`; False when the owner already has a job with this request id or default
    key."""
    stmt = (
        _insert(conn, jobs)
        .values(**job_values(job), request_id=request_id or None)
        .on_conflict_do_nothing()
        .returning(jobs.c.id)
    )
    return (await conn.execute(stmt)).first() is not None


async def get_job(conn: AsyncConnection, owner_id: str, job_id: str) -> Job | None:
    query = sa.select(jobs).where(jobs.c.owner_id == owner_id, jobs.c.id == job_id)
    row = (await conn.execute(query)).first()
    return job_from_row(row) if row else None


async def find_job(
    conn: AsyncConnection,
    owner_id: str,
    *,
    request_id: str | None = None,
    default_key: str | None = None,
) -> Job | None:
    query = sa.select(jobs).where(jobs.c.owner_id == owner_id)
    if request_id is not None:
        query = query.where(jobs.c.request_id == request_id)
    if default_key is not None:
        query = query.where(jobs.c.default_key == default_key)
    row = (await conn.execute(query)).first()
    return job_from_row(row) if row else None


async def list_jobs(
    conn: AsyncConnection, owner_id: str, after: tuple[datetime, str] | None, limit: int
) -> list[Job]:
    query = sa.select(jobs).where(jobs.c.owner_id == owner_id)
    if after is not None:
        query = query.where(sa.tuple_(jobs.c.create_time, jobs.c.id) > sa.tuple_(*after))
    query = query.order_by(jobs.c.create_time, jobs.c.id).limit(limit)
    return [job_from_row(r) for r in (await conn.execute(query))]


async def replace_job(conn: AsyncConnection, job: Job, expected_version: int) -> bool:
    """Write `job` (its version already the new one) if the stored version is the expected
    one."""
    values = job_values(job)
    for key in ("id", "owner_id", "create_time", "default_key"):
        values.pop(key)
    result = await conn.execute(
        jobs.update()
        .where(
            jobs.c.id == job.id,
            jobs.c.owner_id == job.owner_id,
            jobs.c.version == expected_version,
        )
        .values(**values)
    )
    return result.rowcount == 1


async def delete_job(conn: AsyncConnection, owner_id: str, job_id: str) -> bool:
    # Runs go with their job (ON DELETE CASCADE); deleting them first keeps SQLite files
    # that predate foreign keys equally tidy.
    await conn.execute(runs.delete().where(runs.c.job_id == job_id, runs.c.owner_id == owner_id))
    result = await conn.execute(
        jobs.delete().where(jobs.c.owner_id == owner_id, jobs.c.id == job_id)
    )
    return result.rowcount == 1


async def mark_ran(conn: AsyncConnection, owner_id: str, job_id: str, ran_at: datetime) -> None:
    """A run of the owner's job was recorded at `ran_at` (a manual trigger; a claimed slot
    sets it in its claim)."""
    await conn.execute(
        jobs.update()
        .where(jobs.c.owner_id == owner_id, jobs.c.id == job_id)
        .values(last_run_at=ran_at)
    )


async def set_once_job_failed(conn: AsyncConnection, job_id: str) -> None:
    """A once job whose only run failed for good is failed too."""
    await conn.execute(
        jobs.update()
        .where(
            jobs.c.id == job_id,
            jobs.c.schedule_type == ScheduleType.ONCE.value,
            jobs.c.status == JobStatus.COMPLETED.value,
        )
        .values(status=JobStatus.FAILED.value)
    )


async def jobs_by_id(conn: AsyncConnection, job_ids: Iterable[str]) -> dict[str, Job]:
    ids = list(set(job_ids))
    found: dict[str, Job] = {}
    for start in range(0, len(ids), _CHUNK):
        query = sa.select(jobs).where(jobs.c.id.in_(ids[start : start + _CHUNK]))
        for row in await conn.execute(query):
            job = job_from_row(row)
            found[job.id] = job
    return found


# --- the claim ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DueJobs:
    """Due jobs at one claim position, locked for this claim (on PostgreSQL), column by
    column."""

    position: Position
    ids: Sequence[str]
    versions: Sequence[int]
    next_run_ats: Sequence[datetime | None]
    # PostgreSQL: each locked row's ctid, so the claim's update finds it by address (stable
    # while this transaction holds the row lock). Empty on SQLite.
    rows: Sequence[str] = ()


async def lock_due(
    conn: AsyncConnection, now: datetime | None, limit: int
) -> tuple[datetime | None, list[DueJobs]]:
    """Active jobs with next_run_at <= now (None: the database's now), oldest first, grouped
    by position; on PostgreSQL locked for this transaction, skipping rows another replica
    holds. Returns the `now` used with the groups (None when nothing is due)."""
    if not is_postgres(conn):
        if now is None:
            now = await db_now(conn)
        return now, await _lock_due_sqlite(conn, now, limit)
    rows = (await conn.execute(queries.PG_LOCK_DUE, {"now": now, "limit": limit})).all()
    if not rows:
        return now, []
    groups = [
        DueJobs(
            position(kind, utc(run_at), local, day, cron, tz, policy, jitter, utc(nxt), utc(last)),
            ids,
            versions,
            next_run_ats,
            ctids,
        )
        for (
            _,
            kind,
            run_at,
            local,
            day,
            cron,
            tz,
            policy,
            jitter,
            nxt,
            last,
            ids,
            versions,
            next_run_ats,
            ctids,
        ) in rows
    ]
    return rows[0][0].astimezone(UTC), groups


async def _lock_due_sqlite(conn: AsyncConnection, now: datetime, limit: int) -> list[DueJobs]:
    # No row locks: the write transaction (BEGIN IMMEDIATE) serialises claims, and each job is
    # still advanced with a compare-and-set.
    grouped: dict[Position, tuple[list[str], list[int], list[datetime | None]]] = {}
    found = await conn.execute(queries.SQLITE_LOCK_DUE, {"now": now, "limit": limit})
    for job_id, version, next_run_at, *columns in found:
        ids, versions, olds = grouped.setdefault(position(*columns), ([], [], []))
        ids.append(job_id)
        versions.append(version)
        olds.append(next_run_at)
    return [DueJobs(at, *columns) for at, columns in grouped.items()]


@dataclass
class ClaimWrites:
    """A claim's writes, column by column: the jobs to advance (compare-and-set on version and
    old next_run_at), each following one of a few plans (every job at a position without
    jitter shares one), and the job runs of each plan (leased at attempt 1, or MISSED).
    What many jobs share is sent once per plan, not once per job."""

    # Per job.
    rows: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    olds: list[datetime | None] = field(default_factory=list)
    plan_of: list[int] = field(default_factory=list)  # 1-based index into the plan columns
    # Per plan; its runs are run_slots[run_from - 1 : run_to] (1-based, inclusive).
    next_slots: list[datetime | None] = field(default_factory=list)
    next_run_ats: list[datetime | None] = field(default_factory=list)
    last_slots: list[datetime | None] = field(default_factory=list)
    completed: list[bool] = field(default_factory=list)
    ran: list[bool] = field(default_factory=list)
    run_from: list[int] = field(default_factory=list)
    run_to: list[int] = field(default_factory=list)
    # Per run of a plan: its slot, and whether it is MISSED (else leased to this replica).
    run_slots: list[datetime] = field(default_factory=list)
    run_missed: list[bool] = field(default_factory=list)

    def add(self, due: DueJobs, plan: ClaimPlan, only: int | None = None) -> None:
        """Jobs of `due` that follow `plan`: all of them, or only the one at index `only`."""
        self.next_slots.append(plan.next.slot)
        self.next_run_ats.append(plan.next.run_at)
        self.last_slots.append(plan.last_slot)
        self.completed.append(plan.next.status is JobStatus.COMPLETED)
        self.ran.append(bool(plan.run))
        self.run_from.append(len(self.run_slots) + 1)
        self.run_slots.extend(plan.run)
        self.run_missed.extend([False] * len(plan.run))
        self.run_slots.extend(plan.missed)
        self.run_missed.extend([True] * len(plan.missed))
        self.run_to.append(len(self.run_slots))
        index = len(self.next_slots)
        jobs_at = slice(None) if only is None else slice(only, only + 1)
        ids = due.ids[jobs_at]
        self.ids.extend(ids)
        self.versions.extend(due.versions[jobs_at])
        self.olds.extend(due.next_run_ats[jobs_at])
        self.rows.extend(due.rows[jobs_at])
        self.plan_of.extend([index] * len(ids))


@dataclass(frozen=True)
class RecordedClaim:
    advanced: int
    missed: int
    # The runs recorded as leased to this replica, with their jobs (for dispatch).
    to_dispatch: list[tuple[JobRun, Job]]


async def record_claim(
    conn: AsyncConnection,
    now: datetime,
    writes: ClaimWrites,
    lease_owner: str,
    lease_expires_at: datetime,
) -> RecordedClaim:
    """Advance the claimed jobs and record their runs; only jobs whose compare-and-set
    succeeded get runs, and a slot already recorded is not recorded again."""
    if not writes.ids:
        return RecordedClaim(0, 0, [])
    if not is_postgres(conn):
        return await _record_claim_sqlite(conn, now, writes, lease_owner, lease_expires_at)
    rows = await conn.execute(
        queries.PG_RECORD_CLAIM,
        {
            "now": now,
            "lease": lease_expires_at,
            "lease_owner": lease_owner,
            "rows": writes.rows,
            "ids": writes.ids,
            "versions": writes.versions,
            "olds": writes.olds,
            "plan_of": writes.plan_of,
            "slots": writes.next_slots,
            "runs": writes.next_run_ats,
            "lasts": writes.last_slots,
            "completed": writes.completed,
            "ran": writes.ran,
            "run_from": writes.run_from,
            "run_to": writes.run_to,
            "run_slots": writes.run_slots,
            "run_missed": writes.run_missed,
        },
    )
    advanced = missed = 0
    to_dispatch: list[tuple[JobRun, Job]] = []
    for row in rows:
        advanced, missed, group = row[0], row[1], row[2:]
        if group[0] is None:
            break  # no run to dispatch (only the counts)
        to_dispatch.extend(leased_runs(group, now, lease_owner, lease_expires_at))
    return RecordedClaim(advanced, missed, to_dispatch)


async def _record_claim_sqlite(
    conn: AsyncConnection,
    now: datetime,
    writes: ClaimWrites,
    lease_owner: str,
    lease_expires_at: datetime,
) -> RecordedClaim:
    advanced: dict[str, int] = {}  # job id -> its plan (0-based)
    for job_id, version, old, n in zip(
        writes.ids, writes.versions, writes.olds, writes.plan_of, strict=True
    ):
        plan = n - 1
        completed = writes.completed[plan]
        result = await conn.execute(
            queries.SQLITE_ADVANCE_JOB,
            {
                "job_id": job_id,
                "expected_version": version,
                "old_next_run_at": old,
                "new_next_slot": writes.next_slots[plan],
                "new_next_run_at": writes.next_run_ats[plan],
                "new_last_slot": writes.last_slots[plan],
                "new_status": (JobStatus.COMPLETED if completed else JobStatus.ACTIVE).value,
                "ran_at": now if writes.ran[plan] else None,
            },
        )
        if result.rowcount == 1:
            advanced[job_id] = plan
    owners: dict[str, str] = {}
    if advanced:
        found = await conn.execute(queries.SQLITE_JOB_OWNERS, {"ids": list(advanced)})
        owners = {job_id: owner for job_id, owner in found}
    new_runs = [
        JobRun(
            id=new_id(),
            job_id=job_id,
            owner_id=owners[job_id],
            scheduled_slot=writes.run_slots[k],
            trigger=RunTrigger.SCHEDULE,
            state=RunState.MISSED if missed else RunState.DISPATCHING,
            attempt=0 if missed else 1,
            create_time=now,
            lease_owner=None if missed else lease_owner,
            lease_expires_at=None if missed else lease_expires_at,
            finish_time=now if missed else None,
        )
        for job_id, plan in advanced.items()
        for k in range(writes.run_from[plan] - 1, writes.run_to[plan])
        for missed in (writes.run_missed[k],)
    ]
    inserted = await insert_runs(conn, new_runs)
    leased = [r for r in new_runs if r.id in inserted and r.state is RunState.DISPATCHING]
    found_jobs = await jobs_by_id(conn, (r.job_id for r in leased))
    missed = sum(1 for r in new_runs if r.id in inserted and r.state is RunState.MISSED)
    return RecordedClaim(len(advanced), missed, [(r, found_jobs[r.job_id]) for r in leased])


# --- runs ---------------------------------------------------------------------------------


async def insert_runs(conn: AsyncConnection, new_runs: Sequence[JobRun]) -> set[str]:
    """Insert runs, skipping a (job_id, scheduled_slot) already recorded; the inserted ids."""
    if not new_runs:
        return set()
    if not is_postgres(conn):
        result = await conn.execute(queries.SQLITE_INSERT_RUNS, [run_values(r) for r in new_runs])
        return {row[0] for row in result}
    result = await conn.execute(
        queries.PG_INSERT_RUNS,
        {
            "now": new_runs[0].create_time,
            "ids": [r.id for r in new_runs],
            "job_ids": [r.job_id for r in new_runs],
            "owners": [r.owner_id for r in new_runs],
            "slots": [r.scheduled_slot for r in new_runs],
            "triggers": [r.trigger.value for r in new_runs],
            "states": [r.state.value for r in new_runs],
            "attempts": [r.attempt for r in new_runs],
            "lease_owners": [r.lease_owner for r in new_runs],
            "leases": [r.lease_expires_at for r in new_runs],
            "finished": [r.finish_time for r in new_runs],
        },
    )
    return {row[0] for row in result}


async def list_runs(
    conn: AsyncConnection,
    owner_id: str,
    job_id: str,
    after: tuple[datetime, str] | None,
    limit: int,
) -> list[JobRun]:
    """A job's runs, newest slot first."""
    query = sa.select(runs).where(runs.c.owner_id == owner_id, runs.c.job_id == job_id)
    if after is not None:
        query = query.where(sa.tuple_(runs.c.scheduled_slot, runs.c.id) < sa.tuple_(*after))
    query = query.order_by(runs.c.scheduled_slot.desc(), runs.c.id.desc()).limit(limit)
    return [run_from_row(r) for r in await conn.execute(query)]


# --- leases, completion -------------------------------------------------------------------


def lease_until(now: datetime, seconds: float) -> datetime:
    return now + timedelta(seconds=seconds)


async def take_runs(
    conn: AsyncConnection, now: datetime, limit: int, lease_owner: str, lease_until: datetime
) -> list[tuple[JobRun, RunState]]:
    """Lease runs that wait for a (re)try or whose lease expired: attempt + 1 each.

    Returns each leased run with the state it had (DISPATCHING = its previous attempt's
    outcome is unknown: the holder died or stalled).
    """
    query = queries.PG_RUNS_TO_TAKE if is_postgres(conn) else queries.SQLITE_RUNS_TO_TAKE
    found = [run_from_row(r) for r in await conn.execute(query, {"now": now, "limit": limit})]
    taken: list[tuple[JobRun, RunState]] = []
    for run in found:
        result = await conn.execute(
            runs.update()
            .where(
                runs.c.id == run.id,
                runs.c.attempt == run.attempt,
                runs.c.state == run.state.value,
            )
            .values(
                attempt=run.attempt + 1,
                state=RunState.DISPATCHING.value,
                lease_owner=lease_owner,
                lease_expires_at=lease_until,
                next_attempt_at=None,
            )
        )
        if result.rowcount == 1:
            leased = JobRun(
                **{
                    **run.__dict__,
                    "attempt": run.attempt + 1,
                    "state": RunState.DISPATCHING,
                    "lease_owner": lease_owner,
                    "lease_expires_at": lease_until,
                    "next_attempt_at": None,
                }
            )
            taken.append((leased, run.state))
    return taken


async def renew_leases(
    conn: AsyncConnection, lease_owner: str, held: Sequence[tuple[str, int]], until: datetime
) -> list[tuple[str, int]]:
    """Extend this replica's leases, fenced: only the attempts it still holds; those are
    returned."""
    renewed: list[tuple[str, int]] = []
    for start in range(0, len(held), _CHUNK):
        chunk = list(held[start : start + _CHUNK])
        result = await conn.execute(
            runs.update()
            .where(
                runs.c.lease_owner == lease_owner,
                sa.text("state = 'dispatching'"),
                sa.tuple_(runs.c.id, runs.c.attempt).in_(chunk),
            )
            .values(lease_expires_at=until)
            .returning(runs.c.id, runs.c.attempt)
        )
        renewed.extend((row[0], row[1]) for row in result)
    return renewed


def _fenced(run_id: str, attempt: int) -> Any:
    return runs.update().where(
        runs.c.id == run_id, runs.c.attempt == attempt, sa.text("state = 'dispatching'")
    )


@dataclass(frozen=True)
class Finish:
    run_id: str
    attempt: int
    dispatched_at: datetime
    orchestrator_run_id: str


async def finish_runs(conn: AsyncConnection, finished: Sequence[Finish], now: datetime) -> set[str]:
    """Mark attempts SUCCEEDED, each fenced on its attempt; the ids actually written (an
    attempt that lost its lease writes nothing)."""
    if not finished:
        return set()
    if is_postgres(conn):
        result = await conn.execute(
            queries.PG_FINISH_RUNS,
            {
                "now": now,
                "ids": [f.run_id for f in finished],
                "attempts": [f.attempt for f in finished],
                "dispatched": [f.dispatched_at for f in finished],
                "orch": [f.orchestrator_run_id for f in finished],
            },
        )
        return {row[0] for row in result}
    written: set[str] = set()
    for f in finished:
        result = await conn.execute(
            queries.SQLITE_FINISH_RUN,
            {
                "run_id": f.run_id,
                "expected_attempt": f.attempt,
                "new_dispatched_at": f.dispatched_at,
                "now": now,
                "orch": f.orchestrator_run_id,
            },
        )
        if result.rowcount == 1:
            written.add(f.run_id)
    return written


async def fail_attempt(
    conn: AsyncConnection,
    run: JobRun,
    error: RunError,
    *,
    now: datetime,
    dispatched_at: datetime | None,
    orchestrator_run_id: str,
    retry_at: datetime | None,
) -> bool:
    """Record a failed attempt: back to PENDING until `retry_at`, or FAILED when None.
    Fenced like finish_run; the error history is appended, never replaced."""
    query = sa.select(runs.c.errors).where(runs.c.id == run.id, runs.c.attempt == run.attempt)
    current = (await conn.execute(query)).first()
    if current is None:
        return False
    errors = [*(current[0] or []), error_json(error)]
    values: dict[str, Any] = {
        "errors": errors,
        "lease_owner": None,
        "lease_expires_at": None,
        "dispatched_at": dispatched_at,
        "orchestrator_run_id": orchestrator_run_id,
    }
    if retry_at is None:
        values.update(state=RunState.FAILED.value, finish_time=now, next_attempt_at=None)
    else:
        values.update(state=RunState.PENDING.value, next_attempt_at=retry_at)
    result = await conn.execute(_fenced(run.id, run.attempt).values(**values))
    return result.rowcount == 1


async def release_leases(
    conn: AsyncConnection, lease_owner: str, held: Iterable[tuple[str, int]], now: datetime
) -> None:
    """Give up leases at shutdown: expired at once, so any replica takes the runs over."""
    for run_id, attempt in held:
        await conn.execute(
            _fenced(run_id, attempt)
            .where(runs.c.lease_owner == lease_owner)
            .values(lease_expires_at=now)
        )
