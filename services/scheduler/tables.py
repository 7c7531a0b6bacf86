"""The scheduler's tables, automation_jobs and job_runs, as SQLAlchemy Core sees them (the
migrations under migrations/versions create them). Timestamps are aware UTC datetimes on
both backends; JSON columns are JSONB on PostgreSQL."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from shared import outbox
from shared.db import UtcDateTime

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TS = UtcDateTime()
metadata = sa.MetaData()

jobs = sa.Table(
    "automation_jobs",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("owner_id", sa.String(128)),
    sa.Column("title", sa.String(200)),
    sa.Column("schedule_type", sa.String(16)),
    sa.Column("run_at", TS),
    sa.Column("local_time", sa.String(5)),
    sa.Column("weekday", sa.SmallInteger),
    sa.Column("cron", sa.String(200)),
    sa.Column("timezone", sa.String(64)),
    sa.Column("status", sa.String(16)),
    sa.Column("config", JSON),
    sa.Column("execution_profile", JSON),
    sa.Column("catch_up_policy", sa.String(16)),
    sa.Column("jitter_seconds", sa.Integer),
    sa.Column("next_slot", TS),
    sa.Column("next_run_at", TS),
    sa.Column("last_run_at", TS),
    sa.Column("last_slot", TS),
    sa.Column("version", sa.BigInteger),
    sa.Column("request_id", sa.String(128)),
    sa.Column("default_key", sa.String(64)),
    sa.Column("create_time", TS),
    sa.Column("update_time", TS),
)

runs = sa.Table(
    "job_runs",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("job_id", sa.String(32)),
    sa.Column("owner_id", sa.String(128)),
    sa.Column("scheduled_slot", TS),
    sa.Column("trigger", sa.String(16)),
    sa.Column("state", sa.String(16)),
    sa.Column("attempt", sa.Integer),
    sa.Column("lease_owner", sa.String(64)),
    sa.Column("lease_expires_at", TS),
    sa.Column("next_attempt_at", TS),
    sa.Column("dispatched_at", TS),
    sa.Column("finish_time", TS),
    sa.Column("orchestrator_run_id", sa.String(64)),
    sa.Column("errors", JSON),
    sa.Column("create_time", TS),
)

# The webhook events of job runs ending (job_run.succeeded / job_run.failed), written in the
# transaction that records the end (services/scheduler/dispatch.py).
webhook_outbox = outbox.table(metadata)
