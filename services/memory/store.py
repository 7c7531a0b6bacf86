"""Memories and watermarks in SQL (SQLAlchemy 2 Core, async; SQLite or PostgreSQL).

Every function takes the caller's connection (the caller owns the transaction) and the
owner id; every statement is filtered by that owner.
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from services.memory import core
from services.memory.core import Memory, MemoryWrite, Watermark
from shared.errors import Aborted, NotFound

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

_MEMORY_COLUMNS = [c for c in memories.c if c.name != "seq"]

_NOT_FOUND = "memory not found"


def utc_now() -> datetime:
    return datetime.now(UTC)


def _utc(value: datetime) -> datetime:
    # SQLite hands back naive datetimes; everything stored is UTC.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _postgres(conn: AsyncConnection) -> bool:
    return conn.dialect.name == "postgresql"


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _memory(row: Any) -> Memory:
    return Memory(
        id=row.id,
        owner_id=row.owner_id,
        content=row.content,
        content_key=row.content_key,
        kind=row.kind,
        source_run_id=row.source_run_id,
        source_message_ids=tuple(row.source_message_ids or ()),
        create_time=_utc(row.create_time),
        update_time=_utc(row.update_time),
        version=row.version,
    )


async def write(
    conn: AsyncConnection, owner: str, fact: MemoryWrite, now: datetime
) -> tuple[Memory, bool]:
    """Insert the fact or update the owner's existing memory of it; (memory, created).

    One INSERT .. ON CONFLICT DO UPDATE, so concurrent writes of one fact make one row
    on both dialects (no read-then-insert race)."""
    insert = postgresql.insert if _postgres(conn) else sqlite.insert
    stmt = insert(memories).values(
        id=str(uuid.uuid4()),
        owner_id=owner,
        content=fact.content,
        content_key=fact.content_key,
        content_hash=_hash(fact.content_key),
        kind=fact.kind or core.DEFAULT_KIND,
        source_run_id=fact.source_run_id or "",
        source_message_ids=list(fact.source_message_ids),
        create_time=now,
        update_time=now,
        version=1,
    )
    updates: dict[str, Any] = {
        # The latest wording of the fact wins (the key, and so the fact, is the same).
        "content": stmt.excluded.content,
        "update_time": stmt.excluded.update_time,
        "version": memories.c.version + 1,
    }
    if fact.kind is not None:
        updates["kind"] = stmt.excluded.kind
    if fact.source_run_id is not None:
        updates["source_run_id"] = stmt.excluded.source_run_id
    stmt = stmt.on_conflict_do_update(
        index_elements=["owner_id", "content_hash"], set_=updates
    ).returning(*_MEMORY_COLUMNS)
    memory = _memory((await conn.execute(stmt)).one())
    created = memory.version == 1
    if not created:
        # The upsert holds the row (PostgreSQL row lock; SQLite write lock) until commit,
        # so this read-merge-write of the sources cannot lose a concurrent writer's ids.
        merged = core.merge_sources(memory.source_message_ids, fact.source_message_ids)
        if merged != memory.source_message_ids:
            await conn.execute(
                memories.update()
                .where(memories.c.owner_id == owner, memories.c.id == memory.id)
                .values(source_message_ids=list(merged))
            )
            memory = dataclasses.replace(memory, source_message_ids=merged)
    return memory, created


async def get(conn: AsyncConnection, owner: str, memory_id: str) -> Memory:
    row = (
        await conn.execute(
            sa.select(*_MEMORY_COLUMNS).where(
                memories.c.owner_id == owner, memories.c.id == memory_id
            )
        )
    ).one_or_none()
    if row is None:
        raise NotFound(_NOT_FOUND)
    return _memory(row)


async def list_page(
    conn: AsyncConnection, owner: str, after: tuple[datetime, str] | None, limit: int
) -> list[Memory]:
    """The owner's memories, newest update first (ties by id), after the keyset `after`."""
    stmt = sa.select(*_MEMORY_COLUMNS).where(memories.c.owner_id == owner)
    if after is not None:
        # One row-value bound, so both databases start the index search at the position:
        # written as an OR of its two cases, it left owner_id as the only key, and each page
        # read every newer memory of the owner again before reaching its own.
        stmt = stmt.where(sa.tuple_(memories.c.update_time, memories.c.id) < after)
    stmt = stmt.order_by(memories.c.update_time.desc(), memories.c.id.desc()).limit(limit)
    return [_memory(r) for r in (await conn.execute(stmt)).all()]


async def forget_by_id(conn: AsyncConnection, owner: str, memory_id: str) -> list[str]:
    deleted = (
        await conn.execute(
            memories.delete()
            .where(memories.c.owner_id == owner, memories.c.id == memory_id)
            .returning(memories.c.id)
        )
    ).scalars().all()
    if not deleted:
        raise NotFound(_NOT_FOUND)
    return list(deleted)


async def forget_matching(conn: AsyncConnection, owner: str, query: str) -> list[str]:
    """Deletes the owner's memories that core.matches(query, content); their ids."""
    # Narrows to the rows the rule can match: equal key, or every term a substring of the
    # key (a whole word is a substring too); core.matches then decides exactly.
    same_fact = memories.c.content_hash == _hash(core.content_key(query))
    query_terms = core.terms(query)
    candidate = same_fact
    if query_terms:
        contained = [_contains(conn, memories.c.content_key, t) for t in query_terms]
        candidate = sa.or_(same_fact, sa.and_(*contained))
    candidates = sa.select(memories.c.id, memories.c.content).where(
        memories.c.owner_id == owner, candidate
    )
    rows = (await conn.execute(candidates)).all()
    ids = [r.id for r in rows if core.matches(query, r.content)]
    if not ids:
        return []
    deleted = (
        await conn.execute(
            memories.delete()
            .where(memories.c.owner_id == owner, memories.c.id.in_(ids))
            .returning(memories.c.id)
        )
    ).scalars().all()
    return sorted(deleted, key=ids.index)


