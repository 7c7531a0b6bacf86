"""The conversation index in SQL (services/memory/conversation.py has its rules), searched as
services/memory/store.py searches memories: the same tokens in the same kind of full-text
index, the same vector half, fused by services.memory.core.

Every function takes the caller's connection (the caller owns the transaction); every
statement is filtered by the owner, except `expire` and `unembedded`, the background
sweeps across owners (their writes are scoped by row).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from services.memory import core
from services.memory.conversation import Message
from services.memory.store import _vector_text  # pgvector's text form, one writer of it
from services.memory.tables import (
    conversation_deletions,
    conversation_embeddings,
    conversation_messages,
)
from shared.db import is_postgres

_M = conversation_messages
_E = conversation_embeddings
_D = conversation_deletions
_COLUMNS = (_M.c.message_id, _M.c.thread_id, _M.c.role, _M.c.text, _M.c.create_time)
_SQL_COLUMNS = "m.message_id, m.thread_id, m.role, m.text, m.create_time"
_EXCLUDE: sa.BindParameter[str] = sa.bindparam("exclude", expanding=True, type_=sa.String(128))

# --- named statements ---------------------------------------------------------------------

# The owner's (:owner) messages matching the tsquery :query, best ts_rank first, then the
# newest, up to :limit, without those of :exclude.
_PG_LEXICAL = (
    sa.text(
        f"SELECT {_SQL_COLUMNS} FROM conversation_messages m, "
        "to_tsquery('simple'::regconfig, :query) q "
        "WHERE m.owner_id = :owner AND m.search_tsv @@ q AND m.message_id NOT IN :exclude "
        "ORDER BY ts_rank(m.search_tsv, q) DESC, m.create_time DESC, m.seq DESC LIMIT :limit"
    )
    .bindparams(_EXCLUDE)
    .columns(*_COLUMNS)
)

# The same over SQLite's FTS5 table, best bm25 first.
_SQLITE_LEXICAL = (
    sa.text(
        f"SELECT {_SQL_COLUMNS} FROM conversation_fts "
        "JOIN conversation_messages m ON m.seq = conversation_fts.rowid "
        "WHERE conversation_fts MATCH :query AND m.owner_id = :owner "
        "AND m.message_id NOT IN :exclude "
        "ORDER BY bm25(conversation_fts), m.create_time DESC, m.seq DESC LIMIT :limit"
    )
    .bindparams(_EXCLUDE)
    .columns(*_COLUMNS)
)

# The :limit messages of :owner nearest (cosine distance) to :vector (pgvector's text form)
# among those embedded by :model in :dims dimensions, without those of :exclude. An exact
# scan of the owner's rows (an owner's messages are thousands, not millions).
_PG_NEAREST = (
    sa.text(
        f"SELECT {_SQL_COLUMNS} FROM conversation_embeddings e "
        "JOIN conversation_messages m ON m.seq = e.message_seq "
        "WHERE e.owner_id = :owner AND e.model = :model AND e.dimensions = :dims "
        "AND m.message_id NOT IN :exclude "
        "ORDER BY e.embedding OPERATOR(public.<=>) CAST(CAST(:vector AS text) AS public.vector), "
        "m.seq LIMIT :limit"
    )
    .bindparams(_EXCLUDE)
    .columns(*_COLUMNS)
)

# Store a message's embedding (:embedding, pgvector's text form), unless it has one.
_PG_PUT_EMBEDDING = sa.text(
    "INSERT INTO conversation_embeddings (message_seq, owner_id, model, dimensions, embedding) "
    "VALUES (:message_seq, :owner_id, :model, :dimensions, "
    "CAST(CAST(:embedding AS text) AS public.vector)) "
    "ON CONFLICT (message_seq) DO UPDATE SET model = excluded.model, "
    "dimensions = excluded.dimensions, embedding = excluded.embedding"
)


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _message(row: Any) -> Message:
    return Message(row.message_id, row.thread_id, row.role, row.text, _utc(row.create_time))


async def index(
    conn: AsyncConnection, owner: str, messages: Sequence[Message], now: datetime
) -> int:
    """Adds the owner's messages to the index; how many were new (a message already there
    keeps its row: history's messages do not change once kept)."""
    messages = await _not_deleted(conn, owner, messages)
    if not messages:
        return 0
    insert = postgresql.insert if is_postgres(conn) else sqlite.insert
    stmt = (
        insert(_M)
        .values(
            [
                {
                    "owner_id": owner,
                    "message_id": m.id,
                    "thread_id": m.thread_id,
                    "role": m.role,
                    "text": m.text,
                    "search_text": core.search_text(m.text),
                    "create_time": m.create_time,
                    "index_time": now,
                }
                for m in messages
            ]
        )
        .on_conflict_do_nothing(index_elements=["owner_id", "message_id"])
        .returning(_M.c.seq)
    )
    return len((await conn.execute(stmt)).all())


