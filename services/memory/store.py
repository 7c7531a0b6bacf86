"""Memories, their embeddings and watermarks in SQL (SQLAlchemy 2 Core, async; SQLite or
PostgreSQL).

Every function takes the caller's connection (the caller owns the transaction) and the
owner id; every statement is filtered by that owner. The exception is `stale_embeddings`,
the background embedder's scan for work across owners (its writes are owner-scoped again).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import uuid
import weakref
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from services.memory import centering, core, queries
from services.memory.core import Memory, MemoryWrite, Watermark
from services.memory.tables import (
    MEMORY_COLUMNS,
    changes,
    memories,
    memory_embeddings,
    memory_vector_stamps,
    watermarks,
    webhook_outbox,
)
from services.memory.vector_cache import OwnerVectors, VectorCache
from shared import outbox
from shared.db import is_postgres
from shared.errors import Aborted, AlreadyExists, NotFound

# numpy (~12 MB of RSS) is imported where the SQLite vector search and the embedder's
# writes use it: only a deployment with embeddings configured reaches them (issue 24).

_NOT_FOUND = "memory not found"

# The HNSW graph (pgvector's defaults: m 16, ef_construction 64) and the candidates kept
# while searching (default 40). Measured at 100,000 memories of one owner
# (bench/memory_search.py, the vector query alone, a loaded 2-core machine), the share of
# questions whose fact was in the first 5: an exact scan 0.88; the default graph with ef 40
# 0.33, 100 0.53, 400 0.81 (p50 15 ms); this graph (m 24, ef_construction 128, built in
# 83 s) with ef 40 0.44 (2.6 ms), 100 0.65 (3.9 ms), 200 0.75 (6.5 ms). Its generated
# memories are tight clusters around a few hundred sentences, harder for the graph than
# real memories are likely to be.
HNSW_M = 24
HNSW_EF_CONSTRUCTION = 128
HNSW_EF_SEARCH = 200


def utc_now() -> datetime:
    return datetime.now(UTC)


def _utc(value: datetime) -> datetime:
    # SQLite hands back naive datetimes; everything stored is UTC.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


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
    insert = postgresql.insert if is_postgres(conn) else sqlite.insert
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
        search_text=core.search_text(fact.content),
    )
    updates: dict[str, Any] = {
        # The latest wording of the fact wins (the key, and so the fact, is the same).
        "content": stmt.excluded.content,
        "search_text": stmt.excluded.search_text,
        "update_time": stmt.excluded.update_time,
        "version": memories.c.version + 1,
    }
    if fact.kind is not None:
        updates["kind"] = stmt.excluded.kind
    if fact.source_run_id is not None:
        updates["source_run_id"] = stmt.excluded.source_run_id
    upsert = stmt.on_conflict_do_update(
        index_elements=["owner_id", "content_hash"], set_=updates
    ).returning(*MEMORY_COLUMNS)
    memory = _memory((await conn.execute(upsert)).one())
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
            sa.select(*MEMORY_COLUMNS).where(
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
    stmt = sa.select(*MEMORY_COLUMNS).where(memories.c.owner_id == owner)
    if after is not None:
        # One row-value bound, so both databases start the index search at the position:
        # written as an OR of its two cases, it left owner_id as the only key, and each page
        # read every newer memory of the owner again before reaching its own.
        stmt = stmt.where(sa.tuple_(memories.c.update_time, memories.c.id) < after)
    stmt = stmt.order_by(memories.c.update_time.desc(), memories.c.id.desc()).limit(limit)
    return [_memory(r) for r in (await conn.execute(stmt)).all()]


async def forget_by_id(conn: AsyncConnection, owner: str, memory_id: str) -> list[Memory]:
    """Deletes the owner's memory `memory_id`; it, as it was."""
    deleted = (
        await conn.execute(
            memories.delete()
            .where(memories.c.owner_id == owner, memories.c.id == memory_id)
            .returning(*MEMORY_COLUMNS)
        )
    ).all()
    if not deleted:
        raise NotFound(_NOT_FOUND)
    return [_memory(r) for r in deleted]


async def forget_matching(conn: AsyncConnection, owner: str, query: str) -> list[Memory]:
    """Deletes the owner's memories that core.matches(query, content); them, as they were."""
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
            .returning(*MEMORY_COLUMNS)
        )
    ).all()
    return sorted(map(_memory, deleted), key=lambda m: ids.index(m.id))


