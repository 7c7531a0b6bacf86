"""Scheduler at scale on PostgreSQL.

    AGENTMESH_BENCH_PG_URL=postgresql://postgres@127.0.0.1:5432/test \\
        python -m bench.scheduler --jobs 100000 --replicas 2

1. Claim-and-record throughput: N due jobs, R replica processes running the real claim
   transaction (lock due jobs FOR UPDATE SKIP LOCKED, record job runs, advance the jobs,
   load what dispatch needs of the leased runs' jobs) until nothing is due. Slots/s =
   recorded slots / wall time; duplicates are counted (job runs minus distinct (job, slot)).
   The 1-minute load average before and after is reported: the machine may be shared.
   Dispatch is left out here: it is measured next.
2. Dispatch lag: L jobs whose slot is a few seconds ahead, R real scheduler processes
   (`python -m services.scheduler`) dispatching to a fake orchestrator (a real grpc.aio
   OrchestratorService in this process); lag = dispatched_at - slot, p50/p99, once without
   jitter and once with --jitter seconds (then also lag after each run's jittered fire time).

Writes results/scheduler-<time>.json and drops its schemas.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import sqlalchemy as sa

from bench.stats import percentile
from services.scheduler import core, tables
from services.scheduler.dispatch import ClaimLoop, Dispatcher
from services.scheduler.rows import job_values
from services.scheduler.schedule import fire_time, zone
from services.scheduler.settings import SchedulerSettings
from shared.settings import Settings
from tests.conftest import drop_schemas
from tests.scheduler.helpers import (
    daily_spec,
    db_now,
    due_job,
    fake_orchestrator,
    migrated_engine,
    replica_env,
    start_replica,
    stop_replica,
)

ROOT = Path(__file__).resolve().parent.parent


def _settings(url: str, prefix: str) -> Settings:
    return Settings(
        database_url=url, db_schema_prefix=prefix, data_dir=Path("/tmp/agentmesh-bench")
    )


async def _seed(engine: Any, count: int, *, slot_in: float, jitter: int = 0) -> dict[str, datetime]:
    """`count` daily jobs of 1,000 owners, all with the same slot `slot_in` seconds from now;
    returns each job's fire time (slot + jitter)."""
    now = await db_now(engine)
    slot = now + timedelta(seconds=slot_in)
    spec = daily_spec(jitter_seconds=jitter)
    tz = zone(spec.timezone)
    fires: dict[str, datetime] = {}
    rows = []
    for i in range(count):
        job = due_job(f"owner-{i % 1000}", spec, slot, now)
        fire = fire_time(job.id, slot, jitter, spec.schedule, tz)
        job = core.Job(**{**job.__dict__, "next_run_at": fire})
        fires[job.id] = fire
        rows.append(job_values(job))
    async with engine.begin() as conn:
        for start in range(0, len(rows), 5000):
            await conn.execute(tables.jobs.insert(), rows[start : start + 5000])
    return fires


def _claim_worker(url: str, prefix: str, batch: int, start_at: float, out: Any) -> None:
    sys.path[:0] = [str(ROOT), str(ROOT / "protos")]
    out.put(asyncio.run(_claim_until_empty(url, prefix, batch, start_at)))


async def _claim_until_empty(url: str, prefix: str, batch: int, start_at: float) -> dict[str, Any]:
    from shared import db

    settings = _settings(url, prefix)
    engine = db.create_engine(settings, "scheduler")
    cfg = SchedulerSettings(batch_size=batch)
    # Claim only: the orders are not dispatched (phase 2 measures dispatch).
    channel = grpc.aio.insecure_channel("127.0.0.1:9")
    dispatcher = Dispatcher(engine, channel, channel, settings, cfg, f"bench-{os.getpid()}")
    loop = ClaimLoop(engine, dispatcher, cfg)
    await asyncio.sleep(max(0.0, start_at - time.time()))
    began = time.time()
    jobs = slots = empty = 0
    while empty < 2:
        result = await loop.claim_due()
        jobs += result.jobs
        slots += len(result.orders) + result.missed
        empty = empty + 1 if result.jobs == 0 else 0
    await channel.close()
    await engine.dispose()
    return {"jobs": jobs, "slots": slots, "began": began, "ended": time.time()}


async def _counts(engine: Any) -> tuple[int, int]:
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
    return int(total), int(distinct)


