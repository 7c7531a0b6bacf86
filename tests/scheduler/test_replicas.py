"""Real scheduler processes (`python -m services.scheduler`) against one database and a fake
orchestrator: racing replicas dispatch every slot exactly once; a replica killed with
SIGKILL at any point loses no slot and doubles none.

Scale: AGENTMESH_TEST_SCHEDULER_JOBS due jobs (default 10,000 on PostgreSQL, 300 on the
embedded SQLite backend, where four writers share one file lock).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from services.scheduler import tables
from shared.settings import Settings
from tests.conftest import USES_POSTGRES
from tests.scheduler.helpers import (
    FakeOrchestrator,
    count_runs,
    fake_orchestrator,
    migrated_engine,
    replica_env,
    seed_due_jobs,
    start_replica,
    stop_replica,
    wait_for,
)

JOBS = int(os.environ.get("AGENTMESH_TEST_SCHEDULER_JOBS", "10000" if USES_POSTGRES else "300"))


@pytest.fixture
async def env(
    settings: Settings,
) -> AsyncIterator[tuple[AsyncEngine, FakeOrchestrator, str, Settings]]:
    engine = await migrated_engine(settings)
    async with fake_orchestrator() as (fake, address):
        yield engine, fake, address, settings
    await engine.dispose()


async def slot_stats(engine: AsyncEngine) -> tuple[int, int, int]:
    """(job runs, distinct (job, slot), succeeded)."""
    r = tables.runs
    async with engine.connect() as conn:
        total = (await conn.execute(sa.select(sa.func.count()).select_from(r))).scalar_one()
        distinct = (
            await conn.execute(
                sa.select(sa.func.count()).select_from(
                    sa.select(r.c.job_id, r.c.scheduled_slot).distinct().subquery()
                )
            )
        ).scalar_one()
        done = (
            await conn.execute(
                sa.select(sa.func.count()).select_from(r).where(r.c.state == "succeeded")
            )
        ).scalar_one()
    return total, distinct, done


async def test_four_replicas_racing_dispatch_every_slot_exactly_once(env, tmp_path: Path) -> None:
    # About 50 s for 10,000 jobs on PostgreSQL on a 2-core machine (CPU-bound: one gRPC
    # stream per dispatch on both ends).
    engine, fake, address, settings = env
    jobs = await seed_due_jobs(engine, JOBS)
    environment = replica_env(settings, address, batch_size=250, claim_interval_seconds=0.05)
    replicas = [await start_replica(environment, tmp_path / f"replica-{i}.log") for i in range(4)]
    try:

        async def all_done() -> bool:
            return (await slot_stats(engine))[2] >= JOBS

        await wait_for(all_done, timeout=180, interval=0.25)
        await asyncio.sleep(0.5)  # anything doubled late would show up now
    finally:
        for proc in replicas:
            await stop_replica(proc)
    total, distinct, done = await slot_stats(engine)
    assert total == distinct == done == JOBS
    assert sum(fake.starts.values()) == JOBS and max(fake.starts.values()) == 1
    by_thread = fake.starts_by_thread()
    assert set(by_thread) == {f"automation:{j.id}" for j in jobs} and max(by_thread.values()) == 1
    assert all(p.returncode == 0 for p in replicas), [p.returncode for p in replicas]


@pytest.mark.parametrize(
    "point", ["before_commit", "after_commit", "during_dispatch", "before_outcome"]
)
async def test_replica_killed_at_any_point_loses_no_slot_and_doubles_none(
    env, tmp_path: Path, point: str
) -> None:
    engine, fake, address, settings = env
    count = 40
    jobs = await seed_due_jobs(engine, count)
    fake.run_seconds = 0.5  # runs in flight when the kill comes
    doomed = await start_replica(
        replica_env(settings, address, test_kill_at=point, batch_size=count, lease_seconds=1.5),
        tmp_path / "doomed.log",
    )
    assert await asyncio.wait_for(doomed.wait(), 60) == -signal.SIGKILL
    recorded = await count_runs(engine)
    if point == "before_commit":
        assert recorded == 0  # the claim transaction died with the process
    else:
        assert recorded == count
    if point in ("before_commit", "after_commit"):
        assert not fake.starts
    else:
        assert fake.starts

    survivor = await start_replica(
        replica_env(settings, address, lease_seconds=1.5), tmp_path / "survivor.log"
    )
    try:

        async def all_done() -> bool:
            return (await slot_stats(engine))[2] >= count

        await wait_for(all_done, timeout=60, interval=0.2)
        await asyncio.sleep(0.5)
    finally:
        await stop_replica(survivor)
    total, distinct, done = await slot_stats(engine)
    assert total == distinct == done == count
    # One orchestrator run per slot: a run the dead replica started is found in history by
    # the survivor (and followed to its end if it is still going), not started again.
    by_thread = fake.starts_by_thread()
    assert set(by_thread) == {f"automation:{j.id}" for j in jobs}
    assert max(by_thread.values()) == 1
