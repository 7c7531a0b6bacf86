"""The gateway's webhook tables (migrations 0002_webhooks, 0003_webhook_endpoint_health):
owners' endpoints, deliveries (the delivery log), the deliverer's lease and each endpoint's
health (its circuit breaker). On the gateway's engine (store.GatewayStore).

Every read and write of an endpoint is keyed by its owner; a delivery is read by its
endpoint's owner (`endpoint_owner`) or, with None, by an admin. The deliverer's statements
(`claim_due`, `record_attempt`) work across owners, as the outbox does.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.db import is_postgres


@dataclass(frozen=True)
class Endpoint:
    id: str
    # Empty: an endpoint of the deployment (configured, not stored).
    owner_id: str
    url: str
    secret: str
    description: str = ""
    # Empty: every event type.
    event_types: tuple[str, ...] = ()
    create_time_ms: int = 0


@dataclass(frozen=True)
class Delivery:
    id: str
    endpoint_id: str
    endpoint_owner_id: str
    owner_id: str
    event_id: str
    event_type: str
    payload: str
    url: str
    state: str
    attempts: int
    replays: int
    next_attempt_ms: int | None
    last_attempt_ms: int | None
    last_status_code: int | None
    last_error: str
    create_time_ms: int


@dataclass(frozen=True)
class EndpointHealth:
    """An endpoint's circuit breaker (webhooks.after_failure, webhooks.endpoint_state)."""

    endpoint_id: str
    consecutive_failures: int = 0
    # Pauses in a row: the next is twice as long.
    pauses: int = 0
    paused_until_ms: int | None = None
    last_error: str = ""
    last_failure_ms: int | None = None


PENDING, SUCCEEDED, FAILED = "pending", "succeeded", "failed"
STATES = (PENDING, SUCCEEDED, FAILED)


def new_endpoint_id() -> str:
    return f"whe_{secrets.token_hex(12)}"


def new_delivery_id() -> str:
    return f"whd_{secrets.token_hex(16)}"


_ENDPOINT_COLUMNS = "id, owner_id, url, secret, description, event_types, create_time_ms"
_INSERT_ENDPOINT = text(
    "INSERT INTO webhook_endpoints (id, owner_id, url, secret, description, event_types, "
    "create_time_ms) VALUES (:id, :owner, :url, :secret, :description, :types, :now)"
)
_GET_ENDPOINT = text(
    f"SELECT {_ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE owner_id = :owner AND id = :id"
)
# An owner's endpoints, newest first.
_LIST_ENDPOINTS = text(
    f"SELECT {_ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE owner_id = :owner "
    "ORDER BY create_time_ms DESC, id LIMIT :limit"
)
# The endpoints of several owners (matching events to endpoints).
_ENDPOINTS_OF = text(
    f"SELECT {_ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE owner_id IN :owners"
).bindparams(sa.bindparam("owners", expanding=True))
_DELETE_ENDPOINT = text("DELETE FROM webhook_endpoints WHERE owner_id = :owner AND id = :id")

