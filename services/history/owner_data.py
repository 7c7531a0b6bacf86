"""The history service's owner data (shared/owner_data.py): every table with an owner
column, in deletion order (a run's approvals, refused tool calls and messages before the run,
runs before their thread)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from services.history import store, tables
from shared.errors import FailedPrecondition
from shared.owner_data import OwnedTable, Registry


async def runs_stopped(conn: AsyncConnection, owner: str) -> Exception | None:
    """A deletion under a running run would let its reply recreate the data: the owner's
    runs in flight are asked to cancel (committed with this transaction), and the deletion
    waits for a retry once they have stopped."""
    active = await store.active_run_ids(conn, owner)
    if not active:
        return None
    await store.request_cancel(conn, owner, active)
    return FailedPrecondition(
        f"{len(active)} run(s) still in flight; their cancellation was requested, "
        "retry when they have stopped",
        reason="RUNS_IN_FLIGHT",
    )


REGISTRY = Registry(
    "history",
    tables=(
        OwnedTable(tables.interrupt_answers),
        OwnedTable(tables.tool_denials),
        # message_pb is the serving copy of the exported columns.
        OwnedTable(tables.messages, omit=("message_pb",)),
        OwnedTable(tables.runs),
        OwnedTable(tables.threads),
        OwnedTable(tables.owner_sequences),
        # The entries name runs: they become their sums per UTC day (usage_totals).
        OwnedTable(tables.usage_ledger, label="usageEntries", delete=store.keep_usage_totals),
        OwnedTable(
            tables.usage_totals,
            kept="usage sums per UTC day for billing and quotas, without run ids or content",
        ),
        OwnedTable(
            tables.deletions,
            kept="the audit record of each deletion: who asked, when, what went, no content",
        ),
        OwnedTable(tables.webhook_outbox, label="webhookEvents"),
    ),
    outbox=tables.webhook_outbox,
    guard=runs_stopped,
)
