"""Test doubles and helpers of the scheduler tests.

FakeOrchestrator is a peer double: a real grpc.aio OrchestratorService on port 0 that counts
StartRun calls per run id and streams a minimal valid run (RUN_STARTED .. RUN_FINISHED). The
same server answers history's GetRun for the runs it ran (FakeHistory), as the real history
would: NOT_FOUND for a run never started, RUNNING until it finished, then SUCCEEDED.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import sqlalchemy as sa
from agentmesh.history.v1 import history_service_pb2 as hist_pb
from agentmesh.history.v1 import history_service_pb2_grpc as hist_grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as orch_pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2_grpc as orch_grpc
from agentmesh.type.v1 import run_event_pb2
from sqlalchemy.ext.asyncio import AsyncEngine

from services.scheduler import core, store, tables
from services.scheduler.core import Job, JobConfig, JobSpec, JobStatus
from services.scheduler.dispatch import ClaimLoop, Dispatcher
from services.scheduler.rows import job_values
from services.scheduler.schedule import Schedule, ScheduleType
from services.scheduler.service import MIGRATIONS
from services.scheduler.settings import SchedulerSettings
from shared import db
from shared.identity import OWNER_KEY
from shared.profiles import AUTOMATION_MEMORY_DEFAULT
from shared.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def _event(run_id: str, seq: int, **payload: Any) -> run_event_pb2.RunEvent:
    return run_event_pb2.RunEvent(run_id=run_id, sequence=seq, timestamp_ms=0, **payload)


class FakeOrchestrator(orch_grpc.OrchestratorServiceServicer):
    def __init__(self) -> None:
        self.starts: Counter[str] = Counter()
        self.requests: dict[str, orch_pb.StartRunRequest] = {}
        self.owners: dict[str, str] = {}
        self.follows: Counter[str] = Counter()
        # Failures to inject: the next N StartRun calls fail with this status code.
        self.fail_next = 0
        self.fail_code = grpc.StatusCode.UNAVAILABLE
        # Seconds a run takes between RUN_STARTED and RUN_FINISHED.
        self.run_seconds = 0.0
        # What history records of each run started (state), and when each run ended.
        self.states: dict[str, int] = {}
        self.ended: dict[str, asyncio.Event] = {}
        self.lookups: Counter[str] = Counter()
        self.tasks: set[asyncio.Task[None]] = set()
        # Stream this many events of the next run, then break its stream (UNAVAILABLE)
        # while the run goes on: its event log was lost.
        self.lose_stream_after: int | None = None

    def starts_by_thread(self) -> Counter[str]:
        return Counter(self.requests[run_id].thread_id for run_id in self.starts.elements())

    async def StartRun(
        self, request: orch_pb.StartRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[orch_pb.StartRunResponse]:
        self.starts[request.run_id] += 1
        self.requests[request.run_id] = request
        self.owners[request.run_id] = dict(context.invocation_metadata() or ()).get(OWNER_KEY, "")
        if self.fail_next > 0:
            self.fail_next -= 1
            await context.abort(self.fail_code, "injected failure")
        if request.run_id in self.states:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, "a run with this run_id exists")
        # The run goes on in a task of its own, as the orchestrator's do: a caller that goes
        # away (or whose stream is lost) does not stop it.
        self.states[request.run_id] = hist_pb.RUN_STATE_RUNNING
        self.ended[request.run_id] = asyncio.Event()
        task = asyncio.get_running_loop().create_task(self._run(request.run_id))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        lose, self.lose_stream_after = self.lose_stream_after, None
        yield orch_pb.StartRunResponse(
            event=_event(request.run_id, 1, run_started=run_event_pb2.RunStarted())
        )
        if lose is not None:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, "the run's event stream is unavailable"
            )
        await self.ended[request.run_id].wait()
        yield orch_pb.StartRunResponse(event=self._end(request.run_id))

    async def _run(self, run_id: str) -> None:
        if self.run_seconds:
            await asyncio.sleep(self.run_seconds)
        self.states[run_id] = hist_pb.RUN_STATE_SUCCEEDED
        self.ended[run_id].set()

    async def StreamRun(
        self, request: orch_pb.StreamRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[orch_pb.StreamRunResponse]:
        self.follows[request.run_id] += 1
        if request.run_id not in self.states:
            await context.abort(grpc.StatusCode.NOT_FOUND, "run not found")
        yield orch_pb.StreamRunResponse(
            event=_event(request.run_id, 1, run_started=run_event_pb2.RunStarted())
        )
        await self.ended[request.run_id].wait()
        yield orch_pb.StreamRunResponse(event=self._end(request.run_id))

    def _end(self, run_id: str) -> run_event_pb2.RunEvent:
        """The run's last event, as its recorded state says."""
        if self.states[run_id] == hist_pb.RUN_STATE_FAILED:
            return _event(
                run_id, 2, run_error=run_event_pb2.RunError(code="INTERNAL", message="it failed")
            )
        return _finished(run_id)


