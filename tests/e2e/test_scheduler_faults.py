"""Issue 17: no slot runs twice and none is missed under real faults, on real processes.

One suite per module (history, executor, orchestrator; on the PostgreSQL backend the
orchestrator's event log is a Redis of this module's own, on a free port, so stopping it
touches nobody else) and, per test, three scheduler replicas (`python -m services.scheduler`)
sharing one scheduler database. The test puts due jobs in that database and injects the
fault: kill -9 of the replica that holds a run's attempt, twice in a row; the event log lost
while runs are streaming; kill -9 at each kill point of the claim/dispatch cycle.

A slot "ran" once when its job run succeeded, history has exactly one run record among
the run ids the slot may use, and the job's thread stores exactly one reply.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy as sa
from agentmesh.history.v1 import history_service_pb2 as hist_pb
from agentmesh.history.v1 import history_service_pb2_grpc as hist_grpc
from agentmesh.type.v1 import message_pb2
from sqlalchemy.ext.asyncio import AsyncEngine

from services.launcher import Suite, free_port
from services.scheduler import core, tables
from services.scheduler.core import JobConfig, JobSpec
from services.scheduler.schedule import Schedule, ScheduleType
from shared.domain import ExecutorKind
from shared.identity import call_metadata
from shared.profiles import ExecutionProfile
from shared.settings import Settings
from tests.conftest import PG_URL, USES_POSTGRES, drop_schemas
from tests.e2e.conftest import _dump_logs, make_suite
from tests.e2e.test_resilience import _start_redis
from tests.scheduler.helpers import db_now, due_job, insert_jobs, migrated_engine

pytestmark = pytest.mark.e2e

TOKEN_LATENCY = 0.05
# The scripted worker echoes its input: ~130 tokens at TOKEN_LATENCY, a run of ~7 s, longer
# than two scheduler leases (the take-over pattern needs the first run still going).
LONG_PROMPT = " ".join(f"w{i}" for i in range(130))
# ~400 tokens (~20 s), the most a job's prompt holds: a replica that is started after the
# first one died still finds the run going, on a busy machine too.
LONGEST_PROMPT = " ".join(f"w{i}" for i in range(400))[: core.MAX_PROMPT_CHARS]
SHORT_PROMPT = "ping"
LEASE_SECONDS = 2.0
JOBS = 4
# A worker run without router or tools: what the job's snapshot asks the orchestrator for.
WORKER = ExecutionProfile(name="fault_worker", enable_router=False, executor=ExecutorKind.WORKER)
SCHEDULER_ENV = {
    "AGENTMESH_SCHEDULER_LEASE_SECONDS": str(LEASE_SECONDS),
    "AGENTMESH_SCHEDULER_CLAIM_INTERVAL_SECONDS": "0.1",
    "AGENTMESH_SCHEDULER_BACKOFF_INITIAL_SECONDS": "0.5",
    "AGENTMESH_SCHEDULER_BACKOFF_MAX_SECONDS": "1",
    "AGENTMESH_SCHEDULER_MAX_ATTEMPTS": "6",
    "AGENTMESH_SCHEDULER_OUTCOME_POLL_SECONDS": "0.2",
}


@dataclass
class Faults:
    base: Suite
    settings: Settings
    tmp: Path
    redis_port: int | None
    redis_proc: subprocess.Popen[bytes] | None
    replicas: list[Suite] = field(default_factory=list)
    started: int = 0  # replicas started so far (each logs to a folder of its own)

    def start_replica(self, kill_at: str = "") -> Suite:
        i = self.started = self.started + 1
        env = {k: v for k, v in self.base.env.items() if k.startswith("AGENTMESH_")}
        env.update(
            SCHEDULER_ENV,
            AGENTMESH_SCHEDULER_TEST_KILL_AT=kill_at,
            AGENTMESH_LOG_LEVEL=os.environ.get("SCHED_LOG", "INFO"),
        )
        replica = Suite(
            ports={**self.base.ports, "scheduler": free_port()},
            env=env,
            log_dir=self.tmp / f"scheduler-{i}",
            services=("scheduler",),
        )
        replica.start_service("scheduler")
        self.replicas.append(replica)
        return replica

    async def start_ready(self, count: int = 1, kill_at: str = "") -> list[Suite]:
        """Start `count` replicas and wait until each serves (it has migrated and claims)."""
        started = [self.start_replica(kill_at) for _ in range(count)]
        deadline = time.monotonic() + 60
        for replica in started:
            await asyncio.to_thread(replica.wait_ready, "scheduler", deadline)
        return started

    def alive(self) -> list[Suite]:
        return [r for r in self.replicas if r.procs["scheduler"].poll() is None]

    def by_pid(self, pid: int) -> Suite:
        [replica] = [r for r in self.replicas if r.procs["scheduler"].pid == pid]
        return replica

    def stop_replicas(self) -> None:
        for replica in self.replicas:
            replica.stop(grace=2)
        self.replicas.clear()


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faults]:
    tmp = tmp_path_factory.mktemp("sched-faults")
    prefix = f"f{uuid.uuid4().hex[:10]}_"
    env = {
        "AGENTMESH_SCRIPTED_TOKEN_LATENCY": str(TOKEN_LATENCY),
        "AGENTMESH_RUN_LEASE_SECONDS": "3",
        "AGENTMESH_RUN_TIMEOUT_SECONDS": "60",
    }
    redis_port = redis_proc = None
    if USES_POSTGRES:
        redis_port = free_port()
        redis_proc = _start_redis(redis_port)
        env["AGENTMESH_EVENT_LOG_URL"] = f"redis://127.0.0.1:{redis_port}/0"
    base = make_suite(tmp, prefix, **env)
    base.services = ("history", "executor", "orchestrator")
    settings = Settings(
        data_dir=tmp / "data",
        database_url=PG_URL if USES_POSTGRES else "",
        db_schema_prefix=prefix,
    )
    state = Faults(base, settings, tmp, redis_port, redis_proc)
    try:
        base.start(timeout=90)
    except RuntimeError:
        base.stop()
        _dump_logs(tmp / "logs")
        raise
    yield state
    state.stop_replicas()
    base.stop()
    if state.redis_proc is not None:
        state.redis_proc.kill()
        state.redis_proc.wait()
    if USES_POSTGRES:
        asyncio.run(drop_schemas(prefix))


@pytest.fixture
async def engine(faults: Faults) -> AsyncIterator[AsyncEngine]:
    engine = await migrated_engine(faults.settings)
    yield engine
    await engine.dispose()


@pytest.fixture
async def history(faults: Faults) -> AsyncIterator[hist_grpc.HistoryServiceStub]:
    async with grpc.aio.insecure_channel(faults.base.address("history")) as channel:
        yield hist_grpc.HistoryServiceStub(channel)


@pytest.fixture
def scheduler_logs(faults: Faults) -> Iterator[None]:
    yield
    failed = [
        r for r in faults.replicas if r.procs["scheduler"].poll() not in (None, 0, -signal.SIGKILL)
    ]
    for replica in failed:
        assert replica.log_dir is not None
        _dump_logs(replica.log_dir)
    faults.stop_replicas()


def _spec(prompt: str) -> JobSpec:
    return JobSpec(
        title="fault",
        schedule=Schedule(ScheduleType.DAILY, local_time="10:00"),
        timezone="Asia/Shanghai",
        config=JobConfig(prompt=prompt),
        profile=WORKER,
    )


async def _seed(engine: AsyncEngine, prompt: str, count: int = JOBS) -> list[core.Job]:
    """`count` jobs of their own owners whose latest daily slot is due now."""
    now = await db_now(engine)
    spec = _spec(prompt)
    slot = core.next_run("x", spec, now - timedelta(days=1), None).slot
    assert slot is not None and slot <= now
    jobs = [due_job(f"fault-{uuid.uuid4().hex[:8]}", spec, slot, now) for _ in range(count)]
    await insert_jobs(engine, jobs)
    return jobs


async def _job_runs(engine: AsyncEngine, jobs: list[core.Job]) -> dict[str, list[Any]]:
    async with engine.connect() as conn:
        rows = list(
            await conn.execute(
                sa.select(tables.runs).where(tables.runs.c.job_id.in_([j.id for j in jobs]))
            )
        )
    out: dict[str, list[Any]] = {j.id: [] for j in jobs}
    for row in rows:
        out[row.job_id].append(row)
    return out


async def _wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        await asyncio.sleep(0.05)


async def _record(
    history: hist_grpc.HistoryServiceStub, owner: str, run_id: str
) -> hist_pb.Run | None:
    try:
        reply = await history.GetRun(
            hist_pb.GetRunRequest(run_id=run_id), metadata=call_metadata(owner), timeout=5
        )
    except grpc.aio.AioRpcError as err:
        if err.code() == grpc.StatusCode.NOT_FOUND:
            return None
        raise
    return reply.run


async def _first_runs_running(
    engine: AsyncEngine, history: hist_grpc.HistoryServiceStub, jobs: list[core.Job]
) -> None:
    """Wait until every job's first attempt has its orchestrator run going in history."""

    async def running() -> bool:
        rows = await _job_runs(engine, jobs)
        for job in jobs:
            if len(rows[job.id]) != 1:
                return False
            record = await _record(
                history, job.owner_id, core.orchestrator_run_id(rows[job.id][0].id, 1)
            )
            if record is None or record.state != hist_pb.RUN_STATE_RUNNING:
                return False
        return True

    await _wait(running, 30, "the first runs did not start")


