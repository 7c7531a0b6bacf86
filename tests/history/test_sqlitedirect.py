"""services.history.sqlitedirect on the embedded SQLite (on both test backends: the module is
SQLite's own): in a write unit, statements marked `reused` run on sqlite3 with SQLAlchemy's
type processing and errors, and share the unit's transaction with statements SQLAlchemy runs."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.ext.asyncio import AsyncEngine

from services.history import sqlitedirect
from services.history.direct import reused
from shared import db
from shared.db import UtcDateTime
from tests.conftest import make_settings

meta = sa.MetaData()
items = sa.Table(
    "items",
    meta,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("at", UtcDateTime),
    sa.Column("doc", sa.JSON),
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
    settings = make_settings(tmp_path, f"t{uuid.uuid4().hex[:12]}_", database_url="")
    eng = db.create_engine(settings, "sqlitedirect", inline_sqlite=True)
    async with eng.begin() as conn:
        await conn.run_sync(meta.create_all)
    yield eng
    await eng.dispose()


@asynccontextmanager
async def unit(engine: AsyncEngine) -> AsyncIterator[sqlitedirect.Connection]:
    """A write unit as history opens one."""
    async with engine.begin() as sa_conn:
        conn = await sqlitedirect.connection(sa_conn)
        assert isinstance(conn, sqlitedirect.Connection)  # the inline engine goes direct
        yield conn


async def test_reused_statements_bind_and_read_values_as_sqlalchemy_does(
    engine: AsyncEngine,
) -> None:
    east = timezone(timedelta(hours=8))
    async with unit(engine) as conn:
        await conn.execute(INSERT, [row("a", "1", at=datetime(2026, 1, 2, 11, 4, 5, tzinfo=east))])
        await conn.execute(
            INSERT, [row("a", "2", doc={"x": None}, flag=False), row("a", "3"), row("b", "1")]
        )
        one = (await conn.execute(BY_IDS, {"o": "a", "ids": ["1"]})).one()
        three = (await conn.execute(BY_IDS, {"o": "a", "ids": ["3", "1", "2", "9"]})).all()
    async with engine.connect() as sa_conn:
        through_sqlalchemy = (await sa_conn.execute(BY_IDS, {"o": "a", "ids": ["1"]})).one()
    # Stored in UTC, read back timezone-aware (UtcDateTime's processors ran both ways).
    assert one.at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC) and one.at.tzinfo is UTC
    assert (one.doc, one.blob, one.flag, one.n) == ({"k": [1, "two"]}, b"\x00\x01", True, 1)
    assert tuple(one) == tuple(through_sqlalchemy)
    assert [r.id for r in three] == ["1", "2", "3"]  # owner b's row "1" is not among them
    assert three[1].doc == {"x": None} and three[1].flag is False
    owner, id_, *_ = three[2]  # rows unpack positionally too
    assert (owner, id_) == ("a", "3")


async def test_a_taken_key_is_sqlalchemys_integrity_error(engine: AsyncEngine) -> None:
    async with unit(engine) as conn:
        await conn.execute(INSERT, [row("a", "1")])
    with pytest.raises(exc.IntegrityError):
        async with unit(engine) as conn:
            await conn.execute(INSERT, [row("a", "1")])


async def test_a_naive_datetime_is_refused_before_it_is_stored(engine: AsyncEngine) -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        async with unit(engine) as conn:
            await conn.execute(INSERT, [row("a", "1", at=datetime(2026, 1, 2))])


async def test_direct_and_sqlalchemy_statements_share_one_transaction(engine: AsyncEngine) -> None:
    async with unit(engine) as conn:
        await conn.execute(INSERT, [row("a", "1", n=5)])
    with pytest.raises(RuntimeError):
        async with unit(engine) as conn:
            bumped = (await conn.execute(BUMP, {"o": "a", "i": "1", "by": 10})).one()
            assert (bumped.n, bumped.at.tzinfo) == (15, UTC)
            # Built per call, so SQLAlchemy runs it: it sees the direct write of this unit.
            seen = (await conn.execute(sa.select(_C.n).where(_C.id == "1"))).scalar_one()
            assert seen == 15
            await conn.execute(sa.insert(items).values(row("a", "2")))
            raise RuntimeError("roll back")
    async with engine.connect() as sa_conn:
        kept = (await sa_conn.execute(sa.select(_C.id, _C.n).order_by(_C.id))).all()
    assert [tuple(r) for r in kept] == [("1", 5)]  # both writes of the failed unit undone


async def test_a_connection_not_on_the_loop_thread_stays_with_sqlalchemy(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, f"t{uuid.uuid4().hex[:12]}_", database_url="")
    eng = db.create_engine(settings, "threaded")
    try:
        async with eng.begin() as sa_conn:
            assert await sqlitedirect.connection(sa_conn) is sa_conn
    finally:
        await eng.dispose()


# A bind with a value of its own, and one without.
OVER = reused(
    sa.select(_C.id)
    .where(_C.n > sa.bindparam("floor", value=2), _C.owner_id == sa.bindparam("o"))
    .order_by(_C.id)
)


async def test_parameters_are_taken_as_sqlalchemy_takes_them(engine: AsyncEngine) -> None:
    async with unit(engine) as conn:
        await conn.execute(INSERT, [row("a", str(n), n=n) for n in range(5)])
        defaulted = (await conn.execute(OVER, {"o": "a"})).all()
        given = (await conn.execute(OVER, {"o": "a", "floor": 0})).all()
        with pytest.raises(exc.InvalidRequestError, match="required for bind parameter 'o'"):
            await conn.execute(OVER, {"floor": 0})
    assert [r.id for r in defaulted] == ["3", "4"]  # the bind's own value
    assert [r.id for r in given] == ["1", "2", "3", "4"]
