"""The webhook outbox of a service: events written in the transaction of the change they
tell, listed and acknowledged by the gateway, which delivers them (issue #23).

History (runs ending), the scheduler (job runs ending) and memory (memories changing) each
keep a `webhook_outbox` table made by `create_table` in their own migration, so an event
exists exactly when its change committed. The gateway lists the unacknowledged events
(`pending`), records their deliveries in its own store, then acknowledges them
(`acknowledge`); a crash between the two lists them again, and the gateway's deliveries are
unique per (endpoint, event): at least once, one id per event. Acknowledgement rather than a
sequence cursor because a PostgreSQL sequence number is taken at insert time and a
transaction can commit after a later one: a reader behind a cursor would skip it.

Acknowledged events are pruned once older than the retention period; an owner's events go
with the owner's data (the table is in each service's owner-data registry, shared/owner_data.py).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
import sqlalchemy as sa
from agentmesh.type.v1 import webhook_event_pb2 as event_pb

from shared.errors import InvalidArgument
from shared.identity import owner_id, require_admin
from shared.pagination import page_size
from shared.settings import Settings

TABLE = "webhook_outbox"
MAX_ACKNOWLEDGED = 1000

# The event types, and which service records each (api-endpoints.md, "Webhooks").
RUN_TYPES = ("run.succeeded", "run.failed", "run.cancelled", "run.interrupted")
JOB_RUN_TYPES = ("job_run.succeeded", "job_run.failed")
MEMORY_CHANGED = "memory.changed"
EVENT_TYPES = (*RUN_TYPES, *JOB_RUN_TYPES, MEMORY_CHANGED)


class Conn(Protocol):
    """A connection in the caller's transaction (SQLAlchemy's, or history's pgdirect one)."""

    async def execute(self, stmt: Any, params: Any = None, /) -> Any: ...


@dataclass(frozen=True)
class Event:
    id: str
    owner_id: str
    type: str
    data: Mapping[str, Any]
    create_time_ms: int


def _columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("id", sa.String(36), nullable=False, unique=True),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("create_time_ms", sa.BigInteger, nullable=False),
        # NULL until the gateway has recorded the event's deliveries.
        sa.Column("ack_time_ms", sa.BigInteger, nullable=True),
    ]


def table(metadata: sa.MetaData) -> sa.Table:
    """The outbox table, in a service's metadata."""
    return sa.Table(TABLE, metadata, *_columns())


def create_table(op: Any) -> None:
    """The outbox table, for a service's migration (alembic `op`). A later change of the
    table is a new migration, never an edit here."""
    op.create_table(TABLE, *_columns())
    unacked = sa.text("ack_time_ms IS NULL")
    op.create_index(
        "ix_webhook_outbox_pending",
        TABLE,
        ["seq"],
        postgresql_where=unacked,
        sqlite_where=unacked,
    )
    op.create_index("ix_webhook_outbox_ack", TABLE, ["ack_time_ms"])
    op.create_index("ix_webhook_outbox_owner", TABLE, ["owner_id"])


def drop_table(op: Any) -> None:
    op.drop_table(TABLE)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_event(owner_id: str, type_: str, data: Mapping[str, Any], at_ms: int) -> Event:
    if type_ not in EVENT_TYPES:
        raise ValueError(f"unknown webhook event type {type_!r}")
    return Event(f"evt_{uuid.uuid4().hex}", owner_id, type_, dict(data), at_ms)


# One INSERT statement per outbox table, built once (history runs it on its PostgreSQL hot
# path, shared.pgdirect.reused, which knows a statement by its identity).
_INSERTS: dict[int, sa.Insert] = {}


def insert_statement(outbox: sa.Table) -> sa.Insert:
    stmt = _INSERTS.get(id(outbox))
    if stmt is None:
        stmt = _INSERTS[id(outbox)] = outbox.insert()
    return stmt


