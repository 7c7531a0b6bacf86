"""The scheduler's webhook outbox (shared/outbox.py): a job run's end is one event, written
with the end; a failed attempt that will be retried is none."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.scheduler import tables
from shared import outbox
from shared.settings import Settings
from tests.scheduler.helpers import (
    FakeOrchestrator,
    daily_spec,
    db_now,
    due_job,
    fake_orchestrator,
    fast_cfg,
    insert_jobs,
    local_runtime,
    migrated_engine,
    run_rows,
)


@pytest.fixture
async def env(settings: Settings) -> AsyncIterator[tuple[AsyncEngine, FakeOrchestrator, str]]:
    engine = await migrated_engine(settings)
    async with fake_orchestrator() as (fake, address):
        yield engine, fake, address
    await engine.dispose()


async def _events(engine: AsyncEngine) -> list[outbox.Event]:
    async with engine.connect() as conn:
        return await outbox.pending(conn, tables.webhook_outbox, 100)


async def _run_job(
    env: tuple[AsyncEngine, FakeOrchestrator, str], settings: Settings, ticks: int, **cfg: int
) -> None:
    engine, _, address = env
    now = await db_now(engine)
    job = due_job("alice", daily_spec(), now - timedelta(seconds=1), now)
    await insert_jobs(engine, [job])
    loop, dispatcher, channel = local_runtime(engine, address, settings, fast_cfg(**cfg))
    for _ in range(ticks):
        await loop.tick()
        await dispatcher.idle()
    await channel.close()


async def test_a_job_run_that_succeeds_is_one_succeeded_event(
    env: tuple[AsyncEngine, FakeOrchestrator, str], settings: Settings
) -> None:
    await _run_job(env, settings, 2)
    (row,) = await run_rows(env[0])
    [event] = await _events(env[0])
    assert (event.owner_id, event.type) == ("alice", "job_run.succeeded")
    assert event.data["jobRunId"] == row.id and event.data["jobId"] == row.job_id
    assert event.data["runId"] == row.orchestrator_run_id
    assert json.loads(outbox.to_pb(event).data_json) == event.data


async def test_a_job_run_that_fails_after_its_retries_is_one_failed_event(
    env: tuple[AsyncEngine, FakeOrchestrator, str], settings: Settings
) -> None:
    env[1].fail_next = 10
    await _run_job(env, settings, 10, max_attempts=3)
    (row,) = await run_rows(env[0])
    assert row.state == "failed"
    [event] = await _events(env[0])
    assert event.type == "job_run.failed"
    assert event.data["attempt"] == 3 and event.data["error"].startswith("UNAVAILABLE")
