"""memory_embeddings.cjk: the script (CJK or not, services.memory.centering.is_cjk_text) of
the content each vector was made from, kept beside the vector (issue 31: search latency).

The centered search reads every vector of the owner with its script. It read the script
from the memory's content (a join and a regular expression per row, every search); the
content can also move on before its new vector is stored, so the script kept with the
vector is the one that belongs to it. Existing rows are filled from their memory's content
(PostgreSQL: core.CJK_PATTERN; SQLite has no regular expressions: centering.is_cjk_text).

Revision ID: 0006_embedding_script
Revises: 0005_vector_stamps
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from services.memory.centering import is_cjk_text
from services.memory.core import CJK_PATTERN

revision = "0006_embedding_script"
down_revision = "0005_vector_stamps"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "memory_embeddings",
        sa.Column("cjk", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        bind.execute(
            sa.text(
                "UPDATE memory_embeddings e SET cjk = m.content ~ CAST(:cjk AS text) "
                "FROM memories m WHERE m.id = e.memory_id"
            ),
            {"cjk": CJK_PATTERN},
        )
        return
    rows = bind.execute(
        sa.text(
            "SELECT e.memory_id, m.content FROM memory_embeddings e "
            "JOIN memories m ON m.id = e.memory_id"
        )
    ).all()
    cjk = [{"id": r.memory_id} for r in rows if is_cjk_text(r.content)]
    if cjk:
        bind.execute(sa.text("UPDATE memory_embeddings SET cjk = 1 WHERE memory_id = :id"), cjk)


def downgrade() -> None:
    op.drop_column("memory_embeddings", "cjk")
