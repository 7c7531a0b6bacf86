"""The scheduler's owner data (shared/owner_data.py): every table with an owner column, in
deletion order (a job's runs before the job)."""

from __future__ import annotations

from services.scheduler import tables
from shared.owner_data import OwnedTable, Registry

REGISTRY = Registry(
    "scheduler",
    tables=(
        OwnedTable(tables.runs, label="job_runs"),
        OwnedTable(tables.jobs, label="jobs"),
        OwnedTable(tables.webhook_outbox, label="webhookEvents"),
    ),
    outbox=tables.webhook_outbox,
)
