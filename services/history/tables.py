"""The history service's tables as SQLAlchemy Core sees them. The migrations under
services/history/migrations/versions create them, with what Core does not describe here: the
partial indexes on the visibility mask, the constraints and the defaults."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from shared import outbox
from shared.db import UtcDateTime

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
metadata_obj = sa.MetaData()

threads = sa.Table(
    "threads",
    metadata_obj,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("runtime_mode", sa.String),
    sa.Column("create_time", UtcDateTime),
    sa.Column("update_time", UtcDateTime),
    sa.Column("message_count", sa.BigInteger),
)

messages = sa.Table(
    "messages",
    metadata_obj,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("thread_id", sa.String),
    sa.Column("position", sa.BigInteger),
    sa.Column("run_id", sa.String),
    sa.Column("role", sa.String),
    sa.Column("kind", sa.String),
    sa.Column("visibility_mask", sa.Integer),
    sa.Column("name", sa.String),
    sa.Column("content", _JSON),
    sa.Column("metadata", _JSON),
    sa.Column("origin", sa.String),
    sa.Column("executor", sa.String),
    sa.Column("execution_profile_name", sa.String),
    sa.Column("input_tokens", sa.BigInteger),
    sa.Column("output_tokens", sa.BigInteger),
    sa.Column("finished_reason", sa.String),
    sa.Column("created_at", UtcDateTime),
    sa.Column("owner_seq", sa.BigInteger),
    sa.Column("message_pb", sa.LargeBinary),
)
# Per owner, the last commit sequence number given to one of their messages.
owner_sequences = sa.Table(
    "owner_sequences",
    metadata_obj,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("last_seq", sa.BigInteger, nullable=False),
)
# Everything but the serving copy: what the domain Message is built from (rows.message_from_row).
MESSAGE_FIELDS = [c for c in messages.c if c.name != "message_pb"]

runs = sa.Table(
    "runs",
    metadata_obj,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("thread_id", sa.String),
    sa.Column("state", sa.String),
    sa.Column("origin", sa.String),
    sa.Column("profile", _JSON),
    sa.Column("profile_name", sa.String),
    sa.Column("create_time", UtcDateTime),
    sa.Column("start_time", UtcDateTime),
    sa.Column("finish_time", UtcDateTime),
    sa.Column("error_code", sa.String),
    sa.Column("error_message", sa.String),
    sa.Column("thread_seq", sa.BigInteger),
    sa.Column("cancel_requested", sa.Boolean),
    sa.Column("rolled_back", sa.Boolean),
    sa.Column("lease_holder", sa.String),
    sa.Column("lease_expire_time", UtcDateTime),
    sa.Column("input_tokens", sa.BigInteger),
    sa.Column("output_tokens", sa.BigInteger),
    sa.Column("usage_estimated", sa.Boolean),
)

# The usage ledger: one entry per finished run (store.record_usage), written once in the
# transaction that ends the run and never changed; deleting a thread leaves it. Quotas, GET
# /usage and billing read it (with usage_totals), not the run records.
usage_ledger = sa.Table(
    "usage_ledger",
    metadata_obj,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("run_id", sa.String, primary_key=True),
    # The UTC day (YYYY-MM-DD) the run was created on: the day it counts on.
    sa.Column("day", sa.String),
    sa.Column("origin", sa.String),
    sa.Column("state", sa.String),
    sa.Column("input_tokens", sa.BigInteger),
    sa.Column("output_tokens", sa.BigInteger),
    sa.Column("usage_estimated", sa.Boolean),
    sa.Column("duration_ms", sa.BigInteger),
    sa.Column("record_time", UtcDateTime),
)
# What a deleted owner's ledger entries leave: their sums per owner and UTC day, without
# run ids or anything of the runs' content (api-endpoints.md, owner deletion).
usage_totals = sa.Table(
    "usage_totals",
    metadata_obj,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("day", sa.String, primary_key=True),
    sa.Column("runs", sa.BigInteger),
    sa.Column("failed_runs", sa.BigInteger),
    sa.Column("automation_runs", sa.BigInteger),
    sa.Column("input_tokens", sa.BigInteger),
    sa.Column("output_tokens", sa.BigInteger),
    sa.Column("usage_estimated", sa.Boolean),
    sa.Column("duration_ms", sa.BigInteger),
)

tool_denials = sa.Table(
    "tool_denials",
    metadata_obj,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("run_id", sa.String, primary_key=True),
    sa.Column("tool_call_id", sa.String, primary_key=True),
    sa.Column("thread_id", sa.String),
    sa.Column("tool_name", sa.String),
    sa.Column("arguments_sha256", sa.String),
    sa.Column("reason", sa.String),
    sa.Column("origin", sa.String),
    sa.Column("executor", sa.String),
    sa.Column("execution_profile_name", sa.String),
    sa.Column("created_at", UtcDateTime),
)

# The approvals (tool call ids) a run answered, taken by it when it was admitted (its
# resume) or when it ended (what its output settled): each is answered by one run only.
# Deleted with the run (ON DELETE CASCADE).
interrupt_answers = sa.Table(
    "interrupt_answers",
    metadata_obj,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("thread_id", sa.String, primary_key=True),
    sa.Column("tool_call_id", sa.String, primary_key=True),
    sa.Column("run_id", sa.String),
    sa.Column("created_at", UtcDateTime),
)

deletions = sa.Table(
    "deletions",
    metadata_obj,
    sa.Column("owner_id", sa.String, primary_key=True),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("kind", sa.String),
    sa.Column("thread_id", sa.String),
    sa.Column("state", sa.String),
    sa.Column("steps", _JSON),
    sa.Column("requested_by", sa.String),
    sa.Column("create_time", UtcDateTime),
    sa.Column("finish_time", UtcDateTime),
)

# The events of this service's changes waiting for webhook delivery (shared/outbox.py).
webhook_outbox = outbox.table(metadata_obj)
