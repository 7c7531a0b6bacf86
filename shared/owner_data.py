"""Owner data by construction: each service registers, once, the tables that hold an owner's
data (its `Registry`), and every service serves the one platform contract over it
(agentmesh.platform.v1.PlatformService: DeleteOwnerData, ExportOwnerData and the webhook
outbox's List/AcknowledgeWebhookEvents), the way it serves grpc.health.v1 (shared/server.py
registers it). Deletion and export are derived from the registry, never listed per feature;
tests/shared/test_owner_data_registry.py fails when a table with an owner column (`owner_id`
or `*_owner_id`) is in a service's schema but not in its registry.

On SQLite every connection deletes securely (shared/db.py sets `secure_delete`: deleted
content is overwritten with zeros), and after an owner deletion the service's full-text
indexes are optimized (FTS5 keeps a deleted row's tokens in its segments until a merge) and
the write-ahead log is checkpointed and truncated, so the owner's content leaves the files.
What PostgreSQL needs is in api-endpoints.md ("What an owner deletion keeps").
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Protocol

import grpc
import sqlalchemy as sa
from agentmesh.platform.v1 import platform_service_pb2 as pb
from agentmesh.platform.v1 import platform_service_pb2_grpc as pb_grpc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from shared import outbox
from shared.db import is_postgres
from shared.identity import owner_id
from shared.pagination import PageTokens, bad_token, page_size, position_list

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["PlatformService"].full_name
# A row's owner is named by a column of this name, or ending so (`endpoint_owner_id`).
OWNER_COLUMN = "owner_id"


def is_owner_column(name: str) -> bool:
    return name == OWNER_COLUMN or name.endswith("_" + OWNER_COLUMN)


@dataclass(frozen=True)
class OwnedTable:
    """A table holding owners' rows: deleted and exported by its owner columns."""

    table: sa.Table
    # A row is the owner's when any of these columns names them.
    owner_columns: tuple[str, ...] = (OWNER_COLUMN,)
    # The name its deleted count goes by (deletedCounts; api-endpoints.md); the table's by
    # default.
    label: str = ""
    # Columns never exported: secrets and serving copies of exported columns.
    omit: tuple[str, ...] = ()
    # Non-empty: an index rebuilt from rows exported elsewhere (vectors, a search copy),
    # deleted with the owner but not exported; says from what.
    derived: str = ""
    # Non-empty: exported but kept by an owner deletion; says why (api-endpoints.md).
    kept: str = ""
    # A deletion of its own instead of DELETE by owner (the usage ledger folds into sums);
    # returns how many rows went.
    delete: Callable[[AsyncConnection, str], Awaitable[int]] | None = None
    # The table exists on SQLite only (a stand-in for what PostgreSQL does otherwise).
    sqlite_only: bool = False

    @property
    def name(self) -> str:
        return self.table.name

    def owned_by(self, owner: str) -> sa.ColumnElement[bool]:
        return sa.or_(*(self.table.c[c] == owner for c in self.owner_columns))


class OwnedStore(Protocol):
    """Owner data outside the SQL tables (the orchestrator's run event logs in Redis)."""

    name: str

    async def delete_owner(self, owner: str) -> int: ...

    async def export_owner(self, owner: str) -> list[dict[str, Any]]: ...


# What a registry's guard may find: an error to raise after its transaction committed (the
# deletion itself waits), e.g. history's runs still in flight whose cancellation it requested.
Guard = Callable[[AsyncConnection, str], Awaitable[Exception | None]]


@dataclass(frozen=True)
class Registry:
    """The owner data of one service, in deletion order (children before their parents)."""

    service: str
    tables: Sequence[OwnedTable] = ()
    stores: Sequence[OwnedStore] = ()
    # The service's webhook outbox (shared/outbox.py), also one of `tables`.
    outbox: sa.Table | None = None
    guard: Guard | None = None
    # SQLite FTS5 tables to optimize after a deletion (their segments keep deleted tokens).
    sqlite_fts: Sequence[str] = ()

    def table_names(self) -> set[str]:
        return {t.name for t in self.tables}


