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
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from services.scheduler.core import (
    CatchUpPolicy,
    ClaimPlan,
    Job,
    JobConfig,
    JobRun,
    JobSpec,
    JobStatus,
    Position,
    RunError,
    RunState,
    RunTrigger,
    new_id,
)
from services.scheduler.schedule import Schedule, ScheduleType
from shared import outbox
from shared.profiles import ExecutionProfile, parse_profile


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

# The webhook events of job runs ending (job_run.succeeded / job_run.failed), written in the
# transaction that records the end (services/scheduler/dispatch.py).
webhook_outbox = outbox.table(metadata)


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
        "scheduledSlot": run.scheduled_slot.isoformat().replace("+00:00", "Z"),
        "attempt": run.attempt,
        "finishTime": now.isoformat().replace("+00:00", "Z"),
    }
    if orchestrator_run_id:
        data["runId"] = orchestrator_run_id
    if error:
        data["error"] = error[:1000]
    kind = "job_run.failed" if failed else "job_run.succeeded"
    return outbox.new_event(run.owner_id, kind, data, int(now.timestamp() * 1000))

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



async def delete_owner_data(conn: AsyncConnection, owner_id: str) -> dict[str, int]:
    """Delete every job and job run of the owner; how many of each went."""
    gone_runs = await conn.execute(runs.delete().where(runs.c.owner_id == owner_id))
    gone_jobs = await conn.execute(jobs.delete().where(jobs.c.owner_id == owner_id))
    return {
        "job_runs": int(gone_runs.rowcount or 0),
        "jobs": int(gone_jobs.rowcount or 0),
        "webhookEvents": await outbox.delete_owner(conn, webhook_outbox, owner_id),
    }

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


@dataclass(frozen=True)
class DueJobs:
    """Due jobs at one claim position, locked for this claim (on PostgreSQL), column by column."""

    position: Position
    ids: Sequence[str]
    versions: Sequence[int]
    next_run_ats: Sequence[datetime | None]
    # PostgreSQL: each locked row's ctid, so the claim's update finds it by address (stable
    # while this transaction holds the row lock). Empty on SQLite.
    rows: Sequence[str] = ()


# The claim reads only what plans a slot, and PostgreSQL groups the locked rows by position:
# a batch of every owner's daily 10:00 job comes back as one row of arrays, so nothing per job
# is converted in Python but its id, version, next_run_at and row address. `now()` comes
# back too, so the clock costs no round trip of its own (the transaction's start, as before).
_LOCK_DUE_PG = sa.text(
    """
    WITH due AS MATERIALIZED (
        SELECT ctid, id, version, next_run_at, schedule_type, run_at, local_time, weekday, cron,
               timezone, catch_up_policy, jitter_seconds, next_slot, last_slot
        FROM automation_jobs
        WHERE status = 'active' AND next_run_at <= coalesce(CAST(:now AS timestamptz), now())
        ORDER BY next_run_at
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    SELECT coalesce(CAST(:now AS timestamptz), now()), schedule_type, run_at, local_time,
           weekday, cron, timezone, catch_up_policy, jitter_seconds, next_slot, last_slot,
           array_agg(id), array_agg(version), array_agg(next_run_at), array_agg(CAST(ctid AS text))
    FROM due
    GROUP BY schedule_type, run_at, local_time, weekday, cron, timezone, catch_up_policy,
             jitter_seconds, next_slot, last_slot
    """
).bindparams(sa.bindparam("now", type_=_TS))


@functools.lru_cache(maxsize=4096)
def _position(
    schedule_type: str,
    run_at: datetime | None,
    local_time: str | None,
    weekday: int | None,
    cron: str | None,
    timezone: str,
    catch_up_policy: str,
    jitter_seconds: int,
    next_slot: datetime | None,
    last_slot: datetime | None,
) -> Position:
    schedule = Schedule(
        ScheduleType(schedule_type), run_at=run_at, local_time=local_time or "", weekday=weekday or 0, cron=cron or ""
    )
    return Position(schedule, timezone, CatchUpPolicy(catch_up_policy), jitter_seconds, next_slot, last_slot)


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


async def lock_due(
    conn: AsyncConnection, now: datetime | None, limit: int
) -> tuple[datetime | None, list[DueJobs]]:
    """Active jobs with next_run_at <= now (None: the database's now), oldest first, grouped
    by position; on PostgreSQL locked for this transaction, skipping rows another replica
    holds. Returns the `now` used with the groups (None when nothing is due)."""
    if not _is_pg(conn):
        return await _lock_due_sqlite(conn, now if now is not None else await db_now(conn), limit)
    rows = (await conn.execute(_LOCK_DUE_PG, {"now": now, "limit": limit})).all()
    if not rows:
        return now, []
    groups = [
        DueJobs(
            _position(kind, _utc(run_at), local, weekday, cron, tz, policy, jitter, _utc(nxt), _utc(last)),
            ids,
            versions,
            next_run_ats,
            ctids,
        )
        for _, kind, run_at, local, weekday, cron, tz, policy, jitter, nxt, last, ids, versions, next_run_ats, ctids
        in rows
    ]
    return rows[0][0].astimezone(UTC), groups


