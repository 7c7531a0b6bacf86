"""Webhooks: owners' endpoints (with their signing secrets), deliveries (the delivery log),
and the deliverer's lease (services/gateway/webhooks.py; issue 23)

Revision ID: 0002_webhooks
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_webhooks"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("description", sa.String(200), nullable=False),
        # JSON list of event types; empty: every type.
        sa.Column("event_types", sa.Text, nullable=False),
        # whsec_<base64>: needed in clear to sign (HMAC); never returned after creation.
        sa.Column("secret", sa.String(100), nullable=False),
        sa.Column("create_time_ms", sa.BigInteger, nullable=False),
    )
    op.create_index(
        "ix_webhook_endpoints_owner", "webhook_endpoints", ["owner_id", "create_time_ms"]
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("endpoint_id", sa.String(64), nullable=False),
        # The endpoint's owner; empty for an endpoint of the deployment (admin only).
        sa.Column("endpoint_owner_id", sa.String(128), nullable=False),
        # The event's owner (whose change it tells).
        sa.Column("owner_id", sa.String(128), nullable=False),
        # The webhook-id: the same on every attempt and replay.
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("event_type", sa.String(32), nullable=False),
        # The exact body every attempt sends (and signs).
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        # pending | succeeded | failed
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("replays", sa.Integer, nullable=False),
        sa.Column("next_attempt_ms", sa.BigInteger, nullable=True),
        sa.Column("last_attempt_ms", sa.BigInteger, nullable=True),
        sa.Column("last_status_code", sa.Integer, nullable=True),
        sa.Column("last_error", sa.Text, nullable=False),
        sa.Column("create_time_ms", sa.BigInteger, nullable=False),
        sa.UniqueConstraint("endpoint_id", "event_id", name="uq_webhook_deliveries_event"),
    )
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries", ["state", "next_attempt_ms"])
    op.create_index(
        "ix_webhook_deliveries_endpoint_owner",
        "webhook_deliveries",
        ["endpoint_owner_id", "create_time_ms"],
    )
    op.create_index("ix_webhook_deliveries_owner", "webhook_deliveries", ["owner_id"])
    op.create_index("ix_webhook_deliveries_finished", "webhook_deliveries", ["last_attempt_ms"])
    op.create_table(
        "webhook_leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column("expire_time_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("webhook_leases")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_endpoints")