def present(registry: Registry, bind: AsyncConnection | AsyncEngine) -> list[OwnedTable]:
    """The registry's tables that exist on this database."""
    postgres = is_postgres(bind)
    return [t for t in registry.tables if not (postgres and t.sqlite_only)]


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, tuple | list):
        return [_json_value(v) for v in value]
    if hasattr(value, "tolist"):  # a pgvector / numpy vector
        return value.tolist()
    return value


def _row_json(row: Mapping[Any, Any]) -> dict[str, Any]:
    return {str(k): _json_value(v) for k, v in row.items()}


async def delete_tables(conn: AsyncConnection, registry: Registry, owner: str) -> dict[str, int]:
    """Delete the owner's rows of every registered table but the kept ones, in the caller's
    transaction; how many of each went, by label."""
    counts: dict[str, int] = {}
    for t in present(registry, conn):
        if t.kept:
            continue
        if t.delete is not None:
            gone = await t.delete(conn, owner)
        else:
            result = await conn.execute(sa.delete(t.table).where(t.owned_by(owner)))
            gone = int(result.rowcount or 0)
        label = t.label or t.name
        counts[label] = counts.get(label, 0) + gone
    if not is_postgres(conn):
        for fts in registry.sqlite_fts:
            await conn.exec_driver_sql(f"INSERT INTO {fts}({fts}) VALUES ('optimize')")
    return counts


def _checkpoint(path: str) -> None:
    # TRUNCATE waits (the busy timeout) for readers of older snapshots to finish.
    with contextlib.closing(sqlite3.connect(path, timeout=5.0)) as conn:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        log.warning("WAL checkpoint after an owner deletion blocked by a reader (%s)", path)


async def scrub(engine: AsyncEngine) -> None:
    """After a deletion committed, on SQLite: copy the write-ahead log into the database and
    truncate it, so no older version of a deleted page stays in the -wal file."""
    if engine.dialect.name != "sqlite" or not engine.url.database:
        return
    await asyncio.to_thread(_checkpoint, engine.url.database)


async def delete_owner(
    engine: AsyncEngine | None, registry: Registry, owner: str
) -> dict[str, int]:
    """Everything of `owner` the service holds, deleted (what the registry keeps, kept); how
    many records of each kind went. Raises the guard's error after committing its writes."""
    counts: dict[str, int] = {}
    if engine is not None and registry.tables:
        refused: Exception | None = None
        async with engine.begin() as conn:
            if registry.guard is not None:
                refused = await registry.guard(conn, owner)
            if refused is None:
                counts = await delete_tables(conn, registry, owner)
        if refused is not None:
            raise refused
        await scrub(engine)
    for store in registry.stores:
        counts[store.name] = counts.get(store.name, 0) + await store.delete_owner(owner)
    return counts


# The export walks the tables in registry order, each by its primary key: a page token holds
# [table index, the last primary key sent] (the stores export on their own page, after).


def _key(t: OwnedTable) -> list[sa.Column[Any]]:
    return list(t.table.primary_key.columns)


