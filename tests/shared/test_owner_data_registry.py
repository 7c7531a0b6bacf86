"""Owner data by construction (shared/owner_data.py): every table with an owner column in a
service's migrated schema is in its registry, on the backend under test; deletion and the
paged export follow the registry."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from services.gateway import owner_data as gateway_owner_data
from services.gateway import tables as gateway_tables
from services.gateway.store import MIGRATIONS as GATEWAY_MIGRATIONS
from services.history import owner_data as history_owner_data
from services.history.service import MIGRATIONS as HISTORY_MIGRATIONS
from services.memory import owner_data as memory_owner_data
from services.memory.service import MIGRATIONS as MEMORY_MIGRATIONS
from services.orchestrator.eventlog import InMemoryEventLog
from services.orchestrator.owner_data import registry as orchestrator_registry
from services.scheduler import owner_data as scheduler_owner_data
from services.scheduler.service import MIGRATIONS as SCHEDULER_MIGRATIONS
from shared import owner_data
from shared.db import is_postgres
from shared.settings import Settings
from tests.conftest import migrated_engine

SERVICES = {
    "history": (HISTORY_MIGRATIONS, history_owner_data.REGISTRY),
    "memory": (MEMORY_MIGRATIONS, memory_owner_data.REGISTRY),
    "scheduler": (SCHEDULER_MIGRATIONS, scheduler_owner_data.REGISTRY),
    "gateway": (GATEWAY_MIGRATIONS, gateway_owner_data.REGISTRY),
}


async def _columns(engine: AsyncEngine, schema: str) -> dict[str, set[str]]:
    """Every table of the service's schema, with its columns (virtual tables included)."""

    def read(conn: sa.Connection) -> dict[str, set[str]]:
        inspector = sa.inspect(conn)
        where = schema if is_postgres(conn) else None
        with warnings.catch_warnings():
            # pgvector's `vector` columns: only their names matter here.
            warnings.filterwarnings("ignore", "Did not recognize type", sa.exc.SAWarning)
            return {
                name: {c["name"] for c in inspector.get_columns(name, schema=where)}
                for name in inspector.get_table_names(schema=where)
            }

    async with engine.connect() as conn:
        return await conn.run_sync(read)


@pytest.mark.parametrize("service", sorted(SERVICES))
async def test_every_table_with_an_owner_column_is_registered(
    settings: Settings, service: str
) -> None:
    migrations, registry = SERVICES[service]
    async with migrated_engine(settings, service, Path(migrations)) as engine:
        found = await _columns(engine, settings.schema_for(service))
        registered = {t.name: t for t in owner_data.present(registry, engine)}
    owned = {
        name
        for name, columns in found.items()
        if any(owner_data.is_owner_column(c) for c in columns)
        # SQLite's FTS5 shadow tables copy their table's columns; the registry's sqlite_fts
        # has their tables, optimized after a deletion.
        and not any(name.startswith(f"{fts}_") or name == fts for fts in registry.sqlite_fts)
    }
    unregistered = owned - set(registered)
    assert unregistered == set(), f"{service}: tables with an owner column not registered"
    for name, entry in registered.items():
        assert name in found, f"{service}: {name} is registered but not in the schema"
        assert set(entry.owner_columns) <= found[name], name
        assert set(entry.omit) <= found[name], name
        assert not (entry.kept and entry.derived), f"{name}: kept and derived at once"


def test_the_registries_name_what_they_keep_and_why() -> None:
    kept = {
        (registry.service, t.name): t.kept
        for _, registry in SERVICES.values()
        for t in registry.tables
        if t.kept
    }
    # What api-endpoints.md ("What an owner deletion keeps") says, and nothing else.
    assert set(kept) == {("history", "deletions"), ("history", "usage_totals")}
    assert all(kept.values())


async def test_a_deletion_takes_every_registered_table_and_the_export_pages_over_them(
    settings: Settings,
) -> None:
    registry = gateway_owner_data.REGISTRY
    async with migrated_engine(settings, "gateway", GATEWAY_MIGRATIONS) as engine:
        async with engine.begin() as conn:
            for owner in ("alice", "bob"):
                for i in range(3):
                    await conn.execute(
                        sa.insert(gateway_tables.api_keys).values(
                            id=f"{owner[:3]}{i:013d}",
                            owner_id=owner,
                            admin=False,
                            name=f"key {i} of {owner}",
                            secret_sha256="0" * 64,
                            create_time_ms=i,
                        )
                    )
                await conn.execute(
                    sa.insert(gateway_tables.owner_quotas).values(
                        owner_id=owner, runs_per_minute=1, update_time_ms=1
                    )
                )
        whole, position = await owner_data.export_page(engine, registry, "alice", None, 1000)
        assert position is None
        assert sorted(t for t, _ in whole) == ["api_keys"] * 3 + ["owner_quotas"]
        assert all("secret_sha256" not in row for _, row in whole)
        paged: list[tuple[str, dict[str, object]]] = []
        while True:
            rows, position = await owner_data.export_page(engine, registry, "alice", position, 1)
            paged += rows
            # A position survives its page token's JSON.
            position = None if position is None else json.loads(json.dumps(position))
            if position is None:
                break
        assert paged == whole

        gone = await owner_data.delete_owner(engine, registry, "alice")
        assert (gone["apiKeys"], gone["quotaOverrides"]) == (3, 1)
        left, _ = await owner_data.export_page(engine, registry, "alice", None, 1000)
        assert left == []
        kept, _ = await owner_data.export_page(engine, registry, "bob", None, 1000)
        assert len(kept) == 4
        assert set((await owner_data.delete_owner(engine, registry, "alice")).values()) == {0}


async def test_the_orchestrator_exports_and_deletes_an_owners_event_logs() -> None:
    log = InMemoryEventLog()
    for key in ("alice/r1", "alice/r3", "bob/r2"):
        await log.append(key, [(1, b"")], close=True)
    registry = orchestrator_registry(log)
    records, position = await owner_data.export_page(None, registry, "alice", None, 10)
    assert position is None
    assert records == [
        ("event_logs", {"run_id": "r1", "events": [{}]}),
        ("event_logs", {"run_id": "r3", "events": [{}]}),
    ]
    first, position = await owner_data.export_page(None, registry, "alice", None, 1)
    second, last = await owner_data.export_page(None, registry, "alice", position, 1)
    assert first + second == records and last is None
    assert await owner_data.delete_owner(None, registry, "alice") == {"event_logs": 2}
    assert await log.keys("alice/") == [] and await log.keys("bob/") == ["bob/r2"]
