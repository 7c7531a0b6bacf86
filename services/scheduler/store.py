"""automation_jobs and job_runs (SQLAlchemy 2 Core, async). Every function runs on the
caller's connection: the transaction belongs to the use case that knows the unit of work.

PostgreSQL locks rows (FOR UPDATE SKIP LOCKED) so replicas claim disjoint batches. SQLite has
no row locks: a write transaction there starts with BEGIN IMMEDIATE (shared.db), and the
claim still updates each job with a compare-and-set on (id, version, next_run_at).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.profiles import ExecutionProfile, parse_profile

from services.scheduler.core import (
    CatchUpPolicy,
    Job,
    JobConfig,
    JobRun,
    JobSpec,
    JobStatus,
    RunError,
    RunState,
    RunTrigger,
)
from services.scheduler.schedule import Schedule, ScheduleType


class UtcDateTime(sa.TypeDecorator[datetime]):
    """Aware UTC datetimes in and out; SQLite stores them as naive UTC text."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_TS = UtcDateTime()
metadata = sa.MetaData()

jobs = sa.Table(
    "automation_jobs",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("owner_id", sa.String(128)),
    sa.Column("title", sa.String(200)),
    sa.Column("schedule_type", sa.String(16)),
    sa.Column("run_at", _TS),
    sa.Column("local_time", sa.String(5)),
    sa.Column("weekday", sa.SmallInteger),
    sa.Column("cron", sa.String(200)),
    sa.Column("timezone", sa.String(64)),
    sa.Column("status", sa.String(16)),
    sa.Column("config", _JSON),
    sa.Column("execution_profile", _JSON),
    sa.Column("catch_up_policy", sa.String(16)),
    sa.Column("jitter_seconds", sa.Integer),
    sa.Column("next_slot", _TS),
    sa.Column("next_run_at", _TS),
    sa.Column("last_run_at", _TS),
    sa.Column("last_slot", _TS),
    sa.Column("version", sa.BigInteger),
    sa.Column("request_id", sa.String(128)),
    sa.Column("default_key", sa.String(64)),
    sa.Column("create_time", _TS),
    sa.Column("update_time", _TS),
)

runs = sa.Table(
    "job_runs",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("job_id", sa.String(32)),
    sa.Column("owner_id", sa.String(128)),
    sa.Column("scheduled_slot", _TS),
    sa.Column("trigger", sa.String(16)),
    sa.Column("state", sa.String(16)),
    sa.Column("attempt", sa.Integer),
    sa.Column("lease_owner", sa.String(64)),
    sa.Column("lease_expires_at", _TS),
    sa.Column("next_attempt_at", _TS),
    sa.Column("dispatched_at", _TS),
    sa.Column("finish_time", _TS),
    sa.Column("orchestrator_run_id", sa.String(64)),
    sa.Column("errors", _JSON),
    sa.Column("create_time", _TS),
)

# Rows per multi-row statement (well below both databases' bound-parameter limits).
_CHUNK = 1000


def _is_pg(conn: AsyncConnection) -> bool:
    return conn.dialect.name == "postgresql"


def _insert(conn: AsyncConnection, table: sa.Table) -> Any:
    return (postgresql.insert if _is_pg(conn) else sqlite_dialect.insert)(table)


async def db_now(conn: AsyncConnection) -> datetime:
    """The database's clock (PostgreSQL: the transaction's start), an aware UTC datetime."""
    if _is_pg(conn):
        value: datetime = (await conn.execute(sa.text("SELECT now()"))).scalar_one()
        return value.astimezone(UTC)
    text = (await conn.execute(sa.text("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')"))).scalar_one()
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# --- jobs -------------------------------------------------------------------------------