async def export_page(
    engine: AsyncEngine | None,
    registry: Registry,
    owner: str,
    position: Sequence[Any] | None,
    limit: int,
) -> tuple[list[tuple[str, dict[str, Any]]], list[Any] | None]:
    """Up to `limit` records of `owner` from `position` on, and the position of the next
    page (None after the last)."""
    exported = [] if engine is None else [t for t in present(registry, engine) if not t.derived]
    index, after = (0, None) if position is None else (int(position[0]), position[1])
    records: list[tuple[str, dict[str, Any]]] = []
    if engine is not None:
        async with engine.connect() as conn:
            while index < len(exported) and len(records) < limit:
                t = exported[index]
                key = _key(t)
                columns = [c for c in t.table.c if c.name not in t.omit]
                stmt = sa.select(*columns).where(t.owned_by(owner)).order_by(*key)
                if after is not None:
                    if not isinstance(after, list) or len(after) != len(key):
                        raise bad_token()
                    stmt = stmt.where(sa.tuple_(*key) > sa.tuple_(*after))
                rows = (await conn.execute(stmt.limit(limit - len(records)))).mappings().all()
                for row in rows:
                    records.append((t.name, _row_json(row)))
                if len(records) >= limit and rows:
                    last = rows[-1]
                    return records, [index, [_json_value(last[c.name]) for c in key]]
                index, after = index + 1, None
    # A store's records page by their place in its export ([store index, records sent]).
    skip = 0 if index < len(exported) or after is None else after
    if not isinstance(skip, int) or isinstance(skip, bool) or skip < 0:
        raise bad_token()
    for i in range(index - len(exported), len(registry.stores)):
        store = registry.stores[i]
        held = (await store.export_owner(owner))[skip:]
        room = limit - len(records)
        records.extend((store.name, row) for row in held[:room])
        if len(held) > room:
            return records, [len(exported) + i, skip + room]
        skip = 0
    return records, None


class PlatformServicer(pb_grpc.PlatformServiceServicer):
    """The one servicer of the platform contract, over a service's registry. `engine` is
    the service's database (None for a service without one)."""

    def __init__(
        self, registry: Registry, engine: AsyncEngine | None, tokens: PageTokens | None
    ) -> None:
        self._registry = registry
        self._engine = engine
        self._tokens = tokens

    async def DeleteOwnerData(
        self, request: pb.DeleteOwnerDataRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteOwnerDataResponse:
        owner = owner_id(context)
        counts = await delete_owner(self._engine, self._registry, owner)
        return pb.DeleteOwnerDataResponse(deleted_counts=counts)

    async def ExportOwnerData(
        self, request: pb.ExportOwnerDataRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ExportOwnerDataResponse:
        owner = owner_id(context)
        limit = page_size(request.page_size, default=100, maximum=1000)
        scope = {"rpc": "ExportOwnerData", "owner": owner}
        tokens = self._tokens
        if tokens is None:  # nothing to page over: no token was ever given out
            if request.page_token:
                raise bad_token()
            raw = None
        else:
            raw = tokens.decode(request.page_token, scope)
        position = None if raw is None else position_list(raw, 2)
        if position is not None and (
            isinstance(position[0], bool) or not isinstance(position[0], int)
        ):
            raise bad_token()
        records, nxt = await export_page(self._engine, self._registry, owner, position, limit)
        return pb.ExportOwnerDataResponse(
            records=[
                pb.OwnerDataRecord(
                    table=table, row_json=json.dumps(row, separators=(",", ":"), sort_keys=True)
                )
                for table, row in records
            ],
            next_page_token=""
            if nxt is None or self._tokens is None
            else self._tokens.encode(nxt, scope),
        )

    async def ListWebhookEvents(
        self, request: pb.ListWebhookEventsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListWebhookEventsResponse:
        box = self._registry.outbox
        if box is None or self._engine is None:
            outbox.admin_caller(context)
            return pb.ListWebhookEventsResponse()
        events = await outbox.serve_list(context, self._engine.connect(), box, request.page_size)
        return pb.ListWebhookEventsResponse(events=events)

    async def AcknowledgeWebhookEvents(
        self,
        request: pb.AcknowledgeWebhookEventsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.AcknowledgeWebhookEventsResponse:
        box = self._registry.outbox
        if box is None or self._engine is None:
            outbox.admin_caller(context)
            return pb.AcknowledgeWebhookEventsResponse()
        count = await outbox.serve_acknowledge(
            context, self._engine.begin(), box, request.event_ids
        )
        return pb.AcknowledgeWebhookEventsResponse(acknowledged_count=count)


def register(server: grpc.aio.Server, servicer: PlatformServicer) -> None:
    pb_grpc.add_PlatformServiceServicer_to_server(servicer, server)