def _contains(conn: AsyncConnection, column: Any, needle: str) -> Any:
    position = sa.func.strpos if _postgres(conn) else sa.func.instr
    return position(column, needle) > 0


async def search(conn: AsyncConnection, owner: str, query: str, limit: int) -> list[Memory]:
    """Full-text hits (ranked), combined with substring hits for CJK queries (which neither
    full-text tokenizer splits into words)."""
    fts = await _full_text(conn, owner, query, limit)
    query_terms = core.terms(query)
    substring: list[Memory] = []
    if any(core.is_cjk(t) for t in query_terms):
        stmt = (
            sa.select(*_MEMORY_COLUMNS)
            .where(
                memories.c.owner_id == owner,
                *(_contains(conn, memories.c.content_key, t) for t in query_terms),
            )
            .order_by(memories.c.update_time.desc(), memories.c.id.desc())
        )
        if all(core.is_cjk(t) for t in query_terms):
            # Every candidate matches already; otherwise core.matches filters the words.
            stmt = stmt.limit(limit)
        rows = (await conn.execute(stmt)).all()
        substring = [m for m in map(_memory, rows) if core.matches(query, m.content)]
    return core.rank_search_hits(fts, substring, limit)


async def _full_text(
    conn: AsyncConnection, owner: str, query: str, limit: int
) -> list[tuple[Memory, float]]:
    columns = ", ".join(f"m.{c.name}" for c in _MEMORY_COLUMNS)
    if _postgres(conn):
        sql = sa.text(
            f"SELECT {columns}, ts_rank(to_tsvector('simple'::regconfig, m.content), q) AS score "
            "FROM memories m, websearch_to_tsquery('simple'::regconfig, :query) q "
            "WHERE m.owner_id = :owner AND to_tsvector('simple'::regconfig, m.content) @@ q "
            "ORDER BY score DESC, m.update_time DESC, m.id DESC LIMIT :limit"
        )
        params: dict[str, Any] = {"query": query, "owner": owner, "limit": limit}
    else:
        query_terms = core.terms(query)
        if not query_terms:
            return []
        # Each term quoted: user text never reaches FTS5's query syntax as operators.
        match = " ".join(f'"{t}"' for t in query_terms)
        sql = sa.text(
            f"SELECT {columns}, -bm25(memories_fts) AS score "
            "FROM memories_fts JOIN memories m ON m.seq = memories_fts.rowid "
            "WHERE memories_fts MATCH :match AND m.owner_id = :owner "
            "ORDER BY score DESC, m.update_time DESC, m.id DESC LIMIT :limit"
        )
        params = {"match": match, "owner": owner, "limit": limit}
    sql = sql.columns(*_MEMORY_COLUMNS, sa.column("score", sa.Float))
    rows = (await conn.execute(sql, params)).all()
    return [(_memory(r), float(r.score)) for r in rows]


async def get_watermark(conn: AsyncConnection, owner: str, name: str) -> Watermark:
    row = (
        await conn.execute(
            sa.select(watermarks).where(watermarks.c.owner_id == owner, watermarks.c.name == name)
        )
    ).one_or_none()
    if row is None:
        return Watermark(name=name, position="", time=None, update_time=None)
    return _watermark(row)


def _watermark(row: Any) -> Watermark:
    return Watermark(
        name=row.name,
        position=row.position,
        time=None if row.position_time is None else _utc(row.position_time),
        update_time=_utc(row.update_time),
    )


async def advance_watermark(
    conn: AsyncConnection,
    owner: str,
    name: str,
    expected: str,
    position: str,
    time: datetime | None,
    now: datetime,
) -> Watermark:
    """Compare-and-set: ABORTED unless the watermark is still at `expected` ("" = none)."""
    values = {"position": position, "position_time": time, "update_time": now}
    stmt: Any
    if not expected:
        insert = postgresql.insert if _postgres(conn) else sqlite.insert
        stmt = (
            insert(watermarks)
            .values(owner_id=owner, name=name, **values)
            .on_conflict_do_nothing(index_elements=["owner_id", "name"])
        )
    else:
        stmt = (
            watermarks.update()
            .where(
                watermarks.c.owner_id == owner,
                watermarks.c.name == name,
                watermarks.c.position == expected,
            )
            .values(**values)
        )
    row = (await conn.execute(stmt.returning(*watermarks.c))).one_or_none()
    if row is None:
        raise Aborted(
            "the watermark is no longer at expected_position (another run advanced it)",
            reason="WATERMARK_MOVED",
        )
    return _watermark(row)



async def delete_owner_data(conn: AsyncConnection, owner: str) -> dict[str, int]:
    """Delete every memory and watermark of the owner; how many of each went."""
    gone = await conn.execute(memories.delete().where(memories.c.owner_id == owner))
    marks = await conn.execute(watermarks.delete().where(watermarks.c.owner_id == owner))
    return {"memories": int(gone.rowcount or 0), "watermarks": int(marks.rowcount or 0)}
