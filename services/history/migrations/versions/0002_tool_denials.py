"""tool_denials: audit records of refused tool calls (seed 001 §7.3, §11)

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tool_denials",
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("tool_call_id", sa.String(200), nullable=False),
        sa.Column("thread_id", sa.String(200), nullable=False),
        sa.Column("tool_name", sa.String(200), nullable=False),
        # sha256 hex of the arguments; the arguments themselves are never stored.
        sa.Column("arguments_sha256", sa.String(64), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("executor", sa.String(16), nullable=False),
        sa.Column("execution_profile_name", sa.String(100), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        # A retried FinishRun stores each denial once.
        sa.PrimaryKeyConstraint("owner_id", "run_id", "tool_call_id", name="pk_tool_denials"),
        sa.ForeignKeyConstraint(
            ["owner_id", "run_id"], ["runs.owner_id", "runs.id"], name="fk_tool_denials_run"
        ),
        sa.CheckConstraint(
            "reason IN ('not_declared', 'not_in_profile', 'not_registered')",
            name="ck_tool_denials_reason",
        ),
    )
    op.create_index(
        "ix_tool_denials_audit",
        "tool_denials",
        ["owner_id", "created_at", "run_id", "tool_call_id"],
    )


def downgrade() -> None:
    op.drop_table("tool_denials")
