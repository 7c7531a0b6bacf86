"""threads, messages and runs, with the indexes that serve the mask filters and the orders

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_TS = sa.DateTime(timezone=True)

# Written exactly as the store writes its predicates, so the planner matches the partial
# indexes (a bound parameter in place of the literal would not match).
IN_HISTORY = "(visibility_mask & 1) <> 0"
IN_CONTEXT = "(visibility_mask & 2) <> 0"


def _partial(name: str, columns: list[str], where: str) -> None:
    op.create_index(
        name, "messages", columns, postgresql_where=sa.text(where), sqlite_where=sa.text(where)
    )


def upgrade() -> None:
    op.create_table(
        "threads",
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("id", sa.String(200), nullable=False),
        sa.Column("runtime_mode", sa.String(16), nullable=False),
        sa.Column("create_time", _TS, nullable=False),
        sa.Column("update_time", _TS, nullable=False),
        sa.Column("message_count", sa.BigInteger, nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("owner_id", "id", name="pk_threads"),
        sa.CheckConstraint("runtime_mode IN ('chat', 'automation')", name="ck_threads_mode"),
    )
    op.create_index("ix_threads_recent", "threads", ["owner_id", "update_time", "id"])

    op.create_table(
        "messages",
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("id", sa.String(200), nullable=False),
        sa.Column("thread_id", sa.String(200), nullable=False),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("run_id", sa.String(200), nullable=False, server_default=""),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("visibility_mask", sa.Integer, nullable=False),
        sa.Column("name", sa.String(200), nullable=False, server_default=""),
        sa.Column("content", _JSON, nullable=False),
        sa.Column("metadata", _JSON, nullable=False),
        # Copies of metadata fields that audit filters on (metadata stays the full record).
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("executor", sa.String(16), nullable=False, server_default=""),
        sa.Column("execution_profile_name", sa.String(100), nullable=False, server_default=""),
        sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("finished_reason", sa.String(64), nullable=False, server_default=""),
        sa.Column("created_at", _TS, nullable=False),
        # The message as served (a serialized agentmesh.type.v1.Message). Messages never
        # change after they are stored, so history and context pages are answered from it
        # without rebuilding every message field by field (the JSON columns stay the record).
        sa.Column("message_pb", sa.LargeBinary, nullable=False),
        sa.PrimaryKeyConstraint("owner_id", "id", name="pk_messages"),
        sa.ForeignKeyConstraint(
            ["owner_id", "thread_id"], ["threads.owner_id", "threads.id"], name="fk_messages_thread"
        ),
        sa.UniqueConstraint("owner_id", "thread_id", "position", name="uq_messages_position"),
    )
    _partial("ix_messages_history", ["owner_id", "thread_id", "position"], IN_HISTORY)
    _partial("ix_messages_context", ["owner_id", "thread_id", "position"], IN_CONTEXT)
    _partial(
        "ix_messages_context_owner", ["owner_id", "created_at", "thread_id", "position"], IN_CONTEXT
    )
    op.create_index(
        "ix_messages_audit", "messages", ["owner_id", "created_at", "thread_id", "position"]
    )
    op.create_index(
        "ix_messages_audit_profile",
        "messages",
        ["owner_id", "execution_profile_name", "created_at"],
    )

    op.create_table(
        "runs",
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("id", sa.String(200), nullable=False),
        sa.Column("thread_id", sa.String(200), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("profile", _JSON, nullable=False),
        sa.Column("profile_name", sa.String(100), nullable=False),
        sa.Column("create_time", _TS, nullable=False),
        sa.Column("start_time", _TS, nullable=True),
        sa.Column("finish_time", _TS, nullable=True),
        sa.Column("error_code", sa.String(100), nullable=False, server_default=""),
        sa.Column("error_message", sa.Text, nullable=False, server_default=""),
        sa.PrimaryKeyConstraint("owner_id", "id", name="pk_runs"),
        sa.ForeignKeyConstraint(
            ["owner_id", "thread_id"], ["threads.owner_id", "threads.id"], name="fk_runs_thread"
        ),
    )
    op.create_index("ix_runs_thread", "runs", ["owner_id", "thread_id", "create_time"])


def downgrade() -> None:
    op.drop_table("runs")
    op.drop_table("messages")
    op.drop_table("threads")
