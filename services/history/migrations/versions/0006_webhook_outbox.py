"""webhook_outbox: the events of this service's changes waiting for webhook delivery
(shared/outbox.py; issue 23)

Revision ID: 0006_webhook_outbox
Revises: 0005_deletions
"""

from __future__ import annotations

from alembic import op

from shared import outbox

revision = "0006_webhook_outbox"
down_revision = "0005_deletions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    outbox.create_table(op)


def downgrade() -> None:
    outbox.drop_table(op)