async def add(conn: Conn, outbox: sa.Table, events: Sequence[Event]) -> None:
    """Record `events` in the caller's transaction (the one that makes the change)."""
    if not events:
        return
    await conn.execute(
        insert_statement(outbox),
        [
            {
                "id": e.id,
                "owner_id": e.owner_id,
                "type": e.type,
                "data": json.dumps(e.data, separators=(",", ":"), sort_keys=True),
                "create_time_ms": e.create_time_ms,
            }
            for e in events
        ],
    )


async def pending(conn: Conn, outbox: sa.Table, requested_page_size: int) -> list[Event]:
    """The unacknowledged events, oldest first."""
    limit = page_size(requested_page_size, default=100, maximum=1000)
    c = outbox.c
    rows = await conn.execute(
        sa.select(c.id, c.owner_id, c.type, c.data, c.create_time_ms)
        .where(c.ack_time_ms.is_(None))
        .order_by(c.seq)
        .limit(limit)
    )
    return [Event(r[0], r[1], r[2], json.loads(r[3]), int(r[4])) for r in rows.all()]


async def acknowledge(
    conn: Conn, outbox: sa.Table, event_ids: Sequence[str], *, at_ms: int, retention_ms: int
) -> int:
    """Mark the events delivered to the gateway, and prune those acknowledged before the
    retention period; how many of `event_ids` were unacknowledged."""
    if len(event_ids) > MAX_ACKNOWLEDGED:
        raise InvalidArgument("event_ids", f"must hold at most {MAX_ACKNOWLEDGED} ids")
    c = outbox.c
    done = 0
    if event_ids:
        result = await conn.execute(
            sa.update(outbox)
            .where(c.id.in_(list(event_ids)), c.ack_time_ms.is_(None))
            .values(ack_time_ms=at_ms)
        )
        done = int(result.rowcount or 0)
    await conn.execute(sa.delete(outbox).where(c.ack_time_ms < at_ms - retention_ms))
    return done


def to_pb(event: Event) -> event_pb.WebhookEvent:
    out = event_pb.WebhookEvent(
        id=event.id,
        owner_id=event.owner_id,
        type=event.type,
        data_json=json.dumps(event.data, separators=(",", ":"), sort_keys=True),
    )
    out.create_time.FromMilliseconds(event.create_time_ms)
    return out


def from_pb(event: event_pb.WebhookEvent) -> Event:
    return Event(
        id=event.id,
        owner_id=event.owner_id,
        type=event.type,
        data=json.loads(event.data_json or "{}"),
        create_time_ms=event.create_time.ToMilliseconds(),
    )


# --- the two RPCs, served by every service's platform servicer (shared/owner_data.py) -----


def admin_caller(context: grpc.aio.ServicerContext[Any, Any]) -> None:
    """The outbox is the gateway's deliverer's: an identity with the admin scope."""
    owner_id(context)
    require_admin(context)


async def serve_list(
    context: grpc.aio.ServicerContext[Any, Any],
    unit: AbstractAsyncContextManager[Any],
    outbox: sa.Table,
    requested_page_size: int,
) -> list[event_pb.WebhookEvent]:
    """ListWebhookEvents: admin scope; `unit` is the service's read unit of work."""
    admin_caller(context)
    async with unit as conn:
        events = await pending(conn, outbox, requested_page_size)
    return [to_pb(e) for e in events]


async def serve_acknowledge(
    context: grpc.aio.ServicerContext[Any, Any],
    unit: AbstractAsyncContextManager[Any],
    outbox: sa.Table,
    event_ids: Sequence[str],
) -> int:
    """AcknowledgeWebhookEvents: admin scope; `unit` is the service's write unit of work."""
    admin_caller(context)
    retention_ms = Settings().webhook_outbox_retention_seconds * 1000
    async with unit as conn:
        return await acknowledge(conn, outbox, event_ids, at_ms=now_ms(), retention_ms=retention_ms)
