"""memory_vector_stamps (SQLite): per owner, a value every change to the owner's memory
embeddings replaces, so a process that keeps the owner's vectors in memory (the exact scan
of services/memory/vector_cache.py) sees any writer's change, another process's too, by
reading one row (issue 31: a search read all the owner's vectors from the file each time).

Triggers keep it, so no write path can forget it: an insert, a change of the vector (or
its model or dimensions) and a delete (the cascade of a memory's delete too) set a new
random value; the owner's last embedding deleted deletes the row (an owner's data deleted
leaves nothing behind). A random value, not a counter: a row deleted and made again never
repeats a value a process may still hold.

PostgreSQL searches its vectors in the database (the HNSW index) and caches nothing: no
table there.

Revision ID: 0005_vector_stamps
Revises: 0004_conversation
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_vector_stamps"
down_revision = "0004_conversation"
branch_labels = None
depends_on = None


def _new_stamp(owner: str) -> str:
    """The statements giving `owner` (a trigger's new./old. column) a new stamp. Not an
    INSERT OR REPLACE: an outer statement's conflict clause (the embedder's upsert)
    overrides a trigger's."""
    return (
        f"UPDATE memory_vector_stamps SET stamp = random() WHERE owner_id = {owner}; "
        f"INSERT INTO memory_vector_stamps (owner_id, stamp) SELECT {owner}, random() "
        f"WHERE NOT EXISTS (SELECT 1 FROM memory_vector_stamps WHERE owner_id = {owner});"
    )


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        return
    op.create_table(
        "memory_vector_stamps",
        sa.Column("owner_id", sa.String(128), primary_key=True),
        sa.Column("stamp", sa.BigInteger(), nullable=False),
    )
    op.execute(
        "INSERT INTO memory_vector_stamps (owner_id, stamp) "
        "SELECT owner_id, random() FROM (SELECT DISTINCT owner_id FROM memory_embeddings)"
    )
    op.execute(
        "CREATE TRIGGER memory_vector_stamps_ai AFTER INSERT ON memory_embeddings BEGIN "
        f"{_new_stamp('new.owner_id')} END"
    )
    # Not on a change of memory_version alone (the vector still holds: only the memory's
    # version moved, store.put_embedding).
    op.execute(
        "CREATE TRIGGER memory_vector_stamps_au "
        "AFTER UPDATE OF model, dimensions, embedding ON memory_embeddings BEGIN "
        f"{_new_stamp('new.owner_id')} END"
    )
    op.execute(
        "CREATE TRIGGER memory_vector_stamps_ad AFTER DELETE ON memory_embeddings BEGIN "
        "UPDATE memory_vector_stamps SET stamp = random() WHERE owner_id = old.owner_id; "
        "DELETE FROM memory_vector_stamps WHERE owner_id = old.owner_id "
        "AND NOT EXISTS (SELECT 1 FROM memory_embeddings WHERE owner_id = old.owner_id); END"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        return
    for trigger in (
        "memory_vector_stamps_ai",
        "memory_vector_stamps_au",
        "memory_vector_stamps_ad",
    ):
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.drop_table("memory_vector_stamps")
