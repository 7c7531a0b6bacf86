"""The gateway's own tables: per-owner quota overrides, daily usage, API keys (issue #23)

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "owner_quotas",
        sa.Column("owner_id", sa.String(128), primary_key=True),
        # NULL: the deployment's default (AGENTMESH_QUOTA_*); 0: no limit.
        sa.Column("runs_per_minute", sa.BigInteger, nullable=True),
        sa.Column("concurrent_runs", sa.BigInteger, nullable=True),
        sa.Column("tokens_per_day", sa.BigInteger, nullable=True),
        sa.Column("update_time_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "usage_days",
        sa.Column("owner_id", sa.String(128), nullable=False),
        # The UTC day, YYYY-MM-DD.
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("runs", sa.BigInteger, nullable=False),
        sa.Column("failed_runs", sa.BigInteger, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("duration_ms", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("owner_id", "day", name="pk_usage_days"),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        # sha256 hex of the key's secret part; the key itself is shown once, never stored.
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("create_time_ms", sa.BigInteger, nullable=False),
        sa.Column("last_used_time_ms", sa.BigInteger, nullable=True),
        sa.Column("revoke_time_ms", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_api_keys_owner", "api_keys", ["owner_id", "create_time_ms"])


def downgrade() -> None:
    op.drop_table("api_keys")
    op.drop_table("usage_days")
    op.drop_table("owner_quotas")
