"""The scheduler store's named statements, per dialect (procrastinate's queries.sql, in
Python): each a constant with a line saying what it does. The claim, the run inserts and the
finish run thousands of rows a batch, so PostgreSQL gets hand-written statements that take
whole columns as arrays (one round trip a batch); SQLite, which has neither arrays nor row
locks, gets the same effect one row at a time inside its write transaction (BEGIN IMMEDIATE,
shared.db), each row still compared and set. Statements the two dialects share are built
where they are used, in services/scheduler/store.py.

Parameters are named (:now, :limit, ...); each statement's line names what it takes.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from services.scheduler.tables import TS, jobs, runs

_NOW = sa.bindparam("now", type_=TS)

# The state literals are written as the partial indexes' predicates (migrations 0001), so
# the planners use them.
_RUNS_TO_TAKE = (
    sa.select(runs)
    .where(
        sa.or_(
            sa.and_(sa.text("state = 'pending'"), runs.c.next_attempt_at <= _NOW),
            sa.and_(sa.text("state = 'dispatching'"), runs.c.lease_expires_at <= _NOW),
        )
    )
    .limit(sa.bindparam("limit"))
)

# --- PostgreSQL ---------------------------------------------------------------------------

# The database's clock: the transaction's start.
PG_NOW = sa.text("SELECT now()")

# Lock up to :limit active jobs due at :now (NULL: the database's now()), oldest first,
# skipping rows another replica holds; one row per claim position (now, the position's
# columns, then arrays of id, version, next_run_at, ctid). The claim reads only what plans a
# slot: a batch of every owner's daily 10:00 job comes back as one row of arrays, so nothing
# per job is converted in Python but its id, version, next_run_at and row address, and `now`
# costs no round trip of its own.
PG_LOCK_DUE = sa.text(
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
).bindparams(_NOW)

# Advance the locked jobs and record their runs, in one statement: per job (:rows ctid,
# :ids, :versions, :olds old next_run_at, :plan_of its 1-based plan), per plan (:slots,
# :runs, :lasts, :completed, :ran, :run_from, :run_to into the run arrays), per run
# (:run_slots, :run_missed), and :now, :lease_owner, :lease. Returns the counts (advanced,
# missed) with the leased runs and their jobs, one row per distinct job spec.
# No join whose cost depends on the planner's row estimates: each job is found by its row
# address (a TID scan; the id, version and old next_run_at are still compared), its plan's
# values are read by index from the plan arrays, and its runs are generated from its plan's
# range of the run arrays. Runs are recorded only for the jobs actually advanced;
# UNIQUE(job_id, scheduled_slot) turns a slot recorded before into nothing. Grouping by spec
# converts config and profile once per distinct spec, not once per run.
PG_RECORD_CLAIM = sa.text(
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
            status = CASE WHEN (CAST(:completed AS boolean[]))[c.n] THEN 'completed'
                          ELSE 'active' END,
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

# Insert runs given as columns (:ids, :job_ids, :owners, :slots, :triggers, :states,
# :attempts, :lease_owners, :leases, :finished; created at :now), skipping a
# (job_id, scheduled_slot) already recorded; the inserted ids.
PG_INSERT_RUNS = sa.text(
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
).bindparams(_NOW)

# Mark attempts (:ids, :attempts) SUCCEEDED with their :dispatched times and :orch run ids,
# finished at :now, each only while it is still that attempt, dispatching; the ids written.
PG_FINISH_RUNS = sa.text(
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
).bindparams(_NOW)

# Runs waiting for a (re)try or whose lease expired at :now, up to :limit, locked, skipping
# rows another replica holds.
PG_RUNS_TO_TAKE = _RUNS_TO_TAKE.with_for_update(skip_locked=True)

# --- SQLite -------------------------------------------------------------------------------

# The database's clock (text, naive UTC, to the millisecond).
SQLITE_NOW = sa.text("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")

# Up to :limit active jobs due at :now, oldest first: id, version, next_run_at and the
# columns of the job's claim position. No row locks: the write transaction serialises claims.
SQLITE_LOCK_DUE = (
    sa.select(
        jobs.c.id,
        jobs.c.version,
        jobs.c.next_run_at,
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
    .where(sa.text(jobs.c.status.name + " = 'active'"), jobs.c.next_run_at <= _NOW)
    .order_by(jobs.c.next_run_at)
    .limit(sa.bindparam("limit"))
)

# Advance one claimed job (:job_id) if it is still at :version and :old_next_run_at, to
# :next_slot, :next_run_at, :last_slot and :status; last_run_at becomes :ran_at unless NULL.
SQLITE_ADVANCE_JOB = (
    jobs.update()
    .where(
        jobs.c.id == sa.bindparam("job_id"),
        jobs.c.version == sa.bindparam("expected_version"),
        jobs.c.next_run_at.is_not_distinct_from(sa.bindparam("old_next_run_at", type_=TS)),
    )
    .values(
        next_slot=sa.bindparam("new_next_slot", type_=TS),
        next_run_at=sa.bindparam("new_next_run_at", type_=TS),
        last_slot=sa.bindparam("new_last_slot", type_=TS),
        status=sa.bindparam("new_status"),
        last_run_at=sa.func.coalesce(sa.bindparam("ran_at", type_=TS), jobs.c.last_run_at),
    )
)

# The owners of the jobs :ids (id, owner_id).
SQLITE_JOB_OWNERS = sa.select(jobs.c.id, jobs.c.owner_id).where(
    jobs.c.id.in_(sa.bindparam("ids", expanding=True))
)

# Insert runs (executemany: one parameter set of job_runs' columns per run), skipping a
# (job_id, scheduled_slot) already recorded; the inserted ids. SQLAlchemy batches it into
# multi-row INSERTs ("insertmanyvalues") from one cached compiled statement.
SQLITE_INSERT_RUNS = (
    sqlite.insert(runs)
    .on_conflict_do_nothing(index_elements=["job_id", "scheduled_slot"])
    .returning(runs.c.id)
)

# Mark one attempt (:run_id, :expected_attempt) SUCCEEDED, dispatched at :dispatched_at as
# orchestrator run :orch, finished at :now, only while it is still that attempt, dispatching.
SQLITE_FINISH_RUN = (
    runs.update()
    .where(
        runs.c.id == sa.bindparam("run_id"),
        runs.c.attempt == sa.bindparam("expected_attempt"),
        sa.text("state = 'dispatching'"),
    )
    .values(
        state="succeeded",
        lease_owner=None,
        lease_expires_at=None,
        dispatched_at=sa.bindparam("new_dispatched_at", type_=TS),
        finish_time=_NOW,
        orchestrator_run_id=sa.bindparam("orch"),
    )
)

# Runs waiting for a (re)try or whose lease expired at :now, up to :limit (no row locks).
SQLITE_RUNS_TO_TAKE = _RUNS_TO_TAKE
