"""webhook_outbox: the events of this service's changes waiting for webhook delivery
(shared/outbox.py; issue 23)

Revision ID: 0003_webhook_outbox
Revises: 0002_changes
"""

from __future__ import annotations

from alembic import op

from shared import outbox

revision = "0003_webhook_outbox"
down_revision = "0002_changes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    outbox.create_table(op)


def downgrade() -> None:
    outbox.drop_table(op)