def job_values(job: Job) -> dict[str, Any]:
    spec = job.spec
    return {
        "id": job.id,
        "owner_id": job.owner_id,
        "title": spec.title,
        "schedule_type": spec.schedule.type.value,
        "run_at": spec.schedule.run_at,
        "local_time": spec.schedule.local_time or None,
        "weekday": spec.schedule.weekday or None,
        "cron": spec.schedule.cron or None,
        "timezone": spec.timezone,
        "status": job.status.value,
        "config": {"prompt": spec.config.prompt, "tools": list(spec.config.tools)},
        "execution_profile": spec.profile.model_dump(mode="json"),
        "catch_up_policy": spec.catch_up_policy.value,
        "jitter_seconds": spec.jitter_seconds,
        "next_slot": job.next_slot,
        "next_run_at": job.next_run_at,
        "last_run_at": job.last_run_at,
        "last_slot": job.last_slot,
        "version": job.version,
        "default_key": job.default_key,
        "create_time": job.create_time,
        "update_time": job.update_time,
    }


@functools.lru_cache(maxsize=1024)
def _profile_from_json(text: str) -> ExecutionProfile:
    return parse_profile(json.loads(text))


def _profile(data: dict[str, Any]) -> ExecutionProfile:
    # Jobs share a handful of profile snapshots; validating each row's copy again would be
    # most of the claim's CPU time.
    return _profile_from_json(json.dumps(data, sort_keys=True))


def job_from_row(row: Any) -> Job:
    m = row._mapping
    schedule = Schedule(
        ScheduleType(m["schedule_type"]),
        run_at=m["run_at"],
        local_time=m["local_time"] or "",
        weekday=m["weekday"] or 0,
        cron=m["cron"] or "",
    )
    config = m["config"]
    spec = JobSpec(
        title=m["title"],
        schedule=schedule,
        timezone=m["timezone"],
        config=JobConfig(prompt=config["prompt"], tools=tuple(config.get("tools", ()))),
        profile=_profile(m["execution_profile"]),
        catch_up_policy=CatchUpPolicy(m["catch_up_policy"]),
        jitter_seconds=m["jitter_seconds"],
    )
    return Job(
        id=m["id"],
        owner_id=m["owner_id"],
        spec=spec,
        status=JobStatus(m["status"]),
        version=m["version"],
        create_time=m["create_time"],
        update_time=m["update_time"],
        next_slot=m["next_slot"],
        next_run_at=m["next_run_at"],
        last_run_at=m["last_run_at"],
        last_slot=m["last_slot"],
        default_key=m["default_key"],
    )


async def insert_job(conn: AsyncConnection, job: Job, *, request_id: str | None = None) -> bool:
    """Insert `job`; False when the owner already has a job with this request id or default key."""
    stmt = (
        _insert(conn, jobs)
        .values(**job_values(job), request_id=request_id or None)
        .on_conflict_do_nothing()
        .returning(jobs.c.id)
    )
    return (await conn.execute(stmt)).first() is not None


async def get_job(conn: AsyncConnection, owner_id: str, job_id: str) -> Job | None:
    row = (
        await conn.execute(sa.select(jobs).where(jobs.c.owner_id == owner_id, jobs.c.id == job_id))
    ).first()
    return job_from_row(row) if row else None


