"""The claim and dispatch cycle in-process: catch-up after downtime, a clock moved back,
retries with backoff, lease fencing, takeover of a dead replica's run, and the one rule for
"did this slot run" (history's run record decides, not the event stream)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import grpc
import pytest
import sqlalchemy as sa
from agentmesh.history.v1 import history_service_pb2 as hist_pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2_grpc as orch_grpc
from sqlalchemy.ext.asyncio import AsyncEngine

from services.scheduler import core, store, tables
from services.scheduler.core import CatchUpPolicy
from services.scheduler.dispatch import start_request
from services.scheduler.rows import job_from_row
from services.scheduler.schedule import fire_time, zone
from services.scheduler.schedule import next_slot as sched_next_slot
from shared.profiles import CHAT_DEFAULT
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

SHANGHAI = zone("Asia/Shanghai")


@pytest.fixture
async def env(
    settings: Settings,
) -> AsyncIterator[tuple[AsyncEngine, FakeOrchestrator, str, Settings]]:
    engine = await migrated_engine(settings)
    async with fake_orchestrator() as (fake, address):
        yield engine, fake, address, settings
    await engine.dispose()


async def get_job(engine: AsyncEngine, job_id: str) -> core.Job:
    async with engine.connect() as conn:
        row = (await conn.execute(sa.select(tables.jobs).where(tables.jobs.c.id == job_id))).one()
    return job_from_row(row)


def by_state(rows: list[Any]) -> dict[str, list[datetime]]:
    out: dict[str, list[datetime]] = {}
    for r in rows:
        out.setdefault(r.state, []).append(r.scheduled_slot)
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.parametrize(
    ("policy", "runs", "missed"),
    [(CatchUpPolicy.LATEST, 1, 3), (CatchUpPolicy.SKIP, 0, 4), (CatchUpPolicy.ALL, 2, 2)],
)
async def test_three_days_down_applies_the_catch_up_policy(
    env, policy: CatchUpPolicy, runs: int, missed: int
) -> None:
    engine, fake, address, settings = env
    now = await db_now(engine)
    # A daily slot two hours ago; the replicas stopped three days before it.
    local = (now - timedelta(hours=2)).astimezone(SHANGHAI)
    spec = daily_spec(f"{local:%H:%M}", catch_up_policy=policy)
    newest = core.next_run("x", spec, now - timedelta(days=1), None).slot
    assert newest is not None
    job = due_job("alice", spec, newest - timedelta(days=3), now)
    await insert_jobs(engine, [job])

    loop, dispatcher, channel = local_runtime(engine, address, settings, fast_cfg(catch_up_max=2))
    await loop.tick()
    await dispatcher.idle()
    await channel.close()

    states = by_state(await run_rows(engine))
    assert len(states.get("succeeded", [])) == runs
    assert len(states.get("missed", [])) == missed
    all_slots = sorted(states.get("succeeded", []) + states.get("missed", []))
    assert all_slots == [newest - timedelta(days=d) for d in (3, 2, 1, 0)]
    if runs:
        assert states["succeeded"][-1] == newest  # the newest slots are the ones that run
    assert sum(fake.starts.values()) == runs
    after = await get_job(engine, job.id)
    assert after.last_slot == newest and after.next_slot == newest + timedelta(days=1)
    # lastRunTime: set when a slot runs; slots only recorded missed are no run.
    assert (after.last_run_at is not None) == (runs > 0)


async def test_skip_still_runs_an_on_time_slot(env) -> None:
    engine, _, address, settings = env
    now = await db_now(engine)
    spec = daily_spec(catch_up_policy=CatchUpPolicy.SKIP)
    job = due_job("alice", spec, now - timedelta(seconds=5), now)  # due 5 s ago, within grace
    await insert_jobs(engine, [job])
    loop, dispatcher, channel = local_runtime(engine, address, settings, fast_cfg())
    await loop.tick()
    await dispatcher.idle()
    await channel.close()
    assert by_state(await run_rows(engine)) == {"succeeded": [job.next_slot]}


async def test_a_claimed_slot_sets_when_the_job_last_ran(env) -> None:
    """lastRunTime is set by every run: a scheduled slot here, a manual trigger in
    tests/scheduler/test_api.py."""
    engine, _, address, settings = env
    now = await db_now(engine)
    job = due_job("alice", daily_spec(), now - timedelta(seconds=5), now)
    await insert_jobs(engine, [job])
    assert (await get_job(engine, job.id)).last_run_at is None
    loop, dispatcher, channel = local_runtime(engine, address, settings, fast_cfg())
    await loop.tick()
    await dispatcher.idle()
    await channel.close()
    ran = (await get_job(engine, job.id)).last_run_at
    assert ran is not None and abs(ran - now) < timedelta(minutes=1)


async def test_clock_moved_back_an_hour_fires_no_slot_twice(env) -> None:
    engine, fake, address, settings = env
    now = await db_now(engine)
    spec = daily_spec()
    slot = core.next_run("x", spec, now - timedelta(days=1), None).slot
    assert slot is not None
    job = due_job("alice", spec, slot, now)
    await insert_jobs(engine, [job])
    clock = {"now": slot + timedelta(seconds=1)}
    loop, dispatcher, channel = local_runtime(
        engine, address, settings, fast_cfg(), clock=lambda: clock["now"]
    )

    await loop.tick()
    await dispatcher.idle()
    assert len(await run_rows(engine)) == 1

    # The clock moves back an hour: nothing is due again.
    clock["now"] = slot + timedelta(seconds=1) - timedelta(hours=1)
    await loop.tick()
    # A replica whose clock is an hour behind recomputes the job's next run from its "now":
    # it lands on the slot that already ran.
    behind = core.next_run(job.id, spec, slot - timedelta(hours=1), None)
    assert behind.slot == slot
    async with engine.begin() as conn:
        await conn.execute(
            tables.jobs.update()
            .where(tables.jobs.c.id == job.id)
            .values(next_slot=slot, next_run_at=slot)
        )
    # ... and with the high-water mark the same computation moves past it.
    assert core.next_run(job.id, spec, slot - timedelta(hours=1), slot).slot == slot + timedelta(
        days=1
    )
    for t in (
        slot - timedelta(minutes=30),
        slot + timedelta(seconds=1),
        slot + timedelta(minutes=5),
    ):
        clock["now"] = t
        await loop.tick()
    await dispatcher.idle()
    await channel.close()

    rows = await run_rows(engine)
    assert [(r.scheduled_slot, r.state) for r in rows] == [(slot, "succeeded")]
    assert sum(fake.starts.values()) == 1
    after = await get_job(engine, job.id)
    assert after.next_slot == slot + timedelta(days=1) and after.last_slot == slot


async def test_failures_retry_with_backoff_then_fail_with_their_history(env) -> None:
    engine, fake, address, settings = env
    fake.fail_next = 10
    now = await db_now(engine)
    job = due_job("alice", daily_spec(), now - timedelta(seconds=1), now)
    await insert_jobs(engine, [job])
    loop, dispatcher, channel = local_runtime(engine, address, settings, fast_cfg(max_attempts=3))
    for _ in range(10):
        await loop.tick()
        await dispatcher.idle()
    await channel.close()
    (row,) = await run_rows(engine)
    assert row.state == "failed" and row.attempt == 3
    assert [e["attempt"] for e in row.errors] == [1, 2, 3]
    assert all(e["error"].startswith("UNAVAILABLE") and e["at"] for e in row.errors)
    # A run the orchestrator refused never started: every retry starts the slot's same id.
    assert sum(fake.starts.values()) == 3 and list(fake.starts) == [
        core.orchestrator_run_id(row.id, 1)
    ]
    assert not fake.states


async def test_backoff_delays_the_next_attempt(env) -> None:
    engine, fake, address, settings = env
    fake.fail_next = 1
    now = await db_now(engine)
    job = due_job("alice", daily_spec(), now - timedelta(seconds=1), now)
    await insert_jobs(engine, [job])
    cfg = fast_cfg(backoff_initial_seconds=600, backoff_max_seconds=900)
    loop, dispatcher, channel = local_runtime(engine, address, settings, cfg)
    await loop.tick()
    await dispatcher.idle()
    await loop.tick()
    await dispatcher.idle()
    await channel.close()
    (row,) = await run_rows(engine)
    assert row.state == "pending" and row.attempt == 1
    failed_at = datetime.fromisoformat(row.errors[0]["at"])
    assert row.next_attempt_at - failed_at == timedelta(seconds=600)
    assert sum(fake.starts.values()) == 1


async def test_permanent_orchestrator_error_fails_without_retry(env) -> None:
    engine, fake, address, settings = env
    fake.fail_next, fake.fail_code = 1, grpc.StatusCode.INVALID_ARGUMENT
    now = await db_now(engine)
    await insert_jobs(engine, [due_job("alice", daily_spec(), now - timedelta(seconds=1), now)])
    loop, dispatcher, channel = local_runtime(engine, address, settings, fast_cfg(max_attempts=5))
    for _ in range(3):
        await loop.tick()
        await dispatcher.idle()
    await channel.close()
    (row,) = await run_rows(engine)
    assert row.state == "failed" and row.attempt == 1 and len(row.errors) == 1


async def test_stale_replicas_late_write_is_refused(env) -> None:
    engine, fake, address, settings = env
    now = await db_now(engine)
    await insert_jobs(engine, [due_job("alice", daily_spec(), now - timedelta(seconds=1), now)])
    stale, stale_dispatcher, ch1 = local_runtime(
        engine, address, settings, fast_cfg(lease_seconds=1), owner="stale"
    )
    claimed = await stale.claim_due()  # leased at attempt 1, then the replica stalls
    (order,) = claimed.orders

    async with engine.begin() as conn:  # its lease runs out
        await conn.execute(tables.runs.update().values(lease_expires_at=now - timedelta(seconds=1)))
    fresh, fresh_dispatcher, ch2 = local_runtime(
        engine, address, settings, fast_cfg(), owner="fresh"
    )
    (taken,) = await fresh.take_over()
    assert taken.run.attempt == 2 and taken.resume
    assert await fresh_dispatcher.dispatch(taken)

    # The stalled replica wakes up and completes attempt 1: nothing changes.
    assert not await stale_dispatcher.dispatch(order)
    async with engine.begin() as conn:
        assert not await store.fail_attempt(
            conn,
            order.run,
            core.RunError(1, "late", now),
            now=now,
            dispatched_at=now,
            orchestrator_run_id="x",
            retry_at=None,
        )
    await ch1.close()
    await ch2.close()
    (row,) = await run_rows(engine)
    assert row.state == "succeeded" and row.attempt == 2 and row.errors == []
    # The stalled attempt never started its run: the take-over started the slot's first id.
    assert row.orchestrator_run_id == core.orchestrator_run_id(row.id, 1)
    assert sum(fake.starts.values()) == 1


async def test_takeover_finds_the_dead_attempts_run_in_history_instead_of_starting_it_again(
    env,
) -> None:
    engine, fake, address, settings = env
    now = await db_now(engine)
    await insert_jobs(engine, [due_job("alice", daily_spec(), now - timedelta(seconds=1), now)])
    dead, _, ch1 = local_runtime(engine, address, settings, fast_cfg(), owner="dead")
    (order,) = (await dead.claim_due()).orders
    # The dead replica's StartRun reached the orchestrator before it died.
    first_id = core.orchestrator_run_id(order.run.id, 1)
    async with grpc.aio.insecure_channel(address) as ch:
        async for _ in orch_grpc.OrchestratorServiceStub(ch).StartRun(
            start_request(order.job, first_id)
        ):
            pass
    async with engine.begin() as conn:
        await conn.execute(tables.runs.update().values(lease_expires_at=now - timedelta(seconds=1)))

    alive, dispatcher, ch2 = local_runtime(engine, address, settings, fast_cfg(), owner="alive")
    await alive.tick()
    await dispatcher.idle()
    await ch1.close()
    await ch2.close()
    (row,) = await run_rows(engine)
    assert row.state == "succeeded" and row.attempt == 2 and row.orchestrator_run_id == first_id
    assert sum(fake.starts.values()) == 1 and fake.lookups[first_id] >= 1


async def _expire_leases(engine: AsyncEngine, now: datetime, **values: Any) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            tables.runs.update().values(lease_expires_at=now - timedelta(seconds=1), **values)
        )


async def test_third_attempt_follows_the_first_run_when_the_second_holder_died_following_it(
    env,
) -> None:
    # Issue 17: attempt 2 only followed run 1 (it never started a run of its own) and its
    # holder died too; attempt 3 must find run 1 still going, not start another.
    engine, fake, address, settings = env
    fake.run_seconds = 1.0
    now = await db_now(engine)
    await insert_jobs(engine, [due_job("alice", daily_spec(), now - timedelta(seconds=1), now)])
    first, _, ch1 = local_runtime(engine, address, settings, fast_cfg(), owner="first")
    (order,) = (await first.claim_due()).orders
    first_id = core.orchestrator_run_id(order.run.id, 1)
    async with grpc.aio.insecure_channel(address) as ch:  # run 1 starts, its holder dies
        call = orch_grpc.OrchestratorServiceStub(ch).StartRun(start_request(order.job, first_id))
        await call.read()
        call.cancel()
    await _expire_leases(engine, now, attempt=2)  # attempt 2's holder died while following

    third, dispatcher, ch2 = local_runtime(engine, address, settings, fast_cfg(), owner="third")
    (taken,) = await third.take_over()
    assert taken.run.attempt == 3 and taken.resume
    assert fake.states[first_id] == hist_pb.RUN_STATE_RUNNING
    assert await dispatcher.dispatch(taken)
    await ch1.close()
    await ch2.close()
    (row,) = await run_rows(engine)
    assert row.state == "succeeded" and row.attempt == 3 and row.orchestrator_run_id == first_id
    assert sum(fake.starts.values()) == 1 and fake.follows[first_id] == 1


async def test_a_lost_event_stream_is_no_failure_the_outcome_comes_from_history(env) -> None:
    engine, fake, address, settings = env
    fake.run_seconds, fake.lose_stream_after = 0.5, 1
    now = await db_now(engine)
    await insert_jobs(engine, [due_job("alice", daily_spec(), now - timedelta(seconds=1), now)])
    cfg = fast_cfg(outcome_poll_seconds=0.05)
    loop, dispatcher, channel = local_runtime(engine, address, settings, cfg)
    await loop.tick()
    await dispatcher.idle()
    for _ in range(3):  # nothing is retried afterwards either
        await loop.tick()
        await dispatcher.idle()
    await channel.close()
    (row,) = await run_rows(engine)
    assert row.state == "succeeded" and row.attempt == 1 and row.errors == []
    assert sum(fake.starts.values()) == 1 and row.orchestrator_run_id in fake.states


async def test_a_run_history_recorded_failed_moves_the_slot_to_its_next_run_id(env) -> None:
    engine, fake, address, settings = env
    now = await db_now(engine)
    job = due_job("alice", daily_spec(), now - timedelta(seconds=1), now)
    await insert_jobs(engine, [job])
    loop, dispatcher, channel = local_runtime(engine, address, settings, fast_cfg())
    (order,) = (await loop.claim_due()).orders
    first_id = core.orchestrator_run_id(order.run.id, 1)
    # Run 1 went into history and failed there; its attempt's holder died before recording it.
    fake.requests[first_id] = start_request(order.job, first_id)
    fake.states[first_id] = hist_pb.RUN_STATE_FAILED
    await _expire_leases(engine, now)
    await loop.tick()
    await dispatcher.idle()
    await channel.close()
    (row,) = await run_rows(engine)
    second_id = core.orchestrator_run_id(row.id, 2)
    assert row.state == "succeeded" and row.attempt == 2 and row.orchestrator_run_id == second_id
    assert list(fake.starts) == [second_id]


async def test_a_run_failed_while_watched_fails_the_attempt_and_the_retry_uses_the_next_id(
    env,
) -> None:
    engine, fake, address, settings = env
    now = await db_now(engine)
    await insert_jobs(engine, [due_job("alice", daily_spec(), now - timedelta(seconds=1), now)])
    loop, dispatcher, channel = local_runtime(engine, address, settings, fast_cfg())
    (order,) = (await loop.claim_due()).orders
    first_id = core.orchestrator_run_id(order.run.id, 1)
    fake.requests[first_id] = start_request(order.job, first_id)
    fake.states[first_id] = hist_pb.RUN_STATE_FAILED
    fake.ended[first_id] = asyncio.Event()
    fake.ended[first_id].set()
    # Attempt 1 finds its id taken (ALREADY_EXISTS), follows it: the run failed in history.
    assert await dispatcher.dispatch(order)
    (row,) = await run_rows(engine)
    assert row.state == "pending" and [e["attempt"] for e in row.errors] == [1]
    assert first_id in row.errors[0]["error"]
    await loop.tick()
    await dispatcher.idle()
    await channel.close()
    (row,) = await run_rows(engine)
    assert row.state == "succeeded" and row.orchestrator_run_id == core.orchestrator_run_id(
        row.id, 2
    )


async def test_a_slot_already_recorded_is_not_recorded_again(env) -> None:
    engine, fake, address, settings = env
    now = await db_now(engine)
    job = due_job("alice", daily_spec(), now - timedelta(seconds=1), now)
    await insert_jobs(engine, [job])
    loop, dispatcher, channel = local_runtime(engine, address, settings, fast_cfg())
    await loop.tick()
    await dispatcher.idle()
    # Forget the high-water mark too: UNIQUE(job_id, scheduled_slot) still holds the line.
    async with engine.begin() as conn:
        await conn.execute(
            tables.jobs.update().values(
                next_slot=job.next_slot, next_run_at=job.next_slot, last_slot=None
            )
        )
    await loop.tick()
    await dispatcher.idle()
    await channel.close()
    assert len(await run_rows(engine)) == 1 and sum(fake.starts.values()) == 1
    after = await get_job(engine, job.id)
    assert after.next_slot is not None and after.next_slot > now
    assert after.last_slot == job.next_slot


async def test_one_batch_of_mixed_jobs_plans_and_dispatches_each_by_its_own_schedule_and_spec(
    env,
) -> None:
    # The claim plans once per position and converts each distinct spec once: jobs that share
    # a slot but not a prompt, profile, zone, jitter or policy must still get their own.
    engine, fake, address, settings = env
    now = await db_now(engine)
    clock_now = now
    slot = core.next_run("x", daily_spec(), now - timedelta(days=1), None).slot
    assert slot is not None
    other_profile = CHAT_DEFAULT.model_copy(update={"name": "custom_chat"})
    specs = {
        "plain": daily_spec(prompt="plain prompt"),
        "same_slot_other_spec": replace(
            daily_spec(prompt="other prompt", title="other"), profile=other_profile
        ),
        "jittered": daily_spec(prompt="jittered prompt", jitter_seconds=600),
        "all_policy": daily_spec(prompt="catch up", catch_up_policy=CatchUpPolicy.ALL),
        "new_york": daily_spec("08:15", "America/New_York", prompt="new york"),
    }
    jobs = {
        "plain": due_job("alice", specs["plain"], slot, now),
        "same_slot_other_spec": due_job("bob", specs["same_slot_other_spec"], slot, now),
        "jittered": due_job("carol", specs["jittered"], slot, now),
        "all_policy": due_job("dave", specs["all_policy"], slot - timedelta(days=2), now),
    }
    ny_slot = core.next_run("x", specs["new_york"], now - timedelta(days=1), None).slot
    assert ny_slot is not None
    jobs["new_york"] = due_job("erin", specs["new_york"], ny_slot, now)
    await insert_jobs(engine, list(jobs.values()))

    loop, dispatcher, channel = local_runtime(
        engine, address, settings, fast_cfg(catch_up_max=2), clock=lambda: clock_now
    )
    claimed = await loop.claim_due()
    assert claimed.jobs == 5 and claimed.missed == 1
    assert sorted(o.job.id for o in claimed.orders) == sorted(
        [*(j.id for j in jobs.values()), jobs["all_policy"].id]
    )
    dispatcher.submit(claimed.orders)
    await dispatcher.idle()
    await channel.close()

    for name, job in jobs.items():
        spec = specs[name]
        tz = zone(spec.timezone)
        last = slot if name != "new_york" else ny_slot
        expected_next = sched_next_slot(spec.schedule, tz, max(clock_now, last))
        after = await get_job(engine, job.id)
        assert (after.last_slot, after.next_slot) == (last, expected_next), name
        assert after.next_run_at == fire_time(
            job.id, expected_next, spec.jitter_seconds, spec.schedule, tz
        ), name
        assert after.last_run_at == clock_now, name
        requests = [r for r in fake.requests.values() if r.thread_id == core.thread_id(job.id)]
        assert {r.messages[0].content[0].text.text for r in requests} == {spec.config.prompt}, name
        assert {(r.profile.name, r.time_zone) for r in requests} == {
            (spec.profile.name, spec.timezone)
        }, name
        assert len(requests) == (2 if name == "all_policy" else 1), name
    states = by_state(await run_rows(engine))
    assert states["missed"] == [slot - timedelta(days=2)]
    assert len(states["succeeded"]) == 6