_POSITION_COLUMNS = (
    jobs.c.schedule_type,
    jobs.c.run_at,
    jobs.c.local_time,
    jobs.c.weekday,
    jobs.c.cron,
    jobs.c.timezone,
    jobs.c.catch_up_policy,
    jobs.c.jitter_seconds,
    jobs.c.next_slot,
    jobs.c.last_slot,
)


async def _lock_due_sqlite(conn: AsyncConnection, now: datetime, limit: int) -> tuple[datetime, list[DueJobs]]:
    # No row locks: the write transaction (BEGIN IMMEDIATE) serialises claims, and each job is
    # still advanced with a compare-and-set.
    query = (
        sa.select(jobs.c.id, jobs.c.version, jobs.c.next_run_at, *_POSITION_COLUMNS)
        .where(sa.text(jobs.c.status.name + " = 'active'"), jobs.c.next_run_at <= now)
        .order_by(jobs.c.next_run_at)
        .limit(limit)
    )
    grouped: dict[Position, tuple[list[str], list[int], list[datetime | None]]] = {}
    for job_id, version, next_run_at, *position in await conn.execute(query):
        ids, versions, olds = grouped.setdefault(_position(*position), ([], [], []))
        ids.append(job_id)
        versions.append(version)
        olds.append(next_run_at)
    return now, [DueJobs(position, *columns) for position, columns in grouped.items()]


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


# One statement per batch, with no join whose cost depends on the planner's row estimates:
# each job is found by its row address (a TID scan; the id, version and old next_run_at are
# still compared), its plan's values are read by index from the plan arrays, and its runs
# are generated from its plan's range of the run arrays. Runs are recorded only for the jobs
# actually advanced; UNIQUE(job_id, scheduled_slot) turns a slot recorded before into
# nothing. The leased runs come back with what dispatch needs of their jobs, grouped by the
# job's spec, so config and profile are converted once per distinct spec, not once per run.
_RECORD_CLAIM_PG = sa.text(
    """
    WITH claimed AS (
        SELECT * FROM unnest(CAST(CAST(:rows AS text[]) AS tid[]), CAST(:ids AS text[]),
                             CAST(:versions AS bigint[]), CAST(:olds AS timestamptz[]),
                             CAST(:plan_of AS integer[]))
            AS c(row_id, id, version, old_next_run_at, n)
    ), advanced AS (
        UPDATE automation_jobs AS j
        SET next_slot = (CAST(:slots AS timestamptz[]))[c.n],
            next_run_at = (CAST(:runs AS timestamptz[]))[c.n],
            last_slot = (CAST(:lasts AS timestamptz[]))[c.n],
            status = CASE WHEN (CAST(:completed AS boolean[]))[c.n] THEN 'completed' ELSE 'active' END,
            last_run_at = CASE WHEN (CAST(:ran AS boolean[]))[c.n]
                               THEN CAST(:now AS timestamptz) ELSE j.last_run_at END
        FROM claimed AS c
        WHERE j.ctid = c.row_id AND j.id = c.id AND j.version = c.version
          AND j.next_run_at IS NOT DISTINCT FROM c.old_next_run_at
        RETURNING j.id, j.owner_id, c.n
    ), recorded AS (
        INSERT INTO job_runs (id, job_id, owner_id, scheduled_slot, trigger, state, attempt,
                              lease_owner, lease_expires_at, finish_time, errors, create_time)
        SELECT replace(CAST(gen_random_uuid() AS text), '-', ''), a.id, a.owner_id,
               (CAST(:run_slots AS timestamptz[]))[k], 'schedule',
               CASE WHEN m THEN 'missed' ELSE 'dispatching' END,
               CASE WHEN m THEN 0 ELSE 1 END,
               CASE WHEN NOT m THEN CAST(:lease_owner AS text) END,
               CASE WHEN NOT m THEN CAST(:lease AS timestamptz) END,
               CASE WHEN m THEN CAST(:now AS timestamptz) END,
               CAST('[]' AS jsonb), CAST(:now AS timestamptz)
        FROM advanced AS a
        CROSS JOIN LATERAL generate_series((CAST(:run_from AS integer[]))[a.n],
                                           (CAST(:run_to AS integer[]))[a.n]) AS k
        CROSS JOIN LATERAL (SELECT (CAST(:run_missed AS boolean[]))[k]) AS r(m)
        ON CONFLICT (job_id, scheduled_slot) DO NOTHING
        RETURNING id, job_id, scheduled_slot, state
    )
    SELECT c.advanced, c.missed, g.*
    FROM (SELECT (SELECT count(*) FROM advanced) AS advanced,
                 (SELECT count(*) FROM recorded WHERE state = 'missed') AS missed) AS c
    LEFT JOIN LATERAL (
        SELECT a.title, a.schedule_type, a.run_at, a.local_time, a.weekday, a.cron, a.timezone,
               CAST(a.config AS text), CAST(a.execution_profile AS text), a.catch_up_policy,
               a.jitter_seconds,
               array_agg(r.id), array_agg(r.scheduled_slot), array_agg(a.id), array_agg(a.owner_id),
               array_agg(a.status), array_agg(a.version), array_agg(a.create_time),
               array_agg(a.update_time), array_agg(a.next_slot), array_agg(a.next_run_at),
               array_agg(a.last_run_at), array_agg(a.last_slot), array_agg(a.default_key)
        FROM recorded AS r JOIN automation_jobs AS a ON a.id = r.job_id
        WHERE r.state = 'dispatching'
        GROUP BY a.title, a.schedule_type, a.run_at, a.local_time, a.weekday, a.cron, a.timezone,
                 a.config, a.execution_profile, a.catch_up_policy, a.jitter_seconds
    ) AS g ON true
    """
)