async def claim_throughput(url: str, jobs: int, replicas: int, batch: int) -> dict[str, Any]:
    prefix = f"bench{uuid.uuid4().hex[:8]}_"
    engine = await migrated_engine(_settings(url, prefix))
    try:
        t = time.time()
        await _seed(engine, jobs, slot_in=-60)
        print(f"seeded {jobs} due jobs in {time.time() - t:.1f} s", flush=True)
        async with engine.begin() as conn:
            await conn.execute(sa.text("ANALYZE automation_jobs"))
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        load_before = os.getloadavg()[0]
        start_at = time.time() + 3.0  # every worker imported and connected by then
        procs = [
            ctx.Process(target=_claim_worker, args=(url, prefix, batch, start_at, out))
            for _ in range(replicas)
        ]
        for p in procs:
            p.start()
        results = [out.get(timeout=600) for _ in procs]
        for p in procs:
            p.join()
        wall = max(r["ended"] for r in results) - min(r["began"] for r in results)
        total, distinct = await _counts(engine)
        return {
            "jobs": jobs,
            "replicas": replicas,
            "batch_size": batch,
            "wall_seconds": round(wall, 3),
            "slots_recorded": total,
            "slots_per_second": round(total / wall, 1),
            "duplicates": total - distinct,
            "per_replica_slots": [r["slots"] for r in results],
            "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        }
    finally:
        await engine.dispose()
        await drop_schemas(prefix)


async def dispatch_lag(url: str, jobs: int, replicas: int, jitter: int) -> dict[str, Any]:
    prefix = f"bench{uuid.uuid4().hex[:8]}_"
    settings = _settings(url, prefix)
    engine = await migrated_engine(settings)
    procs = []
    try:
        async with fake_orchestrator() as (fake, address):
            env = replica_env(settings, address, claim_interval_seconds=0.1, batch_size=1000)
            for i in range(replicas):
                procs.append(
                    await start_replica(env, Path(f"/tmp/agentmesh-bench-replica-{i}.log"))
                )
            await asyncio.sleep(3)  # replicas up before the slot
            fires = await _seed(engine, jobs, slot_in=5, jitter=jitter)
            deadline = time.time() + 5 + jitter + 300
            r = tables.runs
            while time.time() < deadline:
                async with engine.connect() as conn:
                    done = (
                        await conn.execute(
                            sa.select(sa.func.count())
                            .select_from(r)
                            .where(r.c.state == "succeeded")
                        )
                    ).scalar_one()
                if done >= jobs:
                    break
                await asyncio.sleep(0.5)
            async with engine.connect() as conn:
                rows = list(
                    await conn.execute(
                        sa.select(r.c.job_id, r.c.scheduled_slot, r.c.dispatched_at).where(
                            r.c.state == "succeeded"
                        )
                    )
                )
            total, distinct = await _counts(engine)
            starts = sum(fake.starts.values())
    finally:
        for p in procs:
            await stop_replica(p)
        await engine.dispose()
        await drop_schemas(prefix)
    lag = [(d - s).total_seconds() for _, s, d in rows]
    after_fire = [(d - fires[j]).total_seconds() for j, _, d in rows]
    result: dict[str, Any] = {
        "jobs": jobs,
        "replicas": replicas,
        "jitter_seconds": jitter,
        "succeeded": len(rows),
        "duplicates": total - distinct,
        "orchestrator_starts": starts,
        "lag_after_slot_p50_s": round(percentile(lag, 50), 3),
        "lag_after_slot_p99_s": round(percentile(lag, 99), 3),
    }
    if jitter:
        result["lag_after_fire_time_p50_s"] = round(percentile(after_fire, 50), 3)
        result["lag_after_fire_time_p99_s"] = round(percentile(after_fire, 99), 3)
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--lag-jobs", type=int, default=5000)
    parser.add_argument("--jitter", type=int, default=30)
    args = parser.parse_args()
    url = os.environ.get("AGENTMESH_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")

    report: dict[str, Any] = {"time": datetime.now(UTC).isoformat(), "cpus": os.cpu_count()}
    report["claim"] = await claim_throughput(url, args.jobs, args.replicas, args.batch)
    print(json.dumps(report["claim"]), flush=True)
    report["lag_without_jitter"] = await dispatch_lag(url, args.lag_jobs, args.replicas, 0)
    print(json.dumps(report["lag_without_jitter"]), flush=True)
    report["lag_with_jitter"] = await dispatch_lag(url, args.lag_jobs, args.replicas, args.jitter)
    print(json.dumps(report["lag_with_jitter"]), flush=True)

    out = ROOT / "results" / f"scheduler-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    asyncio.run(main())
