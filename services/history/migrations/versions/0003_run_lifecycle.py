"""runs: queue order, lease, cancel and rollback flags (issue 7)

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        # Order of the thread's runs (queued runs start in this order).
        batch.add_column(sa.Column("thread_seq", sa.BigInteger, nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.false())
        )
        batch.add_column(
            sa.Column("rolled_back", sa.Boolean, nullable=False, server_default=sa.false())
        )
        batch.add_column(
            sa.Column("lease_holder", sa.String(200), nullable=False, server_default="")
        )
        batch.add_column(sa.Column("lease_expire_time", _TS, nullable=True))
    op.create_index("ix_runs_lease", "runs", ["state", "lease_expire_time"])
    op.create_index("ix_runs_thread_seq", "runs", ["owner_id", "thread_id", "thread_seq"])
    # Runs left active by an orchestrator of the previous version have no lease: expire them
    # now, so the first sweep ends them instead of leaving their threads busy forever.
    op.execute(
        sa.text(
            "UPDATE runs SET lease_expire_time = create_time WHERE state IN ('queued', 'running')"
        )
    )


def downgrade() -> None:
    op.drop_index("ix_runs_thread_seq", "runs")
    op.drop_index("ix_runs_lease", "runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("lease_expire_time")
        batch.drop_column("lease_holder")
        batch.drop_column("rolled_back")
        batch.drop_column("cancel_requested")
        batch.drop_column("thread_seq")
