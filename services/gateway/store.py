"""The gateway's own tables (SQLite file `gateway.db` embedded, schema `gateway` on
PostgreSQL): per-owner quota overrides and API keys. Its `usage_days` table is no longer
written (usage is history's run records, services/gateway/usage.py); the rows an earlier
version wrote there go with their owner's deletion.

Every statement is keyed by the owner id it reads or writes, except the API key lookup of
authentication, which is keyed by the key's id and checked against its secret's hash.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shared import db
from shared.settings import Settings

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
SERVICE = "gateway"


@dataclass(frozen=True)
class QuotaOverride:
    """An admin's quotas of one owner; None: the deployment default; 0: no limit."""

    runs_per_minute: int | None = None
    concurrent_runs: int | None = None
    tokens_per_day: int | None = None
    update_time_ms: int = 0


@dataclass(frozen=True)
class ApiKey:
    id: str
    owner_id: str
    admin: bool
    name: str
    secret_sha256: str
    create_time_ms: int
    last_used_time_ms: int | None
    revoke_time_ms: int | None


# The admin's quota override of one owner (:owner), if any.
_GET_QUOTA = text(
    "SELECT runs_per_minute, concurrent_runs, tokens_per_day, update_time_ms "
    "FROM owner_quotas WHERE owner_id = :owner"
)
# Set one owner's override (:rpm, :conc, :tpd; NULL: the default) at :now, replacing any.
# One statement for both dialects: SQLite and PostgreSQL share ON CONFLICT ... DO UPDATE.
_PUT_QUOTA = text(
    "INSERT INTO owner_quotas (owner_id, runs_per_minute, concurrent_runs, tokens_per_day, "
    "update_time_ms) VALUES (:owner, :rpm, :conc, :tpd, :now) "
    "ON CONFLICT (owner_id) DO UPDATE SET runs_per_minute = excluded.runs_per_minute, "
    "concurrent_runs = excluded.concurrent_runs, tokens_per_day = excluded.tokens_per_day, "
    "update_time_ms = excluded.update_time_ms"
)
# Drop one owner's override: the deployment defaults apply again.
_DELETE_QUOTA = text("DELETE FROM owner_quotas WHERE owner_id = :owner")
# Store a new API key (:id, :owner, :admin, :name, its secret's :hash) created at :now.
_INSERT_KEY = text(
    "INSERT INTO api_keys (id, owner_id, admin, name, secret_sha256, create_time_ms) "
    "VALUES (:id, :owner, :admin, :name, :hash, :now)"
)
_KEY_COLUMNS = (
    "id, owner_id, admin, name, secret_sha256, create_time_ms, last_used_time_ms, revoke_time_ms"
)
# One key by its id (authentication looks it up so, then checks the secret's hash).
_GET_KEY = text(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE id = :id")
# An owner's keys, newest first; :all_owners lists every owner's (admin listing).
_LIST_KEYS = text(
    f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE (:all_owners OR owner_id = :owner) "
    "ORDER BY create_time_ms DESC, id LIMIT :limit"
)
# Revoke a key (:id) at :now, unless it is revoked already.
_REVOKE_KEY = text(
    "UPDATE api_keys SET revoke_time_ms = :now WHERE id = :id AND revoke_time_ms IS NULL"
)
# At most one write per key per minute or so (:before = now - that), however many
# requests it authenticates.
_TOUCH_KEY = text(
    "UPDATE api_keys SET last_used_time_ms = :now WHERE id = :id "
    "AND (last_used_time_ms IS NULL OR last_used_time_ms < :before)"
)


def new_key_id() -> str:
    return secrets.token_hex(8)


class GatewayStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @classmethod
    async def open(cls, settings: Settings) -> GatewayStore:
        """The store on the gateway's database, migrated to head."""
        # On SQLite the one writer of its file but for a second gateway in a test.
        engine = db.create_engine(settings, SERVICE, pool_size=4, inline_sqlite=True)
        try:
            await db.migrate(engine, MIGRATIONS, settings.schema_for(SERVICE))
        except BaseException:
            await engine.dispose()
            raise
        return cls(engine)

    async def close(self) -> None:
        await self.engine.dispose()

    async def quota_override(self, owner: str) -> QuotaOverride | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(_GET_QUOTA, {"owner": owner})).first()
        if row is None:
            return None
        return QuotaOverride(row[0], row[1], row[2], int(row[3]))

    async def put_quota_override(self, owner: str, value: QuotaOverride) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                _PUT_QUOTA,
                {
                    "owner": owner,
                    "rpm": value.runs_per_minute,
                    "conc": value.concurrent_runs,
                    "tpd": value.tokens_per_day,
                    "now": value.update_time_ms,
                },
            )

    async def delete_quota_override(self, owner: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(_DELETE_QUOTA, {"owner": owner})

    async def insert_key(self, key: ApiKey) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                _INSERT_KEY,
                {
                    "id": key.id,
                    "owner": key.owner_id,
                    "admin": key.admin,
                    "name": key.name,
                    "hash": key.secret_sha256,
                    "now": key.create_time_ms,
                },
            )

    async def key(self, key_id: str) -> ApiKey | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(_GET_KEY, {"id": key_id})).first()
        return None if row is None else _key(row)

    async def keys(self, owner: str | None, limit: int) -> list[ApiKey]:
        """`owner`'s keys (every owner's when None), newest first."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                _LIST_KEYS, {"all_owners": owner is None, "owner": owner or "", "limit": limit}
            )
            return [_key(r) for r in rows]

    async def revoke_key(self, key_id: str, now_ms: int) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(_REVOKE_KEY, {"id": key_id, "now": now_ms})

    async def touch_key(self, key_id: str, now_ms: int, every_ms: int) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                _TOUCH_KEY, {"id": key_id, "now": now_ms, "before": now_ms - every_ms}
            )


def _key(row: Sequence[Any]) -> ApiKey:
    r = tuple(row)  # a SQLAlchemy Row is a tuple
    return ApiKey(
        id=r[0],
        owner_id=r[1],
        admin=bool(r[2]),
        name=r[3],
        secret_sha256=r[4],
        create_time_ms=int(r[5]),
        last_used_time_ms=None if r[6] is None else int(r[6]),
        revoke_time_ms=None if r[7] is None else int(r[7]),
    )