async def _holders(engine: AsyncEngine, jobs: list[core.Job], attempt: int) -> set[int]:
    """The pids of the replicas holding the jobs' runs at `attempt`, once all are there."""

    async def held() -> set[int] | None:
        rows = await _job_runs(engine, jobs)
        found = [r for rs in rows.values() for r in rs]
        if len(found) != len(jobs) or any(
            r.attempt != attempt or r.state != "dispatching" for r in found
        ):
            return None
        # The lease owner is "host:pid:nonce" (dispatch.replica_id).
        return {int(r.lease_owner.split(":")[-2]) for r in found}

    pids: set[int] = await _wait(held, 30, f"attempt {attempt} was not taken over")
    return pids


def _kill(faults: Faults, pids: set[int]) -> None:
    for pid in pids:
        proc = faults.by_pid(pid).procs["scheduler"]
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL


async def _replies(
    history: hist_grpc.HistoryServiceStub, job: core.Job
) -> list[message_pb2.Message]:
    page = await history.ListHistory(
        hist_pb.ListHistoryRequest(thread_id=core.thread_id(job.id), page_size=100),
        metadata=call_metadata(job.owner_id),
        timeout=5,
    )
    return [m for m in page.messages if m.kind == message_pb2.MESSAGE_KIND_AGENT_REPLY]