async def _not_deleted(
    conn: AsyncConnection, owner: str, messages: Sequence[Message]
) -> list[Message]:
    """`messages` without those written before their thread was deleted (delete_thread)."""
    threads = sorted({m.thread_id for m in messages})
    rows = (
        await conn.execute(
            sa.select(_D.c.thread_id, _D.c.delete_time).where(
                _D.c.owner_id == owner, _D.c.thread_id.in_(threads)
            )
        )
    ).all()
    deleted = {r.thread_id: _utc(r.delete_time) for r in rows}
    return [
        m for m in messages if m.thread_id not in deleted or m.create_time > deleted[m.thread_id]
    ]


async def has_messages(conn: AsyncConnection, owner: str) -> bool:
    """Whether the owner has an indexed message (one probe of the owner's index)."""
    probe = sa.select(sa.exists().where(_M.c.owner_id == owner))
    return bool((await conn.execute(probe)).scalar())


async def search(
    conn: AsyncConnection,
    owner: str,
    query: str,
    limit: int,
    exclude: Sequence[str] = (),
    *,
    embedding: Sequence[float] | None = None,
    model: str = "",
) -> list[Message]:
    """The owner's indexed messages best matching `query`, best first, each with its score,
    ranked as store.search ranks memories; none of `exclude`."""
    if not await has_messages(conn, owner):
        return []
    tokens = core.query_tokens(query)
    groups = core.lexical_groups(tokens, with_vectors=embedding is not None)
    found = await _lexical(conn, owner, groups, limit, exclude)
    nearest = None
    if embedding is not None:
        nearest = await _nearest(conn, owner, embedding, model, limit, exclude)
    ranked = core.fused(
        core.rankings(tokens, found, nearest, lambda m: m.text), limit, query, lambda m: m.text
    )
    return [Message(m.id, m.thread_id, m.role, m.text, m.create_time, score) for m, score in ranked]


async def _lexical(
    conn: AsyncConnection,
    owner: str,
    groups: Sequence[Sequence[str]],
    limit: int,
    exclude: Sequence[str],
) -> list[Message]:
    if not groups:
        return []
    # Tokens are runs of letters and digits (core.query_tokens), quoted all the same: user
    # text never reaches either query syntax as operators (as store._lexical).
    if is_postgres(conn):
        sql = _PG_LEXICAL
        query = " | ".join("(" + " & ".join(f"'{t}'" for t in g) + ")" for g in groups)
    else:
        sql = _SQLITE_LEXICAL
        query = " OR ".join("(" + " AND ".join(f'"{t}"' for t in g) + ")" for g in groups)
    params = {"query": query, "owner": owner, "limit": limit, "exclude": list(exclude)}
    return [_message(r) for r in (await conn.execute(sql, params)).all()]


async def _nearest(
    conn: AsyncConnection,
    owner: str,
    embedding: Sequence[float],
    model: str,
    limit: int,
    exclude: Sequence[str],
) -> list[Message]:
    dims = len(embedding)
    if is_postgres(conn):
        params = {
            "owner": owner,
            "model": model,
            "dims": dims,
            "vector": _vector_text(embedding),
            "limit": limit,
            "exclude": list(exclude),
        }
        return [_message(r) for r in (await conn.execute(_PG_NEAREST, params)).all()]
    stmt = (
        sa.select(*_COLUMNS, _E.c.embedding)
        .select_from(_E.join(_M, _M.c.seq == _E.c.message_seq))
        .where(
            _E.c.owner_id == owner,
            _E.c.model == model,
            _E.c.dimensions == dims,
            _M.c.message_id.not_in(list(exclude)),
        )
    )
    rows = (await conn.execute(stmt)).all()
    if not rows:
        return []
    import numpy as np  # lazily, as in store.py: only with an embedding model

    matrix = np.frombuffer(b"".join(r.embedding for r in rows), dtype="<f4")
    distances = 1.0 - matrix.reshape(len(rows), dims) @ np.asarray(embedding, dtype="<f4")
    best = np.argsort(distances, kind="stable")[:limit]
    return [_message(rows[i]) for i in best]


