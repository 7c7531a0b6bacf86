"""runs: the usage their output messages recorded (issue 18)

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        for name in ("input_tokens", "output_tokens"):
            batch.add_column(sa.Column(name, sa.BigInteger, nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("usage_estimated", sa.Boolean, nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("usage_estimated")
        batch.drop_column("output_tokens")
        batch.drop_column("input_tokens")
