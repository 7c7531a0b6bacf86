"""The gateway with the REAL scheduler service as its peer (the other peers are the doubles
of peers.py): bind these fixtures in a test module to override conftest's gw_settings."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from services.scheduler.service import build
from services.scheduler.settings import SchedulerSettings
from shared.settings import Settings
from tests.conftest import USES_POSTGRES, drop_schemas, make_settings
from tests.gateway.conftest import Peers, gateway_settings
from tests.grpc_helpers import running_service


@pytest.fixture(scope="module")
async def scheduler_addr(
    tmp_path_factory: pytest.TempPathFactory, peers: Peers
) -> AsyncIterator[str]:
    """The scheduler on port 0, its own schema (SQLite or PostgreSQL); its runs are
    dispatched to the orchestrator double."""
    prefix = f"s{uuid.uuid4().hex[:12]}_"
    settings = make_settings(
        tmp_path_factory.mktemp("scheduler"),
        prefix,
        orchestrator_addr=peers.addrs["orchestrator"],
    )
    cfg = SchedulerSettings(
        claim_interval_seconds=0.1, lease_seconds=5.0, backoff_initial_seconds=0.0, max_attempts=2
    )
    try:
        async with running_service("scheduler", lambda s: build(s, cfg), settings) as addr:
            yield addr
    finally:
        if USES_POSTGRES:
            await drop_schemas(prefix)


@pytest.fixture(scope="module")
def gw_settings(base_settings: Settings, peers: Peers, scheduler_addr: str) -> Settings:
    return gateway_settings(base_settings, {**peers.addrs, "scheduler": scheduler_addr})