# How many of the owner's memories sharing words with a new fact WriteMemory compares it
# with (consolidation.on_write), best full-text rank first.
RELATED_LIMIT = 20


async def related(
    conn: AsyncConnection, owner: str, groups: Sequence[Sequence[str]]
) -> list[Memory]:
    """The owner's memories holding every token of at least one of `groups`
    (consolidation.candidate_groups), best ranked first, at most RELATED_LIMIT."""
    return await _lexical(conn, owner, groups, RELATED_LIMIT)


async def every_memory(conn: AsyncConnection, owner: str) -> list[Memory]:
    """All of the owner's memories (a consolidation pass reads them at once)."""
    stmt = sa.select(*MEMORY_COLUMNS).where(memories.c.owner_id == owner)
    return [_memory(r) for r in (await conn.execute(stmt.order_by(memories.c.seq))).all()]


async def add_sources(
    conn: AsyncConnection, owner: str, kept: Memory, sources: Sequence[str]
) -> Memory:
    """`kept` with `sources` merged into its source messages (core.merge_sources)."""
    merged = core.merge_sources(kept.source_message_ids, sources)
    if merged == kept.source_message_ids:
        return kept
    await conn.execute(
        memories.update()
        .where(memories.c.owner_id == owner, memories.c.id == kept.id)
        .values(source_message_ids=list(merged))
    )
    return dataclasses.replace(kept, source_message_ids=merged)


async def remove(conn: AsyncConnection, owner: str, ids: Sequence[str]) -> list[Memory]:
    """Deletes the owner's memories `ids` (merged or superseded); them, as they were."""
    if not ids:
        return []
    gone = await conn.execute(
        memories.delete()
        .where(memories.c.owner_id == owner, memories.c.id.in_(list(ids)))
        .returning(*MEMORY_COLUMNS)
    )
    return [_memory(r) for r in gone.all()]


async def near_pairs(
    conn: AsyncConnection, owner: str, model: str, dims: int, threshold: float
) -> dict[str, dict[str, float]]:
    """id -> {id: cosine} of the owner's memories whose current embeddings by `model` have
    a cosine of at least `threshold` (both directions). Embeddings of an older version of
    their memory take no part."""
    e = memory_embeddings
    vector = sa.cast(e.c.embedding, sa.Text) if is_postgres(conn) else e.c.embedding
    rows = (
        await conn.execute(
            sa.select(e.c.memory_id, vector.label("embedding"))
            .select_from(e.join(memories, memories.c.id == e.c.memory_id))
            .where(
                e.c.owner_id == owner,
                e.c.model == model,
                e.c.dimensions == dims,
                e.c.memory_version == memories.c.version,
            )
            .order_by(e.c.memory_id)
        )
    ).all()
    if len(rows) < 2:
        return {}
    import numpy as np  # lazily: see the note at the imports

    if is_postgres(conn):
        matrix = np.asarray([json.loads(r.embedding) for r in rows], dtype=np.float32)
    else:
        matrix = np.frombuffer(b"".join(r.embedding for r in rows), dtype="<f4")
        matrix = matrix.reshape(len(rows), dims)
    near: dict[str, dict[str, float]] = {}
    # In blocks of rows: the whole square of 20,000 memories would be 1.6 GB.
    for start in range(0, len(rows), 512):
        block = matrix[start : start + 512] @ matrix.T
        for i, j in zip(*np.nonzero(block >= threshold), strict=True):
            a, b = rows[start + int(i)].memory_id, rows[int(j)].memory_id
            if a != b:
                near.setdefault(a, {})[b] = float(block[i, j])
    return near


