"""The memory store's named statements, per dialect (procrastinate's queries.sql, in Python):
each a constant, or for a statement that names an embedding dimension a function of it, with
a line saying what it does and takes. These are the statements SQLAlchemy Core does not
write: full-text search (PostgreSQL's tsquery, SQLite's FTS5), pgvector's operators, casts and
HNSW indexes, and session settings. Statements the dialects share are built where they are
used, in services/memory/store.py.
"""

from __future__ import annotations

import functools

import sqlalchemy as sa

from services.memory.tables import MEMORY_COLUMNS

_COLUMNS = ", ".join(f"m.{c.name}" for c in MEMORY_COLUMNS)
# The columns of an embedding's row the upserts set, besides the embedding itself.
_EMBEDDING_VALUES = (
    "memory_id",
    "owner_id",
    "model",
    "dimensions",
    "memory_version",
    "content_digest",
    "update_time",
    "cjk",
)
_EMBEDDING_UPDATES = ", ".join(
    f"{k} = excluded.{k}" for k in [*_EMBEDDING_VALUES, "embedding"] if k != "memory_id"
)
_EMBEDDING_INSERT = (
    f"INSERT INTO memory_embeddings ({', '.join(_EMBEDDING_VALUES)}, embedding) "
    f"VALUES ({', '.join(':' + k for k in _EMBEDDING_VALUES)}, "
)

# --- PostgreSQL ---------------------------------------------------------------------------

# The owner's (:owner) memories matching the tsquery :query, best ts_rank first, then the
# newest, up to :limit.
PG_LEXICAL = sa.text(
    f"SELECT {_COLUMNS} FROM memories m, to_tsquery('simple'::regconfig, :query) q "
    "WHERE m.owner_id = :owner AND m.search_tsv @@ q "
    "ORDER BY ts_rank(m.search_tsv, q) DESC, m.update_time DESC, m.id DESC "
    "LIMIT :limit"
).columns(*MEMORY_COLUMNS)

# For this transaction: the HNSW candidates kept while searching (:ef, text), and the
# iterative scan that keeps reading the graph until enough rows pass the filter.
PG_SEARCH_SETTINGS = sa.text(
    "SELECT set_config('hnsw.ef_search', :ef, true), "
    "set_config('hnsw.iterative_scan', 'relaxed_order', true)"
)


@functools.cache
def pg_nearest(dims: int) -> sa.TextClause:
    """The :limit embeddings of :owner's memories by :model in `dims` (:dims) dimensions
    nearest (cosine distance) to :vector (pgvector's text form): memory_id, distance. Written
    so the HNSW index of `dims` dimensions serves the ORDER BY."""
    # A scalar subquery: parsed once per search (an InitPlan), where a cast of the parameter
    # in the ORDER BY is parsed again for every row the scan reads once PostgreSQL uses a
    # generic plan of the prepared statement (asyncpg prepares every statement): 2,000
    # memories of an owner took 115-175 ms, 1 ms with the subquery. pgvector's index serves
    # an ORDER BY against a subquery's value as against a parameter.
    vector = f"(SELECT CAST(CAST(:vector AS text) AS public.vector({dims})))"
    return sa.text(
        "SELECT memory_id, distance FROM ("
        f"SELECT memory_id, embedding::public.vector({dims}) "
        f"OPERATOR(public.<=>) {vector} AS distance FROM memory_embeddings "
        "WHERE owner_id = :owner AND model = :model AND dimensions = :dims "
        "ORDER BY distance LIMIT :limit) nn"
    )


def _owners_vectors(dims: int) -> str:
    """The owner's current embeddings by :model in `dims` dimensions, each with the script
    of its content (cjk, migration 0006)."""
    return (
        f"SELECT memory_id, embedding::public.vector({dims}) AS v, cjk FROM memory_embeddings "
        "WHERE owner_id = :owner AND model = :model AND dimensions = :dims"
    )


