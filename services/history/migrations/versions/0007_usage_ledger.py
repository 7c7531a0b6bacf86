"""usage_ledger, usage_totals: usage recorded once per finished run, kept when its thread is
deleted; an owner deletion keeps its sums per day (issue 33). The runs that ended before
this revision enter the ledger as their records hold them.

Revision ID: 0007_usage_ledger
Revises: 0006_webhook_outbox
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_usage_ledger"
down_revision = "0006_webhook_outbox"
branch_labels = None
depends_on = None


def _counts(*names: str) -> list[sa.Column[int]]:
    return [sa.Column(n, sa.BigInteger, nullable=False, server_default="0") for n in names]


def upgrade() -> None:
    op.create_table(
        "usage_ledger",
        sa.Column("owner_id", sa.String, nullable=False),
        sa.Column("run_id", sa.String, nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("origin", sa.String, nullable=False),
        sa.Column("state", sa.String, nullable=False),
        *_counts("input_tokens", "output_tokens"),
        sa.Column("usage_estimated", sa.Boolean, nullable=False, server_default=sa.false()),
        *_counts("duration_ms"),
        sa.Column("record_time", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner_id", "run_id"),
    )
    # An owner's days in a range (GET /usage, the tokens-per-day quota).
    op.create_index("usage_ledger_owner_day", "usage_ledger", ["owner_id", "day"])
    op.create_table(
        "usage_totals",
        sa.Column("owner_id", sa.String, nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        *_counts("runs", "failed_runs", "automation_runs", "input_tokens", "output_tokens"),
        sa.Column("usage_estimated", sa.Boolean, nullable=False, server_default=sa.false()),
        *_counts("duration_ms"),
        sa.PrimaryKeyConstraint("owner_id", "day"),
    )
    _backfill()


def _backfill() -> None:
    """The runs that ended before the ledger existed, as their records hold them."""
    if op.get_bind().dialect.name == "postgresql":
        day = "to_char(create_time AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
        ran = "COALESCE(round(extract(epoch FROM finish_time - start_time) * 1000), 0)::bigint"
        now = "now()"
    else:
        day = "substr(create_time, 1, 10)"
        ran = (
            "COALESCE(CAST(round((julianday(finish_time) - julianday(start_time)) * 86400000)"
            " AS INTEGER), 0)"
        )
        now = "strftime('%Y-%m-%d %H:%M:%f000', 'now')"
    op.execute(
        "INSERT INTO usage_ledger (owner_id, run_id, day, origin, state, input_tokens,"
        " output_tokens, usage_estimated, duration_ms, record_time)"
        f" SELECT owner_id, id, {day}, origin, state, input_tokens, output_tokens,"
        f" usage_estimated, {ran}, {now} FROM runs"
        " WHERE state NOT IN ('queued', 'running')"
    )


def downgrade() -> None:
    op.drop_table("usage_totals")
    op.drop_index("usage_ledger_owner_day", "usage_ledger")
    op.drop_table("usage_ledger")