async def update(
    conn: AsyncConnection, owner: str, edit: core.MemoryEdit, now: datetime
) -> tuple[Memory, Memory]:
    """Rewrites the owner's memory `edit.id`; (before, after). NOT_FOUND, ABORTED (another
    version than expected), ALREADY_EXISTS (the new content is another memory's fact)."""
    row = (
        await conn.execute(
            sa.select(*MEMORY_COLUMNS)
            .where(memories.c.owner_id == owner, memories.c.id == edit.id)
            .with_for_update()
        )
    ).one_or_none()
    if row is None:
        raise NotFound(_NOT_FOUND)
    before = _memory(row)
    if edit.expected_version and before.version != edit.expected_version:
        raise Aborted(
            f"the memory is at version {before.version}, not {edit.expected_version}",
            reason="VERSION_MISMATCH",
        )
    values: dict[str, Any] = {"update_time": now, "version": before.version + 1}
    # validate_edit sets the content and its key together.
    if edit.content is not None and edit.content_key is not None:
        values.update(
            content=edit.content,
            content_key=edit.content_key,
            content_hash=_hash(edit.content_key),
            # What the full-text indexes read; the version bump re-embeds it (Embedder).
            search_text=core.search_text(edit.content),
        )
    if edit.kind is not None:
        values["kind"] = edit.kind
    if edit.content_key is not None and edit.content_key != before.content_key:
        taken = (
            await conn.execute(
                sa.select(memories.c.id).where(
                    memories.c.owner_id == owner,
                    memories.c.content_hash == _hash(edit.content_key),
                )
            )
        ).one_or_none()
        if taken is not None:
            raise AlreadyExists(f"memory {taken.id} already holds this fact")
    after = (
        await conn.execute(
            memories.update()
            .where(memories.c.owner_id == owner, memories.c.id == edit.id)
            .values(**values)
            .returning(*MEMORY_COLUMNS)
        )
    ).one()
    return before, _memory(after)


async def record_changes(
    conn: AsyncConnection, owner: str, records: list[core.Change], now: datetime
) -> None:
    """Appends the owner's change records (in the caller's transaction: with the change)."""
    if not records:
        return
    await conn.execute(
        changes.insert(),
        [
            {
                "owner_id": owner,
                "action": c.action,
                "memory_id": c.memory_id,
                "content": c.content,
                "kind": c.kind,
                "previous_content": c.previous_content,
                "actor": c.actor,
                "source_run_id": c.source_run_id,
                "source_message_ids": list(c.source_message_ids),
                "reason": c.reason,
                "create_time": now,
            }
            for c in records
        ],
    )
    await outbox.add(conn, webhook_outbox, [_changed_event(owner, c, now) for c in records])


def _changed_event(owner: str, change: core.Change, now: datetime) -> outbox.Event:
    """The webhook event of one change: what changed, never the memory's content (the
    receiver reads it with GET /api/v1/memories/{memoryId} while it exists)."""
    data = {
        "memoryId": change.memory_id,
        "action": change.action,
        "kind": change.kind,
        "actor": change.actor,
        "sourceRunId": change.source_run_id,
    }
    return outbox.new_event(owner, outbox.MEMORY_CHANGED, data, int(now.timestamp() * 1000))


async def list_changes(
    conn: AsyncConnection, owner: str, after: int | None, limit: int
) -> list[tuple[int, core.Change]]:
    """The owner's change records, oldest first, after the sequence number `after`."""
    stmt = sa.select(changes).where(changes.c.owner_id == owner)
    if after is not None:
        stmt = stmt.where(changes.c.seq > after)
    rows = (await conn.execute(stmt.order_by(changes.c.seq).limit(limit))).all()
    return [
        (
            r.seq,
            core.Change(
                action=r.action,
                memory_id=r.memory_id,
                content=r.content,
                kind=r.kind,
                previous_content=r.previous_content,
                actor=r.actor,
                source_run_id=r.source_run_id,
                source_message_ids=tuple(r.source_message_ids or ()),
                reason=r.reason,
                create_time=_utc(r.create_time),
            ),
        )
        for r in rows
    ]


def _contains(conn: AsyncConnection, column: Any, needle: str) -> Any:
    position = sa.func.strpos if is_postgres(conn) else sa.func.instr
    return position(column, needle) > 0


# Whether :owner has a memory (served by ix_memories_owner_update).
_HAS_MEMORIES = sa.select(sa.exists().where(memories.c.owner_id == sa.bindparam("owner")))


async def has_memories(conn: AsyncConnection, owner: str) -> bool:
    """Whether `owner` has a memory: one probe of the owner index. It reads the rows
    themselves (no cache), so every replica sees a memory once it is committed."""
    return bool((await conn.execute(_HAS_MEMORIES, {"owner": owner})).scalar())


