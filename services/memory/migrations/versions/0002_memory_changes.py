"""The change record of memories: every write, update and forget, by whom and why.

Revision ID: 0002_changes
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_changes"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_changes",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("memory_id", sa.String(36), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("previous_content", sa.Text, nullable=False),
        sa.Column("actor", sa.String(8), nullable=False),
        sa.Column("source_run_id", sa.String(128), nullable=False),
        sa.Column("source_message_ids", sa.JSON, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("create_time", sa.DateTime(timezone=True), nullable=False),
    )
    # ListMemoryChanges pages an owner's changes in order.
    op.create_index("memory_changes_owner_seq", "memory_changes", ["owner_id", "seq"])


def downgrade() -> None:
    op.drop_table("memory_changes")
