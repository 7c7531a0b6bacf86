"""The memory service's owner data (shared/owner_data.py): every table with an owner column,
in deletion order (vectors before what they index, the vector stamps after the embeddings
whose triggers write them)."""

from __future__ import annotations

from services.memory import tables
from shared.owner_data import OwnedTable, Registry

_VECTORS = "vectors computed from the exported content (rebuilt by the embedding model)"

REGISTRY = Registry(
    "memory",
    tables=(
        OwnedTable(tables.memory_embeddings, derived=_VECTORS),
        # search_text is the full-text input computed from content.
        OwnedTable(tables.memories, omit=("search_text",)),
        OwnedTable(
            tables.memory_vector_stamps,
            derived="a counter of embedding changes (SQLite's in-process vector cache)",
            sqlite_only=True,
        ),
        # The change feed: it holds replaced and forgotten content.
        OwnedTable(tables.changes, label="memoryChanges"),
        OwnedTable(tables.watermarks),
        OwnedTable(tables.conversation_embeddings, derived=_VECTORS),
        OwnedTable(
            tables.conversation_messages,
            label="conversationMessages",
            derived="the recall index's copies of history's messages (exported by history)",
        ),
        OwnedTable(tables.conversation_deletions),
        OwnedTable(tables.webhook_outbox, label="webhookEvents"),
    ),
    outbox=tables.webhook_outbox,
    sqlite_fts=("memories_fts", "conversation_fts"),
)