async def search(
    conn: AsyncConnection,
    owner: str,
    query: str,
    limit: int,
    *,
    embedding: Sequence[float] | None = None,
    model: str = "",
) -> list[Memory]:
    """The owner's memories best matching `query`, best first, each with its score.

    Lexical hits (core.query_tokens in the full-text index) always; with `embedding` (the
    query's vector by `model`), also the memories nearest to it; the rankings fused by
    core.fuse. Memories the embedder has not reached yet are found by the lexical half.
    `limit` bounds each ranking and the answer."""
    # Every chat run recalls, and an owner may have nothing to recall (a new user, one not
    # yet extracted): the probe answers that without tokenizing the query or reading the
    # full-text index (a long message costs its every term there).
    if not await has_memories(conn, owner):
        return []
    tokens = core.query_tokens(query)
    # With vectors only hits with MIN_FUSED_COVERAGE of the tokens take part: asked for as
    # such, the index does not rank every memory that shares one common word with the question.
    groups = core.lexical_groups(tokens, with_vectors=embedding is not None)
    found = await _lexical(conn, owner, groups, limit)
    nearest = None
    if embedding is not None:
        nearest = await _nearest(conn, owner, embedding, model, limit, query)
    return core.fuse(core.rankings(tokens, found, nearest, lambda m: m.content), limit, query)


async def _lexical(
    conn: AsyncConnection, owner: str, groups: Sequence[Sequence[str]], limit: int
) -> list[Memory]:
    """Memories holding every token of at least one of `groups`, best ranked first."""
    if not groups:
        return []
    # Tokens are runs of letters and digits (core.query_tokens), quoted all the same: user
    # text never reaches either query syntax as operators.
    if is_postgres(conn):
        sql = queries.PG_LEXICAL
        query = " | ".join("(" + " & ".join(f"'{t}'" for t in g) + ")" for g in groups)
    else:
        sql = queries.SQLITE_LEXICAL
        query = " OR ".join("(" + " AND ".join(f'"{t}"' for t in g) + ")" for g in groups)
    rows = (await conn.execute(sql, {"query": query, "owner": owner, "limit": limit})).all()
    return [_memory(r) for r in rows]


async def _nearest(
    conn: AsyncConnection,
    owner: str,
    embedding: Sequence[float],
    model: str,
    limit: int,
    query: str,
) -> list[Memory]:
    """The owner's memories nearest to `embedding` (the vector of `query`), centered per
    script when services.memory.centering says so."""
    query_cjk = centering.is_cjk_text(query)
    if is_postgres(conn):
        order = await _pg_centered(conn, owner, embedding, model, limit, query_cjk)
        if order is None:
            order = await _pg_nearest(conn, owner, embedding, model, limit)
    else:
        order = await _sqlite_nearest(conn, owner, embedding, model, limit, query_cjk)
    if not order:
        return []
    found = (
        await conn.execute(
            sa.select(*MEMORY_COLUMNS).where(
                memories.c.owner_id == owner, memories.c.id.in_(list(order))
            )
        )
    ).all()
    return sorted((_memory(r) for r in found), key=lambda m: (order[m.id], m.id))


async def _pg_nearest(
    conn: AsyncConnection, owner: str, embedding: Sequence[float], model: str, limit: int
) -> dict[str, float]:
    """PostgreSQL's nearest memories by plain cosine: memory id -> distance."""
    dims = len(embedding)
    # The HNSW index of this dimension (ensure_vector_index) serves the ORDER BY; its
    # iterative scan keeps reading the graph until `limit` rows of this owner and
    # model are found (pgvector >= 0.8), instead of filtering a fixed candidate list.
    await conn.execute(
        queries.PG_SEARCH_SETTINGS, {"ef": str(max(HNSW_EF_SEARCH, min(limit, 1000)))}
    )
    nearest = await conn.execute(
        queries.pg_nearest(dims),
        {
            "vector": _vector_text(embedding),
            "owner": owner,
            "model": model,
            "dims": dims,
            "limit": limit,
        },
    )
    return {r.memory_id: float(r.distance) for r in nearest.all()}


async def _sqlite_nearest(
    conn: AsyncConnection,
    owner: str,
    embedding: Sequence[float],
    model: str,
    limit: int,
    query_cjk: bool,
) -> dict[str, float]:
    """SQLite's nearest memories (every vector of the owner compared, centered per script
    when services.memory.centering says so; the vectors from the engine's cache,
    vector_cache.py): memory id -> distance."""
    vectors = await _owner_vectors(conn, owner, model, len(embedding))
    if vectors is None:
        return {}
    import numpy as np  # lazily: see the note at the imports

    distances = centering.distances(vectors.matrix, vectors.cjk, embedding, query_cjk)
    best = np.argsort(distances, kind="stable")[:limit]
    return {vectors.ids[i]: float(distances[i]) for i in best}


