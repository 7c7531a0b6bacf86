"""deletions: audit records of thread and owner deletions, and owner-deletion progress (issue 23)

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_deletions"
down_revision = "0004_owner_seq"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)
_JSON = sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "deletions",
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("thread_id", sa.String(200), nullable=False, server_default=""),
        sa.Column("state", sa.String(16), nullable=False),
        # The steps of an owner deletion, in order, with their progress and counts; a thread
        # deletion has one step ("history"). Counts and status codes only, never content.
        sa.Column("steps", _JSON, nullable=False),
        sa.Column("requested_by", sa.String(200), nullable=False),
        sa.Column("create_time", _TS, nullable=False),
        sa.Column("finish_time", _TS, nullable=True),
        sa.PrimaryKeyConstraint("owner_id", "id", name="pk_deletions"),
        sa.CheckConstraint("kind IN ('thread', 'owner', 'retention')", name="ck_deletions_kind"),
        sa.CheckConstraint("state IN ('running', 'succeeded')", name="ck_deletions_state"),
    )
    op.create_index("ix_deletions_owner", "deletions", ["owner_id", "create_time", "id"])
    # One running owner deletion per owner: two concurrent requests start one job.
    running_owner = sa.text("state = 'running' AND kind = 'owner'")
    op.create_index(
        "uq_deletions_running_owner",
        "deletions",
        ["owner_id"],
        unique=True,
        postgresql_where=running_owner,
        sqlite_where=running_owner,
    )
    op.create_index("ix_deletions_unfinished", "deletions", ["state", "kind", "create_time"])
    # An owner's runs of every thread, oldest first (the export).
    op.create_index("ix_runs_owner_create", "runs", ["owner_id", "create_time", "id"])
    # Threads the retention sweep picks: the oldest first.
    op.create_index("ix_threads_update_time", "threads", ["update_time"])


def downgrade() -> None:
    op.drop_index("ix_threads_update_time", "threads")
    op.drop_index("ix_runs_owner_create", "runs")
    op.drop_table("deletions")
