"""automation_jobs.execution_profile: every existing job gets the automation_memory_default
snapshot (seed 001 §12 step 3), then the column is NOT NULL

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

# The snapshot as it is today, written out: a migration must not change when the code does.
AUTOMATION_MEMORY_DEFAULT = {
    "name": "automation_memory_default",
    "enable_router": False,
    "executor": "memory",
    "tool_policy": {"mode": "intersection", "allowlist": ["memory_write", "memory_forget"]},
    "history_policy": {"window": "today_yesterday"},
}


def upgrade() -> None:
    op.add_column("automation_jobs", sa.Column("execution_profile", _JSON, nullable=True))
    jobs = sa.table("automation_jobs", sa.column("execution_profile", _JSON))
    op.execute(
        jobs.update()
        .where(jobs.c.execution_profile.is_(None))
        .values(execution_profile=AUTOMATION_MEMORY_DEFAULT)
    )
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column("automation_jobs", "execution_profile", nullable=False)
    # SQLite cannot add NOT NULL in place, and recreating the table would cascade-delete
    # job_runs (foreign keys are on); there the store is what never writes a NULL.


def downgrade() -> None:
    op.drop_column("automation_jobs", "execution_profile")