async def forget_thread(conn: AsyncConnection, owner: str, thread_id: str, now: datetime) -> int:
    """The thread was deleted: removes its indexed messages, and records when, so that an
    older message of it that arrives later is not indexed (a thread of the same id written
    afterwards is indexed as any other)."""
    insert = postgresql.insert if is_postgres(conn) else sqlite.insert
    stmt = insert(_D).values(owner_id=owner, thread_id=thread_id, delete_time=now)
    await conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["owner_id", "thread_id"], set_={"delete_time": now}
        )
    )
    return await delete_thread(conn, owner, thread_id)


async def delete_thread(conn: AsyncConnection, owner: str, thread_id: str) -> int:
    """Removes the owner's indexed messages of `thread_id` (their vectors with them)."""
    await _delete_embeddings(conn, _M.c.owner_id == owner, _M.c.thread_id == thread_id)
    gone = await conn.execute(
        _M.delete().where(_M.c.owner_id == owner, _M.c.thread_id == thread_id)
    )
    return int(gone.rowcount or 0)


async def delete_owner(conn: AsyncConnection, owner: str) -> int:
    """Removes every indexed message of the owner, with the vectors and the records of
    their deleted threads."""
    await conn.execute(_D.delete().where(_D.c.owner_id == owner))
    await conn.execute(_E.delete().where(_E.c.owner_id == owner))
    gone = await conn.execute(_M.delete().where(_M.c.owner_id == owner))
    return int(gone.rowcount or 0)


async def _delete_embeddings(conn: AsyncConnection, *where: Any) -> None:
    # The foreign key cascades on both databases; said explicitly so the vectors go even on
    # a SQLite connection opened without foreign_keys.
    rows = sa.select(_M.c.seq).where(*where)
    await conn.execute(_E.delete().where(_E.c.message_seq.in_(rows)))


async def expire(conn: AsyncConnection, cutoff: datetime, limit: int) -> int:
    """Removes the threads (of any owner) whose newest indexed message is older than
    `cutoff`, at most `limit` threads; how many messages went."""
    newest = sa.func.max(_M.c.create_time)
    threads = (
        await conn.execute(
            sa.select(_M.c.owner_id, _M.c.thread_id)
            .group_by(_M.c.owner_id, _M.c.thread_id)
            .having(newest < cutoff)
            .limit(limit)
        )
    ).all()
    gone = 0
    for owner, thread_id in threads:
        gone += await delete_thread(conn, owner, thread_id)
    return gone


async def unembedded(
    conn: AsyncConnection, model: str, dims: int, limit: int, after: int = 0
) -> list[tuple[int, str, str]]:
    """Messages (of any owner: the embedder's work list) numbered after `after` without a
    vector by `model` in `dims` dimensions, oldest first: (seq, owner, text)."""
    stmt = (
        sa.select(_M.c.seq, _M.c.owner_id, _M.c.text)
        .select_from(_M.outerjoin(_E, _E.c.message_seq == _M.c.seq))
        .where(
            _M.c.seq > after,
            sa.or_(_E.c.message_seq.is_(None), _E.c.model != model, _E.c.dimensions != dims),
        )
        .order_by(_M.c.seq)
        .limit(limit)
    )
    return [(r.seq, r.owner_id, r.text) for r in (await conn.execute(stmt)).all()]


async def put_embedding(
    conn: AsyncConnection, seq: int, owner: str, model: str, embedding: Sequence[float]
) -> None:
    """Stores message `seq`'s vector, unless the message was deleted meanwhile."""
    exists = sa.select(_M.c.seq).where(_M.c.owner_id == owner, _M.c.seq == seq)
    if (await conn.execute(exists)).one_or_none() is None:
        return
    values = {"message_seq": seq, "owner_id": owner, "model": model, "dimensions": len(embedding)}
    if is_postgres(conn):
        await conn.execute(_PG_PUT_EMBEDDING, {**values, "embedding": _vector_text(embedding)})
        return
    import numpy as np  # lazily, as in store.py

    stored = np.asarray(embedding, "<f4").tobytes()
    stmt = sqlite.insert(_E).values(**values, embedding=stored)
    await conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["message_seq"],
            set_={"model": model, "dimensions": len(embedding), "embedding": stored},
        )
    )