_JOB_STATUS = {s.value: s for s in JobStatus}


@functools.lru_cache(maxsize=1024)
def _spec(
    title: str,
    schedule_type: str,
    run_at: datetime | None,
    local_time: str | None,
    weekday: int | None,
    cron: str | None,
    timezone: str,
    config_json: str,
    profile_json: str,
    catch_up_policy: str,
    jitter_seconds: int,
) -> JobSpec:
    config = json.loads(config_json)
    return JobSpec(
        title=title,
        schedule=Schedule(
            ScheduleType(schedule_type),
            run_at=run_at,
            local_time=local_time or "",
            weekday=weekday or 0,
            cron=cron or "",
        ),
        timezone=timezone,
        config=JobConfig(prompt=config["prompt"], tools=tuple(config.get("tools", ()))),
        profile=_profile_from_json(profile_json),
        catch_up_policy=CatchUpPolicy(catch_up_policy),
        jitter_seconds=jitter_seconds,
    )


async def record_claim(
    conn: AsyncConnection, now: datetime, writes: ClaimWrites, lease_owner: str, lease_expires_at: datetime
) -> RecordedClaim:
    """Advance the claimed jobs and record their runs; only jobs whose compare-and-set
    succeeded get runs, and a slot already recorded is not recorded again."""
    if not writes.ids:
        return RecordedClaim(0, 0, [])
    if not _is_pg(conn):
        return await _record_claim_sqlite(conn, now, writes, lease_owner, lease_expires_at)
    rows = await conn.execute(
        _RECORD_CLAIM_PG,
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
    schedule_state, dispatching = RunTrigger.SCHEDULE, RunState.DISPATCHING
    for row in rows:
        advanced, missed, group = row[0], row[1], row[2:]
        if group[0] is None:
            break  # no run to dispatch (only the counts)
        spec = _spec(group[0], group[1], _utc(group[2]), *group[3:11])
        for run_id, slot, job_id, owner, status, version, created, updated, nxt, fire, last_run, last, key in zip(
            *group[11:], strict=True
        ):
            job = Job(
                id=job_id,
                owner_id=owner,
                spec=spec,
                status=_JOB_STATUS[status],
                version=version,
                create_time=created,
                update_time=updated,
                next_slot=nxt,
                next_run_at=fire,
                last_run_at=last_run,
                last_slot=last,
                default_key=key,
            )
            run = JobRun(
                id=run_id,
                job_id=job_id,
                owner_id=owner,
                scheduled_slot=slot,
                trigger=schedule_state,
                state=dispatching,
                attempt=1,
                create_time=now,
                lease_owner=lease_owner,
                lease_expires_at=lease_expires_at,
            )
            to_dispatch.append((run, job))
    return RecordedClaim(advanced, missed, to_dispatch)


async def _record_claim_sqlite(
    conn: AsyncConnection, now: datetime, writes: ClaimWrites, lease_owner: str, lease_expires_at: datetime
) -> RecordedClaim:
    advanced: dict[str, int] = {}  # job id -> its plan (0-based)
    for job_id, version, old, n in zip(writes.ids, writes.versions, writes.olds, writes.plan_of, strict=True):
        plan = n - 1
        result = await conn.execute(
            jobs.update()
            .where(jobs.c.id == job_id, jobs.c.version == version, jobs.c.next_run_at == old)
            .values(
                next_slot=writes.next_slots[plan],
                next_run_at=writes.next_run_ats[plan],
                last_slot=writes.last_slots[plan],
                status=(JobStatus.COMPLETED if writes.completed[plan] else JobStatus.ACTIVE).value,
                last_run_at=now if writes.ran[plan] else jobs.c.last_run_at,
            )
        )
        if result.rowcount == 1:
            advanced[job_id] = plan
    owners: dict[str, str] = {}
    if advanced:
        query = sa.select(jobs.c.id, jobs.c.owner_id).where(jobs.c.id.in_(advanced))
        owners = {job_id: owner for job_id, owner in await conn.execute(query)}
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
    found = await jobs_by_id(conn, (r.job_id for r in leased))
    missed = sum(1 for r in new_runs if r.id in inserted and r.state is RunState.MISSED)
    return RecordedClaim(len(advanced), missed, [(r, found[r.job_id]) for r in leased])


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