async def _pg_centered(
    conn: AsyncConnection,
    owner: str,
    embedding: Sequence[float],
    model: str,
    limit: int,
    query_cjk: bool,
) -> dict[str, float] | None:
    """PostgreSQL's nearest memories by centered vectors (services.memory.centering):
    memory id -> distance; None when the owner is not searched centered."""
    dims = len(embedding)
    where = {"owner": owner, "model": model, "dims": dims}
    stats = (await conn.execute(queries.PG_SCRIPT_STAMPS, where)).all()
    if not centering.centers({bool(r.cjk): int(r.n) for r in stats}):
        return None
    means = await _pg_script_means(conn, where, tuple(sorted(tuple(r) for r in stats)))
    query = [x - m for x, m in zip(embedding, means[query_cjk], strict=True)]
    found = await conn.execute(
        queries.pg_centered_nearest(dims),
        {
            **where,
            "vector": _vector_text(query),
            "mean_cjk": _vector_text(means[True]),
            "mean_other": _vector_text(means[False]),
            "limit": limit,
        },
    )
    return {r.memory_id: float(r.distance) for r in found.all()}


# PostgreSQL: each engine's owners' per-script means, kept while the owner's embeddings
# have not moved (their stamp, queries.PG_SCRIPT_STAMPS): averaging 2,000 vectors took
# most of a centered search (issue 31), a stamp about 1 ms. The newest entries kept.
_MEANS_KEPT = 1024
_PG_MEANS: weakref.WeakKeyDictionary[
    sa.Engine, OrderedDict[tuple[str, str, int], tuple[object, dict[bool, array[float]]]]
] = weakref.WeakKeyDictionary()


async def _pg_script_means(
    conn: AsyncConnection, where: dict[str, Any], stamp: object
) -> dict[bool, array[float]]:
    """The owner's mean vector per script (CJK: True), kept per engine while `stamp` holds."""
    kept = _PG_MEANS.setdefault(conn.sync_engine, OrderedDict())
    key = (where["owner"], where["model"], where["dims"])
    if (hit := kept.get(key)) is not None and hit[0] == stamp:
        kept.move_to_end(key)
        return hit[1]
    rows = (await conn.execute(queries.pg_script_means(where["dims"]), where)).all()
    means = {bool(r.cjk): array("d", json.loads(r.mean)) for r in rows}
    kept[key] = (stamp, means)
    kept.move_to_end(key)
    while len(kept) > _MEANS_KEPT:
        kept.popitem(last=False)
    return means


# Each SQLite engine's owners' vectors (vector_cache.py), by the engine: a process's
# engines of one file (a test's replicas) each keep their own, as processes would.
_VECTOR_CACHES: weakref.WeakKeyDictionary[sa.Engine, VectorCache] = weakref.WeakKeyDictionary()

# The owner's (:owner) vector stamp (migration 0005_vector_stamps); no row: no embeddings.
_VECTOR_STAMP = sa.select(memory_vector_stamps.c.stamp).where(
    memory_vector_stamps.c.owner_id == sa.bindparam("owner")
)


async def _owner_vectors(
    conn: AsyncConnection, owner: str, model: str, dims: int
) -> OwnerVectors | None:
    """SQLite: the owner's embeddings by `model` in `dims` dimensions as one matrix, from the
    engine's cache while the owner's stamp has not moved; None when there are none."""
    cache = _VECTOR_CACHES.setdefault(conn.sync_engine, VectorCache())
    # The stamp first: a change committed between the two reads then moves the stamp past
    # the one kept with the vectors, and the next search reads them again.
    stamp = (await conn.execute(_VECTOR_STAMP, {"owner": owner})).scalar_one_or_none()
    if stamp is None:
        cache.forget_owner(owner)
        return None
    key = (owner, model, dims)
    vectors = cache.get(key, stamp)
    if vectors is not None:
        return vectors if vectors.ids else None
    e = memory_embeddings
    rows = (
        await conn.execute(
            sa.select(e.c.memory_id, e.c.embedding, e.c.cjk).where(
                e.c.owner_id == owner, e.c.model == model, e.c.dimensions == dims
            )
        )
    ).all()
    import numpy as np  # lazily: see the note at the imports

    matrix = np.frombuffer(b"".join(r.embedding for r in rows), dtype="<f4")
    cjk = np.asarray([bool(r.cjk) for r in rows], dtype=bool)
    ids = tuple(r.memory_id for r in rows)
    vectors = OwnerVectors(stamp, ids, matrix.reshape(len(rows), dims), cjk)
    cache.put(key, vectors)
    return vectors if vectors.ids else None


