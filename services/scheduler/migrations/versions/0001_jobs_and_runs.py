"""automation_jobs and job_runs (jobs in the shape before execution profiles, see 0002)

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_TS = sa.DateTime(timezone=True)

# Written exactly as the store writes its predicates, so the planner uses the partial indexes.
ACTIVE = "status = 'active'"
WAITING = "state = 'pending'"
LEASED = "state = 'dispatching'"


def upgrade() -> None:
    op.create_table(
        "automation_jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("schedule_type", sa.String(16), nullable=False),
        sa.Column("run_at", _TS, nullable=True),
        sa.Column("local_time", sa.String(5), nullable=True),
        sa.Column("weekday", sa.SmallInteger, nullable=True),
        sa.Column("cron", sa.String(200), nullable=True),
        sa.Column("timezone", sa.String(64), nullable=False, server_default="Asia/Shanghai"),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("config", _JSON, nullable=False),
        sa.Column("catch_up_policy", sa.String(16), nullable=False, server_default="latest"),
        sa.Column("jitter_seconds", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_slot", _TS, nullable=True),
        sa.Column("next_run_at", _TS, nullable=True),
        sa.Column("last_run_at", _TS, nullable=True),
        sa.Column("last_slot", _TS, nullable=True),
        sa.Column("version", sa.BigInteger, nullable=False, server_default="1"),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.Column("default_key", sa.String(64), nullable=True),
        sa.Column("create_time", _TS, nullable=False),
        sa.Column("update_time", _TS, nullable=False),
        sa.CheckConstraint(
            "schedule_type IN ('once', 'daily', 'weekly', 'cron')", name="ck_jobs_schedule_type"
        ),
        sa.CheckConstraint(
            "status IN ('active', 'paused', 'completed', 'failed')", name="ck_jobs_status"
        ),
        sa.CheckConstraint("catch_up_policy IN ('latest', 'skip', 'all')", name="ck_jobs_catch_up"),
        sa.UniqueConstraint("owner_id", "request_id", name="uq_jobs_request"),
        sa.UniqueConstraint("owner_id", "default_key", name="uq_jobs_default"),
    )
    op.create_index(
        "ix_jobs_due",
        "automation_jobs",
        ["next_run_at"],
        postgresql_where=sa.text(ACTIVE),
        sqlite_where=sa.text(ACTIVE),
    )
    op.create_index("ix_jobs_owner", "automation_jobs", ["owner_id", "create_time", "id"])

    op.create_table(
        "job_runs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "job_id",
            sa.String(32),
            sa.ForeignKey("automation_jobs.id", ondelete="CASCADE", name="fk_runs_job"),
            nullable=False,
        ),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("scheduled_slot", _TS, nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        # The fencing token: every lease takes attempt + 1; a write of an older attempt is refused.
        sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", _TS, nullable=True),
        sa.Column("next_attempt_at", _TS, nullable=True),
        sa.Column("dispatched_at", _TS, nullable=True),
        sa.Column("finish_time", _TS, nullable=True),
        sa.Column("orchestrator_run_id", sa.String(64), nullable=True),
        sa.Column("errors", _JSON, nullable=False),
        sa.Column("create_time", _TS, nullable=False),
        sa.UniqueConstraint("job_id", "scheduled_slot", name="uq_runs_slot"),
        sa.CheckConstraint(
            "state IN ('pending', 'dispatching', 'succeeded', 'failed', 'missed')",
            name="ck_runs_state",
        ),
        sa.CheckConstraint("trigger IN ('schedule', 'manual')", name="ck_runs_trigger"),
    )
    op.create_index(
        "ix_runs_waiting",
        "job_runs",
        ["next_attempt_at"],
        postgresql_where=sa.text(WAITING),
        sqlite_where=sa.text(WAITING),
    )
    op.create_index(
        "ix_runs_leased",
        "job_runs",
        ["lease_expires_at"],
        postgresql_where=sa.text(LEASED),
        sqlite_where=sa.text(LEASED),
    )


def downgrade() -> None:
    op.drop_table("job_runs")
    op.drop_table("automation_jobs")
