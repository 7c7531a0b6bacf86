"""Conversation recall: the owner's chat messages (those the visibility mask lets into a
model's context), indexed for search as memories are (services/memory/conversation.py).

conversation_messages: one row per (owner, history message id), its text and
core.search_text(text). PostgreSQL: a stored tsvector of search_text under a GIN index;
SQLite: an external-content FTS5 table over search_text kept by triggers (rows are inserted
and deleted, never rewritten). conversation_embeddings: a message's vector by `model`, as
memory_embeddings holds a memory's; deleting a message deletes its vector (foreign key,
ON DELETE CASCADE). conversation_deletions: when each deleted thread's messages were removed;
a message of that thread written before then is never indexed again (an IndexConversation
that arrives after the deletion, from a run that ended just before it).

Revision ID: 0004_conversation
Revises: 0003_webhook_outbox
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0004_conversation"
down_revision = "0003_webhook_outbox"
branch_labels = None
depends_on = None


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "conversation_messages",
        # SQLite: INTEGER PRIMARY KEY is the rowid the FTS5 index points at.
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("message_id", sa.String(128), nullable=False),
        sa.Column("thread_id", sa.String(128), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("search_text", sa.Text(), nullable=False),
        sa.Column("create_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("index_time", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("owner_id", "message_id", name="uq_conversation_owner_message"),
    )
    # A thread's deletion, and the retention sweep's newest message per thread.
    op.create_index(
        "ix_conversation_owner_thread_time",
        "conversation_messages",
        ["owner_id", "thread_id", "create_time"],
    )
    embedding_type: sa.types.TypeEngine[Any]
    if postgres:
        op.execute(
            "ALTER TABLE conversation_messages ADD COLUMN search_tsv tsvector GENERATED ALWAYS "
            "AS (to_tsvector('simple'::regconfig, search_text)) STORED"
        )
        op.execute(
            "CREATE INDEX ix_conversation_search_tsv ON conversation_messages "
            "USING gin (search_tsv)"
        )
        embedding_type = sa.Text()
    else:
        op.execute(
            "CREATE VIRTUAL TABLE conversation_fts USING fts5(search_text, "
            "content='conversation_messages', content_rowid='seq', "
            "tokenize='unicode61 remove_diacritics 2')"
        )
        op.execute(
            "CREATE TRIGGER conversation_fts_ai AFTER INSERT ON conversation_messages BEGIN "
            "INSERT INTO conversation_fts(rowid, search_text) "
            "VALUES (new.seq, new.search_text); END"
        )
        op.execute(
            "CREATE TRIGGER conversation_fts_ad AFTER DELETE ON conversation_messages BEGIN "
            "INSERT INTO conversation_fts(conversation_fts, rowid, search_text) "
            "VALUES ('delete', old.seq, old.search_text); END"
        )
        embedding_type = sa.LargeBinary()
    op.create_table(
        "conversation_embeddings",
        sa.Column(
            "message_seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            sa.ForeignKey("conversation_messages.seq", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("dimensions", sa.Integer(), nullable=False),
        sa.Column("embedding", embedding_type, nullable=False),
    )
    if postgres:
        op.execute(
            "ALTER TABLE conversation_embeddings ALTER COLUMN embedding TYPE public.vector "
            "USING embedding::public.vector"
        )
    op.create_index(
        "ix_conversation_embeddings_owner_model", "conversation_embeddings", ["owner_id", "model"]
    )

    op.create_table(
        "conversation_deletions",
        sa.Column("owner_id", sa.String(128), primary_key=True),
        sa.Column("thread_id", sa.String(128), primary_key=True),
        sa.Column("delete_time", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.drop_table("conversation_deletions")
    op.drop_table("conversation_embeddings")
    if not postgres:
        for trigger in ("conversation_fts_ad", "conversation_fts_ai"):
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        op.execute("DROP TABLE IF EXISTS conversation_fts")
    op.drop_table("conversation_messages")
