"""Hybrid search: a lexical index over search tokens (Chinese as character bigrams), and
memory embeddings for the vector half.

memories.search_text is core.search_text(content) (the tokens, space-separated), written
with the content. PostgreSQL: a stored tsvector of it under a GIN index; SQLite: the FTS5
table now indexes search_text instead of content.

memory_embeddings: one row per memory, the vector of its content by `model`, for the
memory's `memory_version` (a stale version or another model is re-embedded by the
service's background embedder). PostgreSQL keeps it as a pgvector `vector` (the extension
is created in schema public; its HNSW index is per dimension and is made by the service at
start, once it knows the configured model's dimensions); SQLite as float32 bytes, searched
by an exact scan of the owner's vectors. Deleting a memory deletes its embedding (foreign
key, ON DELETE CASCADE; SQLite runs with foreign_keys=ON).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from services.memory import core

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_BATCH = 1000


def upgrade() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    op.add_column(
        "memories", sa.Column("search_text", sa.Text(), nullable=False, server_default="")
    )
    _backfill(bind)
    if postgres:
        op.execute("DROP INDEX IF EXISTS ix_memories_content_fts")
        op.execute(
            "ALTER TABLE memories ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS "
            "(to_tsvector('simple'::regconfig, search_text)) STORED"
        )
        op.execute("CREATE INDEX ix_memories_search_tsv ON memories USING gin (search_tsv)")
        # One migrating service at a time creates the extension (the schemas of many test
        # runs or services share the database, and CREATE EXTENSION races itself).
        op.execute("SELECT pg_advisory_xact_lock(hashtext('agentmesh:extension:vector'))")
        available = bind.execute(
            sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        ).first()
        if available is None:
            raise RuntimeError(
                "PostgreSQL has no pgvector extension: install it on the database server "
                "(Debian: tools/install_pgvector.sh; see deploy/README.md)"
            )
        op.execute("CREATE EXTENSION IF NOT EXISTS vector WITH SCHEMA public")
        # Made text here, then pgvector's type below (SQLAlchemy has no type for it).
        embedding_type: sa.types.TypeEngine[Any] = sa.Text()
    else:
        _drop_sqlite_fts()
        _sqlite_fts("search_text")
        embedding_type = sa.LargeBinary()

    op.create_table(
        "memory_embeddings",
        sa.Column(
            "memory_id",
            sa.String(36),
            sa.ForeignKey("memories.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("dimensions", sa.Integer(), nullable=False),
        sa.Column("memory_version", sa.BigInteger(), nullable=False),
        sa.Column("content_digest", sa.String(64), nullable=False),
        sa.Column("embedding", embedding_type, nullable=False),
        sa.Column("update_time", sa.DateTime(timezone=True), nullable=False),
    )
    if postgres:
        op.execute(
            "ALTER TABLE memory_embeddings ALTER COLUMN embedding TYPE public.vector "
            "USING embedding::public.vector"
        )
    op.create_index("ix_memory_embeddings_owner_model", "memory_embeddings", ["owner_id", "model"])


def _drop_sqlite_fts() -> None:
    for trigger in ("memories_fts_au", "memories_fts_ad", "memories_fts_ai"):
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.execute("DROP TABLE IF EXISTS memories_fts")


def _sqlite_fts(column: str) -> None:
    """The FTS5 table over memories.`column`, its triggers, and its index of the rows."""
    op.execute(
        f"CREATE VIRTUAL TABLE memories_fts USING fts5({column}, content='memories', "
        "content_rowid='seq', tokenize='unicode61 remove_diacritics 2')"
    )
    op.execute(
        "CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN "
        f"INSERT INTO memories_fts(rowid, {column}) VALUES (new.seq, new.{column}); END"
    )
    op.execute(
        "CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN "
        f"INSERT INTO memories_fts(memories_fts, rowid, {column}) "
        f"VALUES ('delete', old.seq, old.{column}); END"
    )
    op.execute(
        f"CREATE TRIGGER memories_fts_au AFTER UPDATE OF {column} ON memories BEGIN "
        f"INSERT INTO memories_fts(memories_fts, rowid, {column}) "
        f"VALUES ('delete', old.seq, old.{column}); "
        f"INSERT INTO memories_fts(rowid, {column}) VALUES (new.seq, new.{column}); END"
    )
    op.execute("INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')")


def _backfill(bind: sa.Connection) -> None:
    memories = sa.table(
        "memories", sa.column("seq"), sa.column("content"), sa.column("search_text")
    )
    after = 0
    while True:
        rows = bind.execute(
            sa.select(memories.c.seq, memories.c.content)
            .where(memories.c.seq > after)
            .order_by(memories.c.seq)
            .limit(_BATCH)
        ).all()
        if not rows:
            return
        for row in rows:
            bind.execute(
                memories.update()
                .where(memories.c.seq == row.seq)
                .values(search_text=core.search_text(row.content))
            )
        after = rows[-1].seq


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.drop_table("memory_embeddings")
    if postgres:
        op.execute("DROP INDEX IF EXISTS ix_memories_search_tsv")
        op.execute("ALTER TABLE memories DROP COLUMN search_tsv")
        op.execute(
            "CREATE INDEX ix_memories_content_fts ON memories "
            "USING gin (to_tsvector('simple'::regconfig, content))"
        )
    else:
        _drop_sqlite_fts()
        _sqlite_fts("content")
    op.drop_column("memories", "search_text")
