"""The gateway's own owner data (shared/owner_data.py): access settings (API keys, an admin's
quota override), webhook endpoints and deliveries, and the usage rows an earlier version
counted here. An owner deletion's last step deletes them, so a deleted owner's API key stops
answering, and the export has them (never a key's hash or an endpoint's secret)."""

from __future__ import annotations

from services.gateway import tables
from shared.owner_data import OwnedTable, Registry

REGISTRY = Registry(
    "gateway",
    tables=(
        # An owner's events delivered to the deployment's endpoints, and every delivery to
        # the owner's own endpoints.
        OwnedTable(
            tables.webhook_deliveries,
            owner_columns=("owner_id", "endpoint_owner_id"),
            label="webhookDeliveries",
        ),
        OwnedTable(tables.webhook_endpoint_health, owner_columns=("endpoint_owner_id",)),
        OwnedTable(tables.webhook_endpoints, label="webhookEndpoints", omit=("secret",)),
        OwnedTable(tables.api_keys, label="apiKeys", omit=("secret_sha256",)),
        OwnedTable(tables.owner_quotas, label="quotaOverrides"),
        OwnedTable(tables.usage_days),
    ),
)