# Per script of the owner's embeddings by :model in :dims dimensions (cjk true or false):
# how many, and a value any change to them moves (the newest write, and a sum over each
# vector's memory and content), which keys the process's kept means (store._pg_centered).
PG_SCRIPT_STAMPS = sa.text(
    "SELECT cjk, count(*) AS n, max(update_time) AS newest, "
    "sum(hashtextextended(memory_id || ':' || content_digest, 0)) AS digest "
    "FROM memory_embeddings WHERE owner_id = :owner AND model = :model "
    "AND dimensions = :dims GROUP BY cjk"
)


def pg_script_means(dims: int) -> sa.TextClause:
    """Per script of the owner's memories (cjk true or false): their mean vector (text
    form)."""
    return sa.text(
        f"SELECT cjk, CAST(public.avg(v) AS text) AS mean FROM ({_owners_vectors(dims)}) mine "
        "GROUP BY cjk"
    )


def pg_centered_nearest(dims: int) -> sa.TextClause:
    """The :limit memories nearest to the centered query :vector, each memory's vector
    less its script's mean (:mean_cjk, :mean_other), as services.memory.centering says:
    memory_id, distance. Every vector of the owner is read (no index can serve it)."""

    def param(name: str) -> str:  # once per search, see pg_nearest
        return f"(SELECT CAST(CAST(:{name} AS text) AS public.vector({dims})))"

    return sa.text(
        "SELECT memory_id, (v OPERATOR(public.-) CASE WHEN cjk THEN "
        f"{param('mean_cjk')} ELSE {param('mean_other')} END) "
        f"OPERATOR(public.<=>) {param('vector')} AS distance "
        f"FROM ({_owners_vectors(dims)}) mine ORDER BY distance, memory_id LIMIT :limit"
    )


# Store a memory's embedding (:embedding, pgvector's text form) with its row's other
# columns (:memory_id, :owner_id, :model, :dimensions, :memory_version, :content_digest,
# :update_time), replacing the one it had.
PG_PUT_EMBEDDING = sa.text(
    _EMBEDDING_INSERT + "CAST(CAST(:embedding AS text) AS public.vector)) "
    f"ON CONFLICT (memory_id) DO UPDATE SET {_EMBEDDING_UPDATES}"
)

# Wait for (and hold until commit) the lock that serialises HNSW index builds.
PG_LOCK_INDEX_BUILDS = sa.text("SELECT pg_advisory_xact_lock(hashtext('agentmesh:hnsw'))")

# For this transaction: memory enough to build an HNSW graph over existing rows in memory
# (much faster than on disk).
PG_INDEX_BUILD_MEMORY = sa.text("SELECT set_config('maintenance_work_mem', '256MB', true)")


def pg_create_vector_index(dims: int, m: int, ef_construction: int) -> sa.TextClause:
    """Create, unless it exists, the HNSW index (cosine) of the `dims`-dimensional
    embeddings, its graph built with `m` and `ef_construction`."""
    return sa.text(
        f"CREATE INDEX IF NOT EXISTS ix_memory_embeddings_hnsw_{dims} ON memory_embeddings "
        f"USING hnsw ((embedding::public.vector({dims})) public.vector_cosine_ops) "
        f"WITH (m = {m}, ef_construction = {ef_construction}) "
        f"WHERE dimensions = {dims}"
    )


# --- SQLite -------------------------------------------------------------------------------

# The owner's (:owner) memories matching the FTS5 query :query, best bm25 first, then the
# newest, up to :limit.
SQLITE_LEXICAL = sa.text(
    f"SELECT {_COLUMNS} FROM memories_fts JOIN memories m ON m.seq = memories_fts.rowid "
    "WHERE memories_fts MATCH :query AND m.owner_id = :owner "
    "ORDER BY bm25(memories_fts), m.update_time DESC, m.id DESC LIMIT :limit"
).columns(*MEMORY_COLUMNS)

# Store a memory's embedding (:embedding, float32 bytes) with its row's other columns (as
# PG_PUT_EMBEDDING), replacing the one it had.
SQLITE_PUT_EMBEDDING = sa.text(
    _EMBEDDING_INSERT + f":embedding) ON CONFLICT (memory_id) DO UPDATE SET {_EMBEDDING_UPDATES}"
)