def _vector_text(embedding: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in embedding) + "]"


def digest(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class EmbeddingTask:
    """A memory whose embedding by the configured model is missing or out of date."""

    memory_id: str
    owner_id: str
    content: str
    version: int
    # The digest of the content last embedded ("" = none): equal means only the version moved.
    embedded_digest: str


async def stale_embeddings(
    conn: AsyncConnection, model: str, dims: int, limit: int
) -> list[EmbeddingTask]:
    """Memories (of any owner: the embedder's work list) without an embedding by `model`
    for their current version, oldest update first."""
    e = memory_embeddings
    stmt = (
        sa.select(
            memories.c.id,
            memories.c.owner_id,
            memories.c.content,
            memories.c.version,
            e.c.content_digest,
            e.c.model,
            e.c.dimensions,
        )
        .select_from(memories.outerjoin(e, e.c.memory_id == memories.c.id))
        .where(
            sa.or_(
                e.c.memory_id.is_(None),
                e.c.model != model,
                e.c.dimensions != dims,
                e.c.memory_version != memories.c.version,
            )
        )
        .order_by(memories.c.update_time, memories.c.id)
        .limit(limit)
    )
    return [
        EmbeddingTask(
            memory_id=r.id,
            owner_id=r.owner_id,
            content=r.content,
            version=r.version,
            embedded_digest=(
                r.content_digest or "" if r.model == model and r.dimensions == dims else ""
            ),
        )
        for r in (await conn.execute(stmt)).all()
    ]


async def put_embedding(
    conn: AsyncConnection,
    owner: str,
    task: EmbeddingTask,
    model: str,
    embedding: Sequence[float] | None,
    now: datetime,
) -> bool:
    """Stores the embedding of `task`'s content (None: the stored one still holds, only the
    version moved); False when the memory was changed or deleted meanwhile (nothing is
    stored: the next scan finds it again)."""
    # Holds the memory's row (SQLite: the write lock of BEGIN IMMEDIATE) until commit, so a
    # rewrite cannot slip between this check and the insert.
    unchanged = sa.select(memories.c.version).where(
        memories.c.owner_id == owner,
        memories.c.id == task.memory_id,
        memories.c.version == task.version,
    )
    if is_postgres(conn):
        unchanged = unchanged.with_for_update()
    if (await conn.execute(unchanged)).one_or_none() is None:
        return False
    e = memory_embeddings
    if embedding is None:
        await conn.execute(
            e.update()
            .where(e.c.owner_id == owner, e.c.memory_id == task.memory_id)
            .values(memory_version=task.version, update_time=now)
        )
        return True
    values: dict[str, Any] = {
        "memory_id": task.memory_id,
        "owner_id": owner,
        "model": model,
        "dimensions": len(embedding),
        "memory_version": task.version,
        "content_digest": digest(task.content),
        "update_time": now,
        "cjk": centering.is_cjk_text(task.content),
    }
    # pgvector reads its text form; SQLite keeps float32 bytes.
    stored: str | bytes
    if is_postgres(conn):
        put, stored = queries.PG_PUT_EMBEDDING, _vector_text(embedding)
    else:
        import numpy as np  # lazily: see the note at the imports

        put, stored = queries.SQLITE_PUT_EMBEDDING, np.asarray(embedding, "<f4").tobytes()
    await conn.execute(put, {**values, "embedding": stored})
    return True


async def ensure_vector_index(conn: AsyncConnection, dims: int) -> None:
    """PostgreSQL: the HNSW index (cosine) of `dims`-dimensional embeddings, made once."""
    if not is_postgres(conn) or not 1 <= dims <= 2000:  # pgvector's HNSW limit
        return
    await conn.execute(queries.PG_LOCK_INDEX_BUILDS)
    await conn.execute(queries.PG_INDEX_BUILD_MEMORY)
    await conn.execute(queries.pg_create_vector_index(dims, HNSW_M, HNSW_EF_CONSTRUCTION))


def unit(vector: Sequence[float]) -> list[float]:
    """`vector` scaled to length 1 (cosine distance is then 1 - dot product)."""
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else list(vector)


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
        insert = postgresql.insert if is_postgres(conn) else sqlite.insert
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