async def _assert_each_slot_ran_once(
    engine: AsyncEngine, history: hist_grpc.HistoryServiceStub, jobs: list[core.Job], timeout: float
) -> None:
    async def settled() -> bool:
        rows = await _job_runs(engine, jobs)
        return all(len(rs) == 1 and rs[0].state in ("succeeded", "failed") for rs in rows.values())

    await _wait(settled, timeout, "the job runs did not finish")
    await asyncio.sleep(LEASE_SECONDS + 0.5)  # a duplicate started late would show up now
    rows = await _job_runs(engine, jobs)
    for job in jobs:
        [row] = rows[job.id]  # 0 missed slots, none recorded twice
        assert row.state == "succeeded", (row.state, row.errors)
        records = [
            record
            for n in range(1, 7)
            if (record := await _record(history, job.owner_id, core.orchestrator_run_id(row.id, n)))
            is not None
        ]
        # Everything the orchestrator ran for this slot, finished: exactly one run, one reply.
        assert [r.id for r in records] == [row.orchestrator_run_id], [
            (r.id, r.state) for r in records
        ]
        assert records[0].state == hist_pb.RUN_STATE_SUCCEEDED
        replies = await _replies(history, job)
        assert len(replies) == 1, [m.run_id for m in replies]
        assert replies[0].run_id == row.orchestrator_run_id


