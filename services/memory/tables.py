"""The memory service's tables as SQLAlchemy Core sees them. The migrations under
migrations/versions create them, with what Core does not describe here: the full-text
indexes (PostgreSQL's tsvector, SQLite's FTS5 table and its triggers)."""

from __future__ import annotations

import sqlalchemy as sa

from shared import outbox

_meta = sa.MetaData()

memories = sa.Table(
    "memories",
    _meta,
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("id", sa.String(36), nullable=False),
    sa.Column("owner_id", sa.String(128), nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("content_key", sa.Text, nullable=False),
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("source_run_id", sa.String(128), nullable=False),
    sa.Column("source_message_ids", sa.JSON, nullable=False),
    sa.Column("create_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("update_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    # core.search_text(content): what the full-text indexes read (migration 0002).
    sa.Column("search_text", sa.Text, nullable=False),
)

memory_embeddings = sa.Table(
    "memory_embeddings",
    _meta,
    sa.Column("memory_id", sa.String(36), primary_key=True),
    sa.Column("owner_id", sa.String(128), nullable=False),
    sa.Column("model", sa.String(200), nullable=False),
    sa.Column("dimensions", sa.Integer, nullable=False),
    sa.Column("memory_version", sa.BigInteger, nullable=False),
    sa.Column("content_digest", sa.String(64), nullable=False),
    # pgvector `vector` on PostgreSQL (written and read as text here), float32 bytes on SQLite.
    sa.Column("embedding", sa.LargeBinary, nullable=False),
    sa.Column("update_time", sa.DateTime(timezone=True), nullable=False),
    # The script of the content the vector was made from (centering.is_cjk_text; 0006).
    sa.Column("cjk", sa.Boolean, nullable=False, server_default=sa.false()),
)

# SQLite only (migration 0005_vector_stamps, whose triggers keep it): a new value at every
# change of the owner's embeddings, what services/memory/vector_cache.py checks.
memory_vector_stamps = sa.Table(
    "memory_vector_stamps",
    _meta,
    sa.Column("owner_id", sa.String(128), primary_key=True),
    sa.Column("stamp", sa.BigInteger, nullable=False),
)

watermarks = sa.Table(
    "watermarks",
    _meta,
    sa.Column("owner_id", sa.String(128), primary_key=True),
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("position", sa.Text, nullable=False),
    sa.Column("position_time", sa.DateTime(timezone=True), nullable=True),
    sa.Column("update_time", sa.DateTime(timezone=True), nullable=False),
)

changes = sa.Table(
    "memory_changes",
    _meta,
    sa.Column("seq", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("owner_id", sa.String(128), nullable=False),
    sa.Column("action", sa.String(16), nullable=False),
    sa.Column("memory_id", sa.String(36), nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("previous_content", sa.Text, nullable=False),
    sa.Column("actor", sa.String(8), nullable=False),
    sa.Column("source_run_id", sa.String(128), nullable=False),
    sa.Column("source_message_ids", sa.JSON, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("create_time", sa.DateTime(timezone=True), nullable=False),
)

# What a Memory is read from (not the row number, not the full-text input).
# The webhook events of memory changes (memory.changed), written with their change records.
webhook_outbox = outbox.table(_meta)

MEMORY_COLUMNS = [c for c in memories.c if c.name not in ("seq", "search_text")]

# Conversation recall (services/memory/conversation.py; migration 0004_conversation, which
# also makes their full-text indexes).
conversation_messages = sa.Table(
    "conversation_messages",
    _meta,
    sa.Column("seq", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("owner_id", sa.String(128), nullable=False),
    sa.Column("message_id", sa.String(128), nullable=False),
    sa.Column("thread_id", sa.String(128), nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    # core.search_text(text): what the full-text indexes read.
    sa.Column("search_text", sa.Text, nullable=False),
    sa.Column("create_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("index_time", sa.DateTime(timezone=True), nullable=False),
)

conversation_embeddings = sa.Table(
    "conversation_embeddings",
    _meta,
    sa.Column("message_seq", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("owner_id", sa.String(128), nullable=False),
    sa.Column("model", sa.String(200), nullable=False),
    sa.Column("dimensions", sa.Integer, nullable=False),
    # pgvector `vector` on PostgreSQL (written and read as text), float32 bytes on SQLite.
    sa.Column("embedding", sa.LargeBinary, nullable=False),
)

# When a deleted thread's messages left the index: older messages of it are never indexed again.
conversation_deletions = sa.Table(
    "conversation_deletions",
    _meta,
    sa.Column("owner_id", sa.String(128), primary_key=True),
    sa.Column("thread_id", sa.String(128), primary_key=True),
    sa.Column("delete_time", sa.DateTime(timezone=True), nullable=False),
)
