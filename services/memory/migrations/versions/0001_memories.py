"""Memories (one row per owner and fact), their lexical index, and agent watermarks.

PostgreSQL: a GIN index on to_tsvector('simple', content) serves websearch_to_tsquery.
SQLite: an external-content FTS5 table over memories.content, kept in sync by triggers.
A fact's identity is (owner_id, content_hash), the SHA-256 of its normalised content key:
a B-tree entry of the key itself could exceed PostgreSQL's index row limit (2000 CJK
characters are 6000 bytes).

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
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "memories",
        # SQLite: INTEGER PRIMARY KEY is the rowid, which the FTS5 index points at (a rowid
        # without it may change on VACUUM and desynchronise the index).
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("id", sa.String(36), nullable=False, unique=True),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("content_key", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("source_run_id", sa.String(128), nullable=False, server_default=""),
        sa.Column("source_message_ids", sa.JSON(), nullable=False),
        sa.Column("create_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("update_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.UniqueConstraint("owner_id", "content_hash", name="uq_memories_owner_fact"),
    )
    op.create_index("ix_memories_owner_update", "memories", ["owner_id", "update_time", "id"])
    if postgres:
        op.execute(
            "CREATE INDEX ix_memories_content_fts ON memories "
            "USING gin (to_tsvector('simple'::regconfig, content))"
        )
    else:
        op.execute(
            "CREATE VIRTUAL TABLE memories_fts USING fts5("
            "content, content='memories', content_rowid='seq', "
            "tokenize='unicode61 remove_diacritics 2')"
        )
        op.execute(
            "CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN "
            "INSERT INTO memories_fts(rowid, content) VALUES (new.seq, new.content); END"
        )
        op.execute(
            "CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN "
            "INSERT INTO memories_fts(memories_fts, rowid, content) "
            "VALUES ('delete', old.seq, old.content); END"
        )
        op.execute(
            "CREATE TRIGGER memories_fts_au AFTER UPDATE OF content ON memories BEGIN "
            "INSERT INTO memories_fts(memories_fts, rowid, content) "
            "VALUES ('delete', old.seq, old.content); "
            "INSERT INTO memories_fts(rowid, content) VALUES (new.seq, new.content); END"
        )

    op.create_table(
        "watermarks",
        sa.Column("owner_id", sa.String(128), primary_key=True),
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("position", sa.Text(), nullable=False),
        sa.Column("position_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("update_time", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("watermarks")
    if op.get_bind().dialect.name != "postgresql":
        op.execute("DROP TRIGGER IF EXISTS memories_fts_au")
        op.execute("DROP TRIGGER IF EXISTS memories_fts_ad")
        op.execute("DROP TRIGGER IF EXISTS memories_fts_ai")
        op.execute("DROP TABLE IF EXISTS memories_fts")
    op.drop_table("memories")
