"""Webhook endpoints' health: the circuit breaker of each endpoint (an owner's or the
deployment's), shared by the gateway replicas (services/gateway/webhooks.py; issue 33)

Revision ID: 0003_webhook_endpoint_health
Revises: 0002_webhooks
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_webhook_endpoint_health"
down_revision = "0002_webhooks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhook_endpoint_health",
        # Owners' endpoint ids (whe_...) and the deployment's never collide.
        sa.Column("endpoint_id", sa.String(64), primary_key=True),
        # The endpoint's owner; empty for an endpoint of the deployment.
        sa.Column("endpoint_owner_id", sa.String(128), nullable=False),
        # Failed attempts in a row (0 after a success).
        sa.Column("consecutive_failures", sa.Integer, nullable=False),
        # Pauses in a row (each twice as long as the one before; 0 after a success).
        sa.Column("pauses", sa.Integer, nullable=False),
        # No delivery is sent to the endpoint before this time.
        sa.Column("paused_until_ms", sa.BigInteger, nullable=True),
        sa.Column("last_error", sa.Text, nullable=False),
        sa.Column("last_failure_ms", sa.BigInteger, nullable=True),
    )
    op.create_index(
        "ix_webhook_endpoint_health_owner", "webhook_endpoint_health", ["endpoint_owner_id"]
    )


def downgrade() -> None:
    op.drop_table("webhook_endpoint_health")
