"""messages.owner_seq: each owner's messages numbered in the order their transactions
commit (issue 19: a memory job's watermark must not skip a message that commits late).

owner_sequences holds each owner's last number; the insert that takes numbers keeps that
row locked until commit. Messages stored before this revision have none (NULL): a memory
job reads them on its first run only.

Revision ID: 0004_owner_seq
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_owner_seq"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("owner_seq", sa.BigInteger, nullable=True))
    op.create_table(
        "owner_sequences",
        sa.Column("owner_id", sa.String(128), primary_key=True),
        sa.Column("last_seq", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("owner_sequences")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("owner_seq")