async def find_job(
    conn: AsyncConnection, owner_id: str, *, request_id: str | None = None, default_key: str | None = None
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
    """Write `job` (its version already the new one) if the stored version is the expected one."""
    values = job_values(job)
    for key in ("id", "owner_id", "create_time", "default_key"):
        values.pop(key)
    result = await conn.execute(
        jobs.update()
        .where(jobs.c.id == job.id, jobs.c.owner_id == job.owner_id, jobs.c.version == expected_version)
        .values(**values)
    )
    return result.rowcount == 1


async def delete_job(conn: AsyncConnection, owner_id: str, job_id: str) -> bool:
    # Runs go with their job (ON DELETE CASCADE); deleting them first keeps SQLite files
    # that predate foreign keys equally tidy.
    await conn.execute(runs.delete().where(runs.c.job_id == job_id, runs.c.owner_id == owner_id))
    result = await conn.execute(jobs.delete().where(jobs.c.owner_id == owner_id, jobs.c.id == job_id))
    return result.rowcount == 1


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


# --- the claim ----------------------------------------------------------------------------


async def lock_due_jobs(conn: AsyncConnection, now: datetime, limit: int) -> list[Job]:
    """Active jobs with next_run_at <= now, oldest first; on PostgreSQL locked for this
    transaction, skipping rows another replica holds."""
    query = (
        sa.select(jobs)
        .where(sa.text(jobs.c.status.name + " = 'active'"), jobs.c.next_run_at <= now)
        .order_by(jobs.c.next_run_at)
        .limit(limit)
    )
    if _is_pg(conn):
        query = query.with_for_update(skip_locked=True)
    return [job_from_row(r) for r in (await conn.execute(query))]


@dataclass(frozen=True)
class Advance:
    """A claimed job's new position (compare-and-set on its version and old next_run_at)."""

    job_id: str
    version: int
    old_next_run_at: datetime | None
    next_slot: datetime | None
    next_run_at: datetime | None
    last_slot: datetime | None
    status: JobStatus
    ran: bool


async def advance_jobs(conn: AsyncConnection, now: datetime, advances: Sequence[Advance]) -> set[str]:
    """Apply the advances; the ids of the jobs whose compare-and-set succeeded."""
    if not advances:
        return set()
    if _is_pg(conn):
        return await _advance_pg(conn, now, advances)
    done: set[str] = set()
    for a in advances:
        result = await conn.execute(
            jobs.update()
            .where(jobs.c.id == a.job_id, jobs.c.version == a.version, jobs.c.next_run_at == a.old_next_run_at)
            .values(
                next_slot=a.next_slot,
                next_run_at=a.next_run_at,
                last_slot=a.last_slot,
                status=a.status.value,
                last_run_at=now if a.ran else jobs.c.last_run_at,
            )
        )
        if result.rowcount == 1:
            done.add(a.job_id)
    return done


# One statement for a whole batch (unnest of arrays): a round trip per job would cap the
# claim rate far below the target.
_ADVANCE_PG = sa.text(
    """
    UPDATE automation_jobs AS j
    SET next_slot = u.next_slot, next_run_at = u.next_run_at, last_slot = u.last_slot,
        status = u.status, last_run_at = CASE WHEN u.ran THEN :now ELSE j.last_run_at END
    FROM unnest(CAST(:ids AS text[]), CAST(:versions AS bigint[]), CAST(:olds AS timestamptz[]),
                CAST(:slots AS timestamptz[]), CAST(:runs AS timestamptz[]),
                CAST(:lasts AS timestamptz[]), CAST(:statuses AS text[]), CAST(:ran AS boolean[]))
         AS u(id, version, old_next_run_at, next_slot, next_run_at, last_slot, status, ran)
    WHERE j.id = u.id AND j.version = u.version
      AND j.next_run_at IS NOT DISTINCT FROM u.old_next_run_at
    RETURNING j.id
    """
).bindparams(sa.bindparam("now", type_=_TS))


async def _advance_pg(conn: AsyncConnection, now: datetime, advances: Sequence[Advance]) -> set[str]:
    result = await conn.execute(
        _ADVANCE_PG,
        {
            "now": now,
            "ids": [a.job_id for a in advances],
            "versions": [a.version for a in advances],
            "olds": [a.old_next_run_at for a in advances],
            "slots": [a.next_slot for a in advances],
            "runs": [a.next_run_at for a in advances],
            "lasts": [a.last_slot for a in advances],
            "statuses": [a.status.value for a in advances],
            "ran": [a.ran for a in advances],
        },
    )
    return {row[0] for row in result}


def run_from_row(row: Any) -> JobRun:
    m = row._mapping
    return JobRun(
        id=m["id"],
        job_id=m["job_id"],
        owner_id=m["owner_id"],
        scheduled_slot=m["scheduled_slot"],
        trigger=RunTrigger(m["trigger"]),
        state=RunState(m["state"]),
        attempt=m["attempt"],
        create_time=m["create_time"],
        lease_owner=m["lease_owner"],
        lease_expires_at=m["lease_expires_at"],
        next_attempt_at=m["next_attempt_at"],
        dispatched_at=m["dispatched_at"],
        finish_time=m["finish_time"],
        orchestrator_run_id=m["orchestrator_run_id"],
        errors=tuple(
            RunError(e["attempt"], e["error"], datetime.fromisoformat(e["at"])) for e in m["errors"] or ()
        ),
    )


def _run_values(run: JobRun) -> dict[str, Any]:
    return {
        "id": run.id,
        "job_id": run.job_id,
        "owner_id": run.owner_id,
        "scheduled_slot": run.scheduled_slot,
        "trigger": run.trigger.value,
        "state": run.state.value,
        "attempt": run.attempt,
        "lease_owner": run.lease_owner,
        "lease_expires_at": run.lease_expires_at,
        "next_attempt_at": run.next_attempt_at,
        "dispatched_at": run.dispatched_at,
        "finish_time": run.finish_time,
        "orchestrator_run_id": run.orchestrator_run_id,
        "errors": [_error_json(e) for e in run.errors],
        "create_time": run.create_time,
    }


def _error_json(e: RunError) -> dict[str, Any]:
    return {"attempt": e.attempt, "error": e.error, "at": e.at.isoformat()}


async def insert_runs(conn: AsyncConnection, new_runs: Sequence[JobRun]) -> set[str]:
    """Insert runs, skipping a (job_id, scheduled_slot) already recorded; the inserted ids."""
    if not new_runs:
        return set()
    if _is_pg(conn):
        return await _insert_runs_pg(conn, new_runs)
    # executemany form: SQLAlchemy batches it into multi-row INSERTs ("insertmanyvalues")
    # from one cached compiled statement.
    stmt = (
        _insert(conn, runs)
        .on_conflict_do_nothing(index_elements=["job_id", "scheduled_slot"])
        .returning(runs.c.id)
    )
    result = await conn.execute(stmt, [_run_values(r) for r in new_runs])
    return {row[0] for row in result}


# One statement per batch, arrays in: the claim's insert is on the hot path.
_INSERT_RUNS_PG = sa.text(
    """
    INSERT INTO job_runs (id, job_id, owner_id, scheduled_slot, trigger, state, attempt,
                          lease_owner, lease_expires_at, finish_time, errors, create_time)
    SELECT u.id, u.job_id, u.owner_id, u.slot, u.trigger, u.state, u.attempt,
           u.lease_owner, u.lease_expires_at, u.finish_time, '[]'::jsonb, :now
    FROM unnest(CAST(:ids AS text[]), CAST(:job_ids AS text[]), CAST(:owners AS text[]),
                CAST(:slots AS timestamptz[]), CAST(:triggers AS text[]), CAST(:states AS text[]),
                CAST(:attempts AS integer[]), CAST(:lease_owners AS text[]),
                CAST(:leases AS timestamptz[]), CAST(:finished AS timestamptz[]))
         AS u(id, job_id, owner_id, slot, trigger, state, attempt, lease_owner,
              lease_expires_at, finish_time)
    ON CONFLICT (job_id, scheduled_slot) DO NOTHING
    RETURNING id
    """
).bindparams(sa.bindparam("now", type_=_TS))


async def _insert_runs_pg(conn: AsyncConnection, new_runs: Sequence[JobRun]) -> set[str]:
    result = await conn.execute(
        _INSERT_RUNS_PG,
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


# --- leases, completion -------------------------------------------------------------------


async def take_runs(
    conn: AsyncConnection, now: datetime, limit: int, lease_owner: str, lease_until: datetime
) -> list[tuple[JobRun, RunState]]:
    """Lease runs that wait for a (re)try or whose lease expired: attempt + 1 each.

    Returns each leased run with the state it had (DISPATCHING = its previous attempt's
    outcome is unknown: the holder died or stalled).
    """
    query = (
        sa.select(runs)
        .where(
            sa.or_(
                sa.and_(sa.text("state = 'pending'"), runs.c.next_attempt_at <= now),
                sa.and_(sa.text("state = 'dispatching'"), runs.c.lease_expires_at <= now),
            )
        )
        .limit(limit)
    )
    if _is_pg(conn):
        query = query.with_for_update(skip_locked=True)
    found = [run_from_row(r) for r in await conn.execute(query)]
    taken: list[tuple[JobRun, RunState]] = []
    for run in found:
        result = await conn.execute(
            runs.update()
            .where(runs.c.id == run.id, runs.c.attempt == run.attempt, runs.c.state == run.state.value)
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
    """Extend this replica's leases, fenced: only the attempts it still holds; those are returned."""
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
    if _is_pg(conn):
        result = await conn.execute(
            _FINISH_PG,
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
            _fenced(f.run_id, f.attempt).values(
                state=RunState.SUCCEEDED.value,
                lease_owner=None,
                lease_expires_at=None,
                dispatched_at=f.dispatched_at,
                finish_time=now,
                orchestrator_run_id=f.orchestrator_run_id,
            )
        )
        if result.rowcount == 1:
            written.add(f.run_id)
    return written


_FINISH_PG = sa.text(
    """
    UPDATE job_runs AS r
    SET state = 'succeeded', lease_owner = NULL, lease_expires_at = NULL,
        dispatched_at = u.dispatched_at, finish_time = :now, orchestrator_run_id = u.orch
    FROM unnest(CAST(:ids AS text[]), CAST(:attempts AS integer[]),
                CAST(:dispatched AS timestamptz[]), CAST(:orch AS text[]))
         AS u(id, attempt, dispatched_at, orch)
    WHERE r.id = u.id AND r.attempt = u.attempt AND r.state = 'dispatching'
    RETURNING r.id
    """
).bindparams(sa.bindparam("now", type_=_TS))


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
    current = (
        await conn.execute(sa.select(runs.c.errors).where(runs.c.id == run.id, runs.c.attempt == run.attempt))
    ).first()
    if current is None:
        return False
    errors = [*(current[0] or []), _error_json(error)]
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


async def release_leases(conn: AsyncConnection, lease_owner: str, held: Iterable[tuple[str, int]], now: datetime) -> None:
    """Give up leases at shutdown: expired at once, so any replica takes the runs over."""
    for run_id, attempt in held:
        await conn.execute(
            _fenced(run_id, attempt).where(runs.c.lease_owner == lease_owner).values(lease_expires_at=now)
        )


async def list_runs(
    conn: AsyncConnection, owner_id: str, job_id: str, after: tuple[datetime, str] | None, limit: int
) -> list[JobRun]:
    """A job's runs, newest slot first."""
    query = sa.select(runs).where(runs.c.owner_id == owner_id, runs.c.job_id == job_id)
    if after is not None:
        query = query.where(sa.tuple_(runs.c.scheduled_slot, runs.c.id) < sa.tuple_(*after))
    query = query.order_by(runs.c.scheduled_slot.desc(), runs.c.id.desc()).limit(limit)
    return [run_from_row(r) for r in await conn.execute(query)]


async def jobs_by_id(conn: AsyncConnection, job_ids: Iterable[str]) -> dict[str, Job]:
    ids = list(set(job_ids))
    found: dict[str, Job] = {}
    for start in range(0, len(ids), _CHUNK):
        query = sa.select(jobs).where(jobs.c.id.in_(ids[start : start + _CHUNK]))
        for row in await conn.execute(query):
            job = job_from_row(row)
            found[job.id] = job
    return found


def lease_until(now: datetime, seconds: float) -> datetime:
    return now + timedelta(seconds=seconds)