def _finished(run_id: str) -> run_event_pb2.RunEvent:
    return _event(
        run_id, 2, run_finished=run_event_pb2.RunFinished(outcome=run_event_pb2.RUN_OUTCOME_SUCCESS)
    )


class FakeHistory(hist_grpc.HistoryServiceServicer):
    """History's run lookup over the fake orchestrator's runs."""

    def __init__(self, orchestrator: FakeOrchestrator) -> None:
        self.orchestrator = orchestrator

    async def GetRun(
        self, request: hist_pb.GetRunRequest, context: grpc.aio.ServicerContext
    ) -> hist_pb.GetRunResponse:
        fake = self.orchestrator
        fake.lookups[request.run_id] += 1
        state = fake.states.get(request.run_id)
        if state is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "run not found")
        thread = fake.requests[request.run_id].thread_id
        return hist_pb.GetRunResponse(
            run=hist_pb.Run(id=request.run_id, thread_id=thread, state=state)
        )


@asynccontextmanager
async def fake_orchestrator() -> AsyncIterator[tuple[FakeOrchestrator, str]]:
    fake = FakeOrchestrator()
    server = grpc.aio.server()
    orch_grpc.add_OrchestratorServiceServicer_to_server(fake, server)
    hist_grpc.add_HistoryServiceServicer_to_server(FakeHistory(fake), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield fake, f"127.0.0.1:{port}"
    finally:
        await server.stop(0)
        for task in list(fake.tasks):
            task.cancel()
        await asyncio.gather(*fake.tasks, return_exceptions=True)


async def migrated_engine(settings: Settings) -> AsyncEngine:
    engine = db.create_engine(settings, "scheduler")
    await db.migrate(engine, MIGRATIONS, settings.schema_for("scheduler"))
    return engine


def fast_cfg(**overrides: Any) -> SchedulerSettings:
    values: dict[str, Any] = {
        "claim_interval_seconds": 0.05,
        "lease_seconds": 5.0,
        "backoff_initial_seconds": 0.0,
        "backoff_max_seconds": 0.0,
        "max_attempts": 3,
    }
    values.update(overrides)
    return SchedulerSettings(**values)


def daily_spec(local_time: str = "10:00", timezone: str = "Asia/Shanghai", **kw: Any) -> JobSpec:
    return JobSpec(
        title=kw.pop("title", "daily"),
        schedule=Schedule(ScheduleType.DAILY, local_time=local_time),
        timezone=timezone,
        config=JobConfig(prompt=kw.pop("prompt", "remember things"), tools=("memory_write",)),
        profile=AUTOMATION_MEMORY_DEFAULT,
        **kw,
    )


def due_job(owner: str, spec: JobSpec, slot: datetime, now: datetime) -> Job:
    """A job whose pending slot is `slot` (already due), as the claim finds it."""
    return Job(
        id=core.new_id(),
        owner_id=owner,
        spec=spec,
        status=JobStatus.ACTIVE,
        version=1,
        create_time=now,
        update_time=now,
        next_slot=slot,
        next_run_at=slot,
    )


async def insert_jobs(engine: AsyncEngine, jobs: Sequence[Job]) -> None:
    rows = [job_values(j) for j in jobs]
    async with engine.begin() as conn:
        for start in range(0, len(rows), 1000):
            await conn.execute(tables.jobs.insert(), rows[start : start + 1000])


async def db_now(engine: AsyncEngine) -> datetime:
    async with engine.connect() as conn:
        return await store.db_now(conn)


async def seed_due_jobs(engine: AsyncEngine, count: int, *, owners: int = 50) -> list[Job]:
    """`count` daily jobs whose latest slot (within the last day) is due now."""
    now = await db_now(engine)
    spec = daily_spec()
    slot = core.next_run("x", spec, now - timedelta(days=1), None).slot
    assert slot is not None and slot <= now
    jobs = [due_job(f"owner-{i % owners}", spec, slot, now) for i in range(count)]
    await insert_jobs(engine, jobs)
    return jobs


async def run_rows(engine: AsyncEngine) -> list[Any]:
    async with engine.connect() as conn:
        return list(await conn.execute(sa.select(tables.runs)))


async def count_runs(engine: AsyncEngine, state: str | None = None) -> int:
    query = sa.select(sa.func.count()).select_from(tables.runs)
    if state is not None:
        query = query.where(tables.runs.c.state == state)
    async with engine.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


class Runtime:
    """Closes an in-process replica: its dispatcher's tasks, then its channel."""

    def __init__(self, dispatcher: Dispatcher, channel: grpc.aio.Channel) -> None:
        self.dispatcher, self.channel = dispatcher, channel

    async def close(self) -> None:
        await self.dispatcher.close(0)
        await self.channel.close()


def local_runtime(
    engine: AsyncEngine,
    address: str,
    settings: Settings,
    cfg: SchedulerSettings,
    owner: str = "replica-a",
    clock: Any = None,
) -> tuple[ClaimLoop, Dispatcher, Runtime]:
    """An in-process replica (claim loop + dispatcher) without a gRPC server; `address`
    serves both the orchestrator and history (fake_orchestrator)."""
    channel = grpc.aio.insecure_channel(address)
    dispatcher = Dispatcher(engine, channel, channel, settings, cfg, owner)
    return ClaimLoop(engine, dispatcher, cfg, clock=clock), dispatcher, Runtime(dispatcher, channel)


def replica_env(settings: Settings, orchestrator: str, **scheduler: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTMESH_")}
    env.update(
        {
            "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'protos'}",
            "AGENTMESH_DATA_DIR": str(settings.data_dir),
            "AGENTMESH_DATABASE_URL": settings.database_url,
            "AGENTMESH_DB_SCHEMA_PREFIX": settings.db_schema_prefix,
            "AGENTMESH_ORCHESTRATOR_ADDR": orchestrator,
            # fake_orchestrator answers history's run lookups on the same address.
            "AGENTMESH_HISTORY_ADDR": orchestrator,
            "AGENTMESH_PORT": "0",
            "AGENTMESH_GRACE_SECONDS": "2",
            "AGENTMESH_LOG_LEVEL": "WARNING",
        }
    )
    for key, value in scheduler.items():
        env[f"AGENTMESH_SCHEDULER_{key.upper()}"] = str(value)
    return env


async def start_replica(env: dict[str, str], log_path: Path) -> asyncio.subprocess.Process:
    log = log_path.open("ab")
    try:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.scheduler",
            cwd=str(ROOT),
            env=env,
            stdout=log,
            stderr=log,
        )
    finally:
        log.close()


async def stop_replica(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def wait_for(predicate: Any, timeout: float, interval: float = 0.1) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if await predicate():
            return
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)
