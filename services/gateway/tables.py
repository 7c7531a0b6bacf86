"""The gateway's tables that hold owners' data, as SQLAlchemy Core sees them (the migrations
under migrations/versions create them; the stores run named SQL against them). Described
here for the owner-data registry (owner_data.py), which deletes and exports by them."""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

owner_quotas = sa.Table(
    "owner_quotas",
    metadata,
    sa.Column("owner_id", sa.String(128), primary_key=True),
    sa.Column("runs_per_minute", sa.BigInteger),
    sa.Column("concurrent_runs", sa.BigInteger),
    sa.Column("tokens_per_day", sa.BigInteger),
    sa.Column("update_time_ms", sa.BigInteger),
)

usage_days = sa.Table(
    "usage_days",
    metadata,
    sa.Column("owner_id", sa.String(128), primary_key=True),
    sa.Column("day", sa.String(10), primary_key=True),
    sa.Column("runs", sa.BigInteger),
    sa.Column("failed_runs", sa.BigInteger),
    sa.Column("input_tokens", sa.BigInteger),
    sa.Column("output_tokens", sa.BigInteger),
    sa.Column("duration_ms", sa.BigInteger),
)

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("owner_id", sa.String(128)),
    sa.Column("admin", sa.Boolean),
    sa.Column("name", sa.String(200)),
    sa.Column("secret_sha256", sa.String(64)),
    sa.Column("create_time_ms", sa.BigInteger),
    sa.Column("last_used_time_ms", sa.BigInteger),
    sa.Column("revoke_time_ms", sa.BigInteger),
)

webhook_endpoints = sa.Table(
    "webhook_endpoints",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("owner_id", sa.String(128)),
    sa.Column("url", sa.Text),
    sa.Column("description", sa.String(200)),
    sa.Column("event_types", sa.Text),
    sa.Column("secret", sa.String(100)),
    sa.Column("create_time_ms", sa.BigInteger),
)

webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("endpoint_id", sa.String(64)),
    sa.Column("endpoint_owner_id", sa.String(128)),
    sa.Column("owner_id", sa.String(128)),
    sa.Column("event_id", sa.String(36)),
    sa.Column("event_type", sa.String(32)),
    sa.Column("payload", sa.Text),
    sa.Column("url", sa.Text),
    sa.Column("state", sa.String(16)),
    sa.Column("attempts", sa.Integer),
    sa.Column("replays", sa.Integer),
    sa.Column("next_attempt_ms", sa.BigInteger),
    sa.Column("last_attempt_ms", sa.BigInteger),
    sa.Column("last_status_code", sa.Integer),
    sa.Column("last_error", sa.Text),
    sa.Column("create_time_ms", sa.BigInteger),
)

webhook_endpoint_health = sa.Table(
    "webhook_endpoint_health",
    metadata,
    sa.Column("endpoint_id", sa.String(64), primary_key=True),
    sa.Column("endpoint_owner_id", sa.String(128)),
    sa.Column("consecutive_failures", sa.Integer),
    sa.Column("pauses", sa.Integer),
    sa.Column("paused_until_ms", sa.BigInteger),
    sa.Column("last_error", sa.Text),
    sa.Column("last_failure_ms", sa.BigInteger),
)
