"""interrupt_answers: the approvals each run answered, taken when it was admitted, so two
runs cannot both answer one (issue 33)

Revision ID: 0008_interrupt_answers
Revises: 0007_usage_ledger
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_interrupt_answers"
down_revision = "0007_usage_ledger"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "interrupt_answers",
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("thread_id", sa.String(200), nullable=False),
        # The tool call waiting for approval (the AG-UI interrupt's id).
        sa.Column("tool_call_id", sa.String(200), nullable=False),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        # One answer per waiting call of a thread, whatever the run.
        sa.PrimaryKeyConstraint(
            "owner_id", "thread_id", "tool_call_id", name="pk_interrupt_answers"
        ),
        # Deleted with its run (a thread's or an owner's deletion deletes the runs).
        sa.ForeignKeyConstraint(
            ["owner_id", "run_id"],
            ["runs.owner_id", "runs.id"],
            name="fk_interrupt_answers_run",
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    op.drop_table("interrupt_answers")
