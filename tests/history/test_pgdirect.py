"""services.history.pgdirect on real PostgreSQL (on both test backends: the module is
PostgreSQL's own): statements marked `reused` run on asyncpg with SQLAlchemy's type processing,
share the unit's transaction with statements SQLAlchemy runs, and a broken connection leaves
the pool."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncEngine

from services.history import pgdirect
from services.history.direct import reused
from shared import db
from shared.db import UtcDateTime
from tests.conftest import PG_URL, drop_schemas, make_settings

meta = sa.MetaData()
items = sa.Table(
    "items",
    meta,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("at", UtcDateTime),
    sa.Column("doc", postgresql.JSONB),
    sa.Column("blob", sa.LargeBinary),
    sa.Column("flag", sa.Boolean),
    sa.Column("n", sa.BigInteger),
)
_C = items.c
INSERT = reused(sa.insert(items))
BY_IDS = reused(
    sa.select(items)
    .where(_C.owner_id == sa.bindparam("o"), _C.id.in_(sa.bindparam("ids", expanding=True)))
    .order_by(_C.id)
)
BUMP = reused(
    sa.update(items)
    .where(_C.owner_id == sa.bindparam("o"), _C.id == sa.bindparam("i"))
    .values(n=_C.n + sa.bindparam("by"))
    .returning(_C.n, _C.at)
)


def row(owner: str, id_: str, **values: object) -> dict[str, object]:
    base: dict[str, object] = {
        "owner_id": owner,
        "id": id_,
        "at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "doc": {"k": [1, "two"]},
        "blob": b"\x00\x01",
        "flag": True,
        "n": 1,
    }
    base.update(values)
    return base


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    prefix = f"t{uuid.uuid4().hex[:12]}_"
    settings = make_settings(tmp_path, prefix, database_url=PG_URL, database_pool_size=1)
    eng = db.create_engine(settings, "pgdirect")
    async with eng.begin() as conn:
        await conn.execute(sa.text(f'CREATE SCHEMA "{settings.schema_for("pgdirect")}"'))
        await conn.run_sync(meta.create_all)
    yield eng
    await eng.dispose()
    await drop_schemas(prefix)


async def test_reused_statements_bind_and_read_values_as_sqlalchemy_does(
    engine: AsyncEngine,
) -> None:
    east = timezone(timedelta(hours=8))
    async with pgdirect.unit(engine, transaction=True) as conn:
        await conn.execute(INSERT, [row("a", "1", at=datetime(2026, 1, 2, 11, 4, 5, tzinfo=east))])
        await conn.execute(
            INSERT, [row("a", "2", doc={"x": None}, flag=False), row("a", "3"), row("b", "1")]
        )
    async with pgdirect.unit(engine, transaction=False) as conn:
        one = (await conn.execute(BY_IDS, {"o": "a", "ids": ["1"]})).one()
        three = (await conn.execute(BY_IDS, {"o": "a", "ids": ["3", "1", "2", "9"]})).all()
    # Stored in UTC, read back timezone-aware (UtcDateTime's processors ran both ways).
    assert one.at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC) and one.at.tzinfo is UTC
    assert (one.doc, one.blob, one.flag, one.n) == ({"k": [1, "two"]}, b"\x00\x01", True, 1)
    assert [r.id for r in three] == ["1", "2", "3"]  # owner b's row "1" is not among them
    assert three[1].doc == {"x": None} and three[1].flag is False
    owner, id_, *_ = three[2]  # rows unpack positionally too
    assert (owner, id_) == ("a", "3")


async def test_a_naive_datetime_is_refused_before_it_is_stored(engine: AsyncEngine) -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        async with pgdirect.unit(engine, transaction=True) as conn:
            await conn.execute(INSERT, [row("a", "1", at=datetime(2026, 1, 2))])


async def test_direct_and_sqlalchemy_statements_share_one_transaction(engine: AsyncEngine) -> None:
    async with pgdirect.unit(engine, transaction=True) as conn:
        await conn.execute(INSERT, [row("a", "1", n=5)])
    with pytest.raises(RuntimeError):
        async with pgdirect.unit(engine, transaction=True) as conn:
            bumped = (await conn.execute(BUMP, {"o": "a", "i": "1", "by": 10})).one()
            assert bumped.n == 15
            # Built per call, so SQLAlchemy runs it: it sees the direct write of this unit.
            seen = (await conn.execute(sa.select(_C.n).where(_C.id == "1"))).scalar_one()
            assert seen == 15
            await conn.execute(sa.insert(items).values(row("a", "2")))
            raise RuntimeError("roll back")
    async with pgdirect.unit(engine, transaction=False) as conn:
        rows = (await conn.execute(BY_IDS, {"o": "a", "ids": ["1", "2"]})).all()
    assert [(r.id, r.n) for r in rows] == [("1", 5)]  # both writes were rolled back


async def test_result_accessors_match_sqlalchemy(engine: AsyncEngine) -> None:
    async with pgdirect.unit(engine, transaction=True) as conn:
        assert (await conn.execute(BUMP, {"o": "a", "i": "none", "by": 1})).first() is None
        with pytest.raises(exc.NoResultFound):
            (await conn.execute(BUMP, {"o": "a", "i": "none", "by": 1})).one()
        await conn.execute(INSERT, [row("a", "1"), row("a", "2")])
        with pytest.raises(exc.MultipleResultsFound):
            (await conn.execute(BY_IDS, {"o": "a", "ids": ["1", "2"]})).one()
        assert (await conn.execute(BUMP, {"o": "a", "i": "2", "by": 2})).scalar_one() == 3


async def test_a_duplicate_key_is_sqlalchemys_integrity_error_and_stores_nothing(
    engine: AsyncEngine,
) -> None:
    async with pgdirect.unit(engine, transaction=True) as conn:
        await conn.execute(INSERT, [row("a", "1")])
    with pytest.raises(exc.IntegrityError):
        async with pgdirect.unit(engine, transaction=True) as conn:
            await conn.execute(INSERT, [row("a", "2")])
            await conn.execute(INSERT, [row("a", "1")])
    async with pgdirect.unit(engine, transaction=False) as conn:
        rows = (await conn.execute(BY_IDS, {"o": "a", "ids": ["1", "2"]})).all()
    assert [r.id for r in rows] == ["1"]


async def test_a_connection_that_broke_is_dropped_from_the_pool(engine: AsyncEngine) -> None:
    # The pool holds one connection: the next unit gets the same one unless it was dropped.
    async with pgdirect.unit(engine, transaction=False) as conn:
        pid = conn.raw.get_server_pid()
    killer = await asyncpg.connect(PG_URL)
    try:
        assert await killer.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await killer.close()
    with pytest.raises(Exception) as failed:
        async with pgdirect.unit(engine, transaction=True) as conn:
            await conn.execute(INSERT, [row("a", "1")])
    assert not isinstance(failed.value, exc.IntegrityError)
    async with pgdirect.unit(engine, transaction=True) as conn:
        assert conn.raw.get_server_pid() != pid
        await conn.execute(INSERT, [row("a", "1")])
    async with pgdirect.unit(engine, transaction=False) as conn:
        assert (await conn.execute(BY_IDS, {"o": "a", "ids": ["1"]})).one().id == "1"


async def test_a_unit_cancelled_while_its_begin_is_answered_leaves_no_open_transaction(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pool holds one connection. The cancel lands once PostgreSQL has run BEGIN, before
    # asyncpg has seen it: the connection is inside a transaction asyncpg does not track.
    begun = asyncio.Event()
    execute = asyncpg.connection.Connection.execute

    async def slow_begin(self: asyncpg.Connection, query: str, *args: object, **kw: object) -> str:
        result = await execute(self, query, *args, **kw)
        if query.startswith("BEGIN"):
            begun.set()
            await asyncio.sleep(30)
        return result

    monkeypatch.setattr(asyncpg.connection.Connection, "execute", slow_begin)

    async def cancelled_unit() -> None:
        async with pgdirect.unit(engine, transaction=True) as conn:
            await conn.execute(INSERT, [row("a", "lost")])

    task = asyncio.create_task(cancelled_unit())
    await begun.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.setattr(asyncpg.connection.Connection, "execute", execute)
    async with pgdirect.unit(engine, transaction=True) as conn:
        await conn.execute(INSERT, [row("a", "1")])
        schema = await conn.raw.fetchval("SELECT current_schema()")
    # Committed for everyone, not inside a transaction left open on the pooled connection.
    other = await asyncpg.connect(PG_URL)
    try:
        ids = [r[0] for r in await other.fetch(f'SELECT id FROM "{schema}".items')]
    finally:
        await other.close()
    assert ids == ["1"]