async def test_two_successive_holders_killed_mid_run_run_the_slot_once(
    faults: Faults, engine: AsyncEngine, history: hist_grpc.HistoryServiceStub, scheduler_logs: None
) -> None:
    await faults.start_ready(3)
    jobs = await _seed(engine, LONG_PROMPT)
    await _first_runs_running(engine, history, jobs)
    _kill(faults, await _holders(engine, jobs, 1))
    # The take-over (attempt 2) happens while run 1 goes on; its holder dies too.
    second = await _holders(engine, jobs, 2)
    await asyncio.sleep(0.3)  # it is following run 1 now
    _kill(faults, second)
    if not faults.alive():
        faults.start_replica()
    await _assert_each_slot_ran_once(engine, history, jobs, timeout=60)
    rows = await _job_runs(engine, jobs)
    assert all(rs[0].attempt == 3 for rs in rows.values()), [rs[0].attempt for rs in rows.values()]


@pytest.mark.skipif(
    not USES_POSTGRES, reason="the embedded event log is in the orchestrator's memory"
)
async def test_event_log_lost_during_automation_runs_runs_each_slot_once(
    faults: Faults, engine: AsyncEngine, history: hist_grpc.HistoryServiceStub, scheduler_logs: None
) -> None:
    assert faults.redis_proc is not None and faults.redis_port is not None
    await faults.start_ready(3)
    jobs = await _seed(engine, LONG_PROMPT)
    await _first_runs_running(engine, history, jobs)
    await asyncio.sleep(0.5)  # tokens streaming
    faults.redis_proc.kill()
    faults.redis_proc.wait()
    await asyncio.sleep(1.0)
    # Back, empty (no persistence): every run's stream is gone, the runs go on.
    faults.redis_proc = _start_redis(faults.redis_port)
    await _assert_each_slot_ran_once(engine, history, jobs, timeout=60)


# Kill points of the claim/dispatch cycle; a point only a take-over reaches is reached by a
# second doomed replica after the first died where a take-over follows its run.
KILL_CHAINS = {
    "before_commit": ["before_commit"],
    "after_commit": ["after_commit"],
    "during_dispatch": ["during_dispatch"],
    "before_outcome": ["before_outcome"],
    "during_follow": ["during_dispatch", "during_follow"],
}


@pytest.mark.parametrize("point", list(KILL_CHAINS))
async def test_replica_killed_at_a_dispatch_point_runs_the_slot_once(
    faults: Faults,
    engine: AsyncEngine,
    history: hist_grpc.HistoryServiceStub,
    scheduler_logs: None,
    point: str,
) -> None:
    chain = KILL_CHAINS[point]
    prompt = LONGEST_PROMPT if point == "during_follow" else SHORT_PROMPT
    [doomed] = await faults.start_ready(1, chain[0])
    jobs = await _seed(engine, prompt)
    if len(chain) == 1:
        # The survivor boots (seconds) while the doomed replica, already claiming every
        # 0.1 s, reaches its point (within a second): the kill still comes first.
        faults.start_replica()
    for i, step in enumerate(chain):
        code = await asyncio.to_thread(doomed.procs["scheduler"].wait, 60)
        assert code == -signal.SIGKILL, f"{step}: exit code {code}"
        if i + 1 < len(chain):
            doomed = faults.start_replica(chain[i + 1])
    if len(chain) > 1:
        faults.start_replica()
    await _assert_each_slot_ran_once(engine, history, jobs, timeout=90)