_DELIVERY_COLUMNS = (
    "id, endpoint_id, endpoint_owner_id, owner_id, event_id, event_type, payload, url, state, "
    "attempts, replays, next_attempt_ms, last_attempt_ms, last_status_code, last_error, "
    "create_time_ms"
)
# A delivery recorded again (the outbox listed its event twice) stays as it was.
_INSERT_DELIVERY = text(
    f"INSERT INTO webhook_deliveries ({_DELIVERY_COLUMNS}) VALUES (:id, :endpoint_id, "
    ":endpoint_owner_id, :owner_id, :event_id, :event_type, :payload, :url, 'pending', 0, 0, "
    ":next_attempt_ms, NULL, NULL, '', :create_time_ms) "
    "ON CONFLICT (endpoint_id, event_id) DO NOTHING"
)
# Pending deliveries due by :now, oldest due first, at most :per_endpoint of each endpoint
# and one of an endpoint whose pause is over (:probe_after failures in a row: the probe),
# none of an endpoint paused at :now or in :busy (the deliverer's sends to it are in flight).
_DUE = text(
    f"SELECT {_DELIVERY_COLUMNS} FROM (SELECT "
    + ", ".join(f"d.{c.strip()}" for c in _DELIVERY_COLUMNS.split(","))
    + ", ROW_NUMBER() OVER (PARTITION BY d.endpoint_id ORDER BY d.next_attempt_ms, d.id) "
    "AS nth, COALESCE(h.consecutive_failures, 0) AS failures "
    "FROM webhook_deliveries d LEFT JOIN webhook_endpoint_health h "
    "ON h.endpoint_id = d.endpoint_id "
    "WHERE d.state = 'pending' AND d.next_attempt_ms <= :now "
    "AND (h.paused_until_ms IS NULL OR h.paused_until_ms <= :now) "
    "AND d.endpoint_id NOT IN :busy) due "
    "WHERE nth <= CASE WHEN failures >= :probe_after THEN 1 ELSE :per_endpoint END "
    "ORDER BY next_attempt_ms, id LIMIT :limit"
).bindparams(sa.bindparam("busy", expanding=True, type_=sa.String))
# The claim of a due delivery: nobody else sends it before :until (one deliverer holds the
# lease; this covers a lease that changed hands mid-send).
_CLAIM = text(
    "UPDATE webhook_deliveries SET next_attempt_ms = :until "
    "WHERE id = :id AND state = 'pending' AND next_attempt_ms <= :now"
)
_RECORD_ATTEMPT = text(
    "UPDATE webhook_deliveries SET state = :state, attempts = attempts + 1, "
    "next_attempt_ms = :next, last_attempt_ms = :now, last_status_code = :code, "
    "last_error = :error WHERE id = :id"
)
_GET_DELIVERY = text(f"SELECT {_DELIVERY_COLUMNS} FROM webhook_deliveries WHERE id = :id")
# The delivery log, newest first, after (:after_time, :after_id) when :paged. Filters:
# :by_endpoint_owner (an owner's view), :by_owner (the event's owner, admin view),
# :by_endpoint, :by_state.
_LIST_DELIVERIES = text(
    f"SELECT {_DELIVERY_COLUMNS} FROM webhook_deliveries WHERE "
    "(NOT :by_endpoint_owner OR endpoint_owner_id = :endpoint_owner) "
    "AND (NOT :by_owner OR owner_id = :owner) "
    "AND (NOT :by_endpoint OR endpoint_id = :endpoint) "
    "AND (NOT :by_state OR state = :state) "
    "AND (NOT :paged OR create_time_ms < :after_time "
    "OR (create_time_ms = :after_time AND id > :after_id)) "
    "ORDER BY create_time_ms DESC, id LIMIT :limit"
)
# A replay: the same delivery (id, webhook-id, body) sent again, with a new round of
# attempts.
_REPLAY = text(
    "UPDATE webhook_deliveries SET state = 'pending', attempts = 0, replays = replays + 1, "
    "next_attempt_ms = :now WHERE id = :id"
)
# The delivery log's retention: finished deliveries whose last attempt is older.
_PRUNE_DELIVERIES = text(
    "DELETE FROM webhook_deliveries WHERE state IN ('succeeded', 'failed') "
    "AND last_attempt_ms < :before"
)
_DELETE_HEALTH = text(
    "DELETE FROM webhook_endpoint_health WHERE endpoint_owner_id = :owner AND endpoint_id = :id"
)
_HEALTH_COLUMNS = (
    "endpoint_id, consecutive_failures, pauses, paused_until_ms, last_error, last_failure_ms"
)
# The health of several endpoints of one owner ('' for the deployment's).
_HEALTH_OF = text(
    f"SELECT {_HEALTH_COLUMNS} FROM webhook_endpoint_health "
    "WHERE endpoint_owner_id = :owner AND endpoint_id IN :ids"
).bindparams(sa.bindparam("ids", expanding=True))
# The row an endpoint's first failure updates (then read under a lock and written back).
_INSERT_HEALTH = text(
    "INSERT INTO webhook_endpoint_health (endpoint_id, endpoint_owner_id, "
    "consecutive_failures, pauses, paused_until_ms, last_error, last_failure_ms) "
    "VALUES (:id, :owner, 0, 0, NULL, '', NULL) ON CONFLICT (endpoint_id) DO NOTHING"
)
_GET_HEALTH = f"SELECT {_HEALTH_COLUMNS} FROM webhook_endpoint_health WHERE endpoint_id = :id"
_PUT_HEALTH = text(
    "UPDATE webhook_endpoint_health SET consecutive_failures = :failures, pauses = :pauses, "
    "paused_until_ms = :until, last_error = :error, last_failure_ms = :at WHERE endpoint_id = :id"
)
# A pause of an endpoint moves its pending deliveries' next attempt to the pause's end: the
# due deliveries the deliverer reads are only those it may send.
_POSTPONE = text(
    "UPDATE webhook_deliveries SET next_attempt_ms = :until WHERE endpoint_id = :id "
    "AND state = 'pending' AND next_attempt_ms < :until"
)
# A success closes the breaker (the last error stays, as the endpoint's history).
_HEALTHY = text(
    "UPDATE webhook_endpoint_health SET consecutive_failures = 0, pauses = 0, "
    "paused_until_ms = NULL WHERE endpoint_id = :id AND consecutive_failures > 0"
)
# Take or keep the lease: free, expired, or already :holder's. SQLite and PostgreSQL share
# the upsert with a WHERE on its update.
_TAKE_LEASE = text(
    "INSERT INTO webhook_leases (name, holder, expire_time_ms) VALUES (:name, :holder, :until) "
    "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
    "expire_time_ms = excluded.expire_time_ms "
    "WHERE webhook_leases.holder = excluded.holder OR webhook_leases.expire_time_ms < :now"
)
_LEASE_HOLDER = text("SELECT holder FROM webhook_leases WHERE name = :name")


def _endpoint(row: Any) -> Endpoint:
    return Endpoint(
        id=row[0],
        owner_id=row[1],
        url=row[2],
        secret=row[3],
        description=row[4],
        event_types=tuple(json.loads(row[5])),
        create_time_ms=int(row[6]),
    )


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _health(row: Any) -> EndpointHealth:
    return EndpointHealth(
        endpoint_id=row[0],
        consecutive_failures=int(row[1]),
        pauses=int(row[2]),
        paused_until_ms=_optional_int(row[3]),
        last_error=row[4],
        last_failure_ms=_optional_int(row[5]),
    )


def _delivery(row: Any) -> Delivery:
    return Delivery(
        id=row[0],
        endpoint_id=row[1],
        endpoint_owner_id=row[2],
        owner_id=row[3],
        event_id=row[4],
        event_type=row[5],
        payload=row[6],
        url=row[7],
        state=row[8],
        attempts=int(row[9]),
        replays=int(row[10]),
        next_attempt_ms=_optional_int(row[11]),
        last_attempt_ms=_optional_int(row[12]),
        last_status_code=_optional_int(row[13]),
        last_error=row[14],
        create_time_ms=int(row[15]),
    )


class WebhookStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def insert_endpoint(self, e: Endpoint) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                _INSERT_ENDPOINT,
                {
                    "id": e.id,
                    "owner": e.owner_id,
                    "url": e.url,
                    "secret": e.secret,
                    "description": e.description,
                    "types": json.dumps(list(e.event_types)),
                    "now": e.create_time_ms,
                },
            )

    async def endpoint(self, owner: str, endpoint_id: str) -> Endpoint | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(_GET_ENDPOINT, {"owner": owner, "id": endpoint_id})).first()
        return None if row is None else _endpoint(row)

    async def endpoints(self, owner: str, limit: int) -> list[Endpoint]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(_LIST_ENDPOINTS, {"owner": owner, "limit": limit})
            return [_endpoint(r) for r in rows]

    async def endpoints_of(self, owners: Sequence[str]) -> list[Endpoint]:
        if not owners:
            return []
        async with self.engine.connect() as conn:
            rows = await conn.execute(_ENDPOINTS_OF, {"owners": list(owners)})
            return [_endpoint(r) for r in rows]

    async def delete_endpoint(self, owner: str, endpoint_id: str) -> bool:
        async with self.engine.begin() as conn:
            result = await conn.execute(_DELETE_ENDPOINT, {"owner": owner, "id": endpoint_id})
            await conn.execute(_DELETE_HEALTH, {"owner": owner, "id": endpoint_id})
        return bool(result.rowcount)

    async def health_of(self, owner: str, endpoint_ids: Sequence[str]) -> dict[str, EndpointHealth]:
        """The health of `owner`'s endpoints (`owner` '' for the deployment's) that ever
        failed; an endpoint missing from the answer never did."""
        if not endpoint_ids:
            return {}
        async with self.engine.connect() as conn:
            rows = await conn.execute(_HEALTH_OF, {"owner": owner, "ids": list(endpoint_ids)})
            return {h.endpoint_id: h for h in map(_health, rows)}

    async def record_failure(
        self, owner: str, endpoint_id: str, change: Callable[[EndpointHealth], EndpointHealth]
    ) -> EndpointHealth:
        """The endpoint's health after a failed attempt: `change` of the stored one, read and
        written under the row's lock (replicas whose sends overlap count every failure). A
        change that pauses the endpoint postpones its pending deliveries to the pause's end."""
        lock = " FOR UPDATE" if is_postgres(self.engine) else ""  # SQLite: BEGIN IMMEDIATE
        async with self.engine.begin() as conn:
            await conn.execute(_INSERT_HEALTH, {"id": endpoint_id, "owner": owner})
            row = (await conn.execute(text(_GET_HEALTH + lock), {"id": endpoint_id})).one()
            before = _health(row)
            after = change(before)
            if after.paused_until_ms is not None and after.pauses > before.pauses:
                await conn.execute(_POSTPONE, {"id": endpoint_id, "until": after.paused_until_ms})
            await conn.execute(
                _PUT_HEALTH,
                {
                    "id": endpoint_id,
                    "failures": after.consecutive_failures,
                    "pauses": after.pauses,
                    "until": after.paused_until_ms,
                    "error": after.last_error,
                    "at": after.last_failure_ms,
                },
            )
        return after

    async def record_success(self, endpoint_id: str) -> None:
        """The endpoint answered: its failures in a row and pauses are over."""
        async with self.engine.begin() as conn:
            await conn.execute(_HEALTHY, {"id": endpoint_id})

    async def insert_deliveries(self, deliveries: Sequence[Delivery]) -> None:
        if not deliveries:
            return
        async with self.engine.begin() as conn:
            await conn.execute(
                _INSERT_DELIVERY,
                [
                    {
                        "id": d.id,
                        "endpoint_id": d.endpoint_id,
                        "endpoint_owner_id": d.endpoint_owner_id,
                        "owner_id": d.owner_id,
                        "event_id": d.event_id,
                        "event_type": d.event_type,
                        "payload": d.payload,
                        "url": d.url,
                        "next_attempt_ms": d.next_attempt_ms,
                        "create_time_ms": d.create_time_ms,
                    }
                    for d in deliveries
                ],
            )

    async def claim_due(
        self,
        now_ms: int,
        until_ms: int,
        limit: int,
        *,
        per_endpoint: int | None = None,
        probe_after: int | None = None,
        busy: Sequence[str] = (),
    ) -> list[Delivery]:
        """The pending deliveries due by `now_ms`, each claimed until `until_ms`: at most
        `per_endpoint` of one endpoint, one of an endpoint with `probe_after` failures in a
        row, none of a paused endpoint or of the endpoints in `busy`."""
        params = {
            "now": now_ms,
            "limit": limit,
            "per_endpoint": per_endpoint or limit,
            "probe_after": probe_after or 2**31 - 1,
            "busy": list(busy),
        }
        async with self.engine.begin() as conn:
            rows = (await conn.execute(_DUE, params)).all()
            claimed = []
            for row in rows:
                d = _delivery(row)
                result = await conn.execute(_CLAIM, {"id": d.id, "until": until_ms, "now": now_ms})
                if result.rowcount:
                    claimed.append(d)
            return claimed

    async def record_attempt(
        self,
        delivery_id: str,
        *,
        state: str,
        next_attempt_ms: int | None,
        at_ms: int,
        status_code: int | None,
        error: str,
    ) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                _RECORD_ATTEMPT,
                {
                    "id": delivery_id,
                    "state": state,
                    "next": next_attempt_ms,
                    "now": at_ms,
                    "code": status_code,
                    "error": error,
                },
            )

    async def delivery(self, delivery_id: str, endpoint_owner: str | None) -> Delivery | None:
        """The delivery; None when missing or (with `endpoint_owner`) another's."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(_GET_DELIVERY, {"id": delivery_id})).first()
        if row is None:
            return None
        d = _delivery(row)
        if endpoint_owner is not None and d.endpoint_owner_id != endpoint_owner:
            return None
        return d

    async def deliveries(
        self,
        *,
        endpoint_owner: str | None,
        owner: str | None,
        endpoint_id: str | None,
        state: str | None,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[Delivery]:
        params = {
            "by_endpoint_owner": endpoint_owner is not None,
            "endpoint_owner": endpoint_owner or "",
            "by_owner": owner is not None,
            "owner": owner or "",
            "by_endpoint": endpoint_id is not None,
            "endpoint": endpoint_id or "",
            "by_state": state is not None,
            "state": state or "",
            "paged": after is not None,
            "after_time": after[0] if after else 0,
            "after_id": after[1] if after else "",
            "limit": limit,
        }
        async with self.engine.connect() as conn:
            return [_delivery(r) for r in await conn.execute(_LIST_DELIVERIES, params)]

    async def replay(self, delivery_id: str, now_ms: int) -> Delivery | None:
        async with self.engine.begin() as conn:
            await conn.execute(_REPLAY, {"id": delivery_id, "now": now_ms})
            row = (await conn.execute(_GET_DELIVERY, {"id": delivery_id})).first()
        return None if row is None else _delivery(row)

    async def prune_deliveries(self, before_ms: int) -> int:
        async with self.engine.begin() as conn:
            result = await conn.execute(_PRUNE_DELIVERIES, {"before": before_ms})
        return int(result.rowcount or 0)

    async def take_lease(self, name: str, holder: str, now_ms: int, until_ms: int) -> bool:
        """Whether `holder` holds lease `name` until `until_ms` now (taken or renewed)."""
        async with self.engine.begin() as conn:
            await conn.execute(
                _TAKE_LEASE, {"name": name, "holder": holder, "until": until_ms, "now": now_ms}
            )
            current = (await conn.execute(_LEASE_HOLDER, {"name": name})).scalar_one()
        return bool(current == holder)
