"""SchedulerService over gRPC: validation, idempotent create, optimistic update, owner
isolation, pause/resume, trigger, default jobs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from agentmesh.scheduler.v1 import scheduler_service_pb2 as pb
from agentmesh.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from agentmesh.type.v1 import execution_profile_pb2, message_pb2

from services.scheduler import core
from services.scheduler.service import build
from shared.errors import from_rpc_error
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, profile_to_pb
from shared.settings import Settings
from tests.grpc_helpers import channel, owner_md, running_service
from tests.scheduler.helpers import FakeOrchestrator, fake_orchestrator, fast_cfg

ALICE = owner_md("alice")
BOB = owner_md("bob")


@pytest.fixture
async def api(
    settings: Settings,
) -> AsyncIterator[tuple[pb_grpc.SchedulerServiceStub, FakeOrchestrator]]:
    async with fake_orchestrator() as (fake, address):
        s = settings.model_copy(update={"orchestrator_addr": address})
        async with running_service("scheduler", lambda st: build(st, fast_cfg()), s) as addr:
            async with channel(addr) as ch:
                yield pb_grpc.SchedulerServiceStub(ch), fake


def job_pb(**kw: object) -> pb.Job:
    values: dict[str, object] = {
        "title": "daily digest",
        "schedule": pb.Schedule(type=pb.SCHEDULE_TYPE_DAILY, local_time="10:00"),
        "timezone": "Europe/London",
        "config": pb.JobConfig(prompt="summarise my day", tools=["memory_write"]),
        "execution_profile": profile_to_pb(AUTOMATION_MEMORY_DEFAULT),
    }
    values.update(kw)
    return pb.Job(**values)


async def create(stub: pb_grpc.SchedulerServiceStub, md: object = ALICE, **kw: object) -> pb.Job:
    resp = await stub.CreateJob(pb.CreateJobRequest(job=job_pb(**kw)), metadata=md)
    return resp.job


async def expect_code(call: object, code: grpc.StatusCode) -> object:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        # The call object of an aio stub is awaitable.
        await call  # type: ignore[misc]
    assert info.value.code() == code
    return from_rpc_error(info.value)


async def test_create_computes_next_run_in_utc_from_local_time(api) -> None:
    stub, _ = api
    job = await create(stub)
    assert job.status == pb.JOB_STATUS_ACTIVE and job.version == 1
    nxt = job.next_run_time.ToDatetime(tzinfo=UTC)
    assert nxt > datetime.now(UTC)
    local = nxt.astimezone(__import__("zoneinfo").ZoneInfo("Europe/London"))
    assert (local.hour, local.minute) == (10, 0)
    assert job.execution_profile.executor == execution_profile_pb2.EXECUTOR_MEMORY


async def test_timezone_defaults_to_shanghai(api) -> None:
    stub, _ = api
    assert (await create(stub, timezone="")).timezone == "Asia/Shanghai"


async def test_missing_profile_gets_the_automation_default_snapshot(api) -> None:
    stub, _ = api
    job = await stub.CreateJob(
        pb.CreateJobRequest(
            job=pb.Job(
                title="t",
                schedule=pb.Schedule(type=pb.SCHEDULE_TYPE_DAILY, local_time="10:00"),
                config=pb.JobConfig(prompt="p"),
            )
        ),
        metadata=ALICE,
    )
    assert job.job.execution_profile.name == "automation_memory_default"
    # No tools declared: the memory tools the profile allows, so the job can do its work.
    assert list(job.job.config.tools) == ["memory_write", "memory_forget"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"config": pb.JobConfig(prompt="")}, "job.config.prompt"),
        ({"config": pb.JobConfig(prompt="   ")}, "job.config.prompt"),
        ({"config": pb.JobConfig(prompt="x" * 2001)}, "job.config.prompt"),
        ({"config": pb.JobConfig(prompt="p", tools=["shell_exec"])}, "job.config.tools"),
        ({"timezone": "Mars/Base"}, "job.timezone"),
        (
            {"schedule": pb.Schedule(type=pb.SCHEDULE_TYPE_DAILY, local_time="25:00")},
            "job.schedule.local_time",
        ),
        (
            {"schedule": pb.Schedule(type=pb.SCHEDULE_TYPE_CRON, cron="not cron")},
            "job.schedule.cron",
        ),
        ({"schedule": pb.Schedule()}, "job.schedule.type"),
        ({"title": ""}, "job.title"),
        ({"jitter_seconds": -1}, "job.jitter_seconds"),
        # The same limits as at the HTTP edge, whatever the backend (PostgreSQL refuses NUL
        # and text longer than its column; SQLite would keep both).
        (
            {"schedule": pb.Schedule(type=pb.SCHEDULE_TYPE_DAILY, local_time="03:00\n")},
            "job.schedule.local_time",
        ),
        (
            {
                "schedule": pb.Schedule(
                    type=pb.SCHEDULE_TYPE_CRON, cron="0 0 * * " + ",".join(["1"] * 2496)
                )
            },
            "job.schedule.cron",
        ),
        ({"title": "a\x00b"}, "job.title"),
        ({"config": pb.JobConfig(prompt="a\x00b")}, "job.config.prompt"),
        (
            {"config": pb.JobConfig(prompt="p", tools=[f"t{i}" for i in range(10_000)])},
            "job.config.tools",
        ),
        (
            {
                "execution_profile": execution_profile_pb2.ExecutionProfile(
                    name="a\x00b", executor=execution_profile_pb2.EXECUTOR_MEMORY
                )
            },
            "job.execution_profile.name",
        ),
        (
            {"execution_profile": execution_profile_pb2.ExecutionProfile(enable_router=False)},
            "job.execution_profile.executor",
        ),
        (
            {
                "execution_profile": execution_profile_pb2.ExecutionProfile(
                    executor=execution_profile_pb2.EXECUTOR_MEMORY,
                    tool_policy=execution_profile_pb2.ToolPolicy(allowlist=["rm_rf"]),
                )
            },
            "job.execution_profile.tool_policy.allowlist",
        ),
        # A memory job that could call neither memory_write nor memory_forget would fail
        # every attempt (MEMORY_OUTPUT_UNUSABLE): refused when it is made.
        ({"config": pb.JobConfig(prompt="p", tools=["memory_search"])}, "job.config.tools"),
        (
            {
                "execution_profile": execution_profile_pb2.ExecutionProfile(
                    executor=execution_profile_pb2.EXECUTOR_MEMORY,
                    tool_policy=execution_profile_pb2.ToolPolicy(allowlist=["memory_search"]),
                )
            },
            "job.execution_profile.tool_policy.allowlist",
        ),
    ],
)
async def test_invalid_job_is_rejected_naming_the_field(
    api, overrides: dict[str, object], field: str
) -> None:
    stub, _ = api
    err = await expect_code(
        stub.CreateJob(pb.CreateJobRequest(job=job_pb(**overrides)), metadata=ALICE),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    # The error the helper raises carries the violations.
    assert err.violations[0][0] == field  # type: ignore[attr-defined]


async def test_prompt_of_exactly_2000_characters_is_accepted(api) -> None:
    stub, _ = api
    job = await create(
        stub, config=pb.JobConfig(prompt="记" * 2000, tools=["memory_write", "memory_search"])
    )
    assert len(job.config.prompt) == 2000


async def test_create_with_the_same_request_id_creates_once(api) -> None:
    stub, _ = api
    req = pb.CreateJobRequest(job=job_pb(), request_id="req-1")
    first, second = await asyncio.gather(
        stub.CreateJob(req, metadata=ALICE), stub.CreateJob(req, metadata=ALICE)
    )
    assert first.job.id == second.job.id
    listed = await stub.ListJobs(pb.ListJobsRequest(), metadata=ALICE)
    assert [j.id for j in listed.jobs] == [first.job.id]
    # The same request id of another owner is another job.
    other = await stub.CreateJob(req, metadata=BOB)
    assert other.job.id != first.job.id


async def test_update_with_the_current_version_applies_and_bumps_it(api) -> None:
    stub, _ = api
    job = await create(stub)
    job.title = "renamed"
    job.schedule.local_time = "07:30"
    updated = (await stub.UpdateJob(pb.UpdateJobRequest(job=job), metadata=ALICE)).job
    assert updated.version == 2 and updated.title == "renamed"
    assert (
        updated.next_run_time.ToDatetime(tzinfo=UTC)
        .astimezone(__import__("zoneinfo").ZoneInfo("Europe/London"))
        .strftime("%H:%M")
        == "07:30"
    )


async def test_stale_update_is_aborted(api) -> None:
    stub, _ = api
    job = await create(stub)
    fresh = pb.Job()
    fresh.CopyFrom(job)
    fresh.title = "first writer"
    await stub.UpdateJob(pb.UpdateJobRequest(job=fresh), metadata=ALICE)
    job.title = "second writer, stale"
    await expect_code(
        stub.UpdateJob(pb.UpdateJobRequest(job=job), metadata=ALICE), grpc.StatusCode.ABORTED
    )
    got = (await stub.GetJob(pb.GetJobRequest(job_id=job.id), metadata=ALICE)).job
    assert got.title == "first writer"


async def test_another_owners_job_is_not_found_everywhere(api) -> None:
    stub, fake = api
    job = await create(stub)
    nf = grpc.StatusCode.NOT_FOUND
    await expect_code(stub.GetJob(pb.GetJobRequest(job_id=job.id), metadata=BOB), nf)
    await expect_code(stub.UpdateJob(pb.UpdateJobRequest(job=job), metadata=BOB), nf)
    await expect_code(stub.PauseJob(pb.PauseJobRequest(job_id=job.id), metadata=BOB), nf)
    await expect_code(stub.ResumeJob(pb.ResumeJobRequest(job_id=job.id), metadata=BOB), nf)
    await expect_code(stub.TriggerJob(pb.TriggerJobRequest(job_id=job.id), metadata=BOB), nf)
    await expect_code(stub.ListJobRuns(pb.ListJobRunsRequest(job_id=job.id), metadata=BOB), nf)
    await expect_code(stub.DeleteJob(pb.DeleteJobRequest(job_id=job.id), metadata=BOB), nf)
    assert list((await stub.ListJobs(pb.ListJobsRequest(), metadata=BOB)).jobs) == []
    assert (await stub.GetJob(pb.GetJobRequest(job_id=job.id), metadata=ALICE)).job.id == job.id
    assert not fake.starts


async def test_calls_without_owner_are_unauthenticated(api) -> None:
    stub, _ = api
    await expect_code(stub.ListJobs(pb.ListJobsRequest()), grpc.StatusCode.UNAUTHENTICATED)


async def test_list_is_paginated_in_creation_order(api) -> None:
    stub, _ = api
    ids = [(await create(stub, title=f"job {i}")).id for i in range(5)]
    seen: list[str] = []
    token = ""
    while True:
        page = await stub.ListJobs(
            pb.ListJobsRequest(page_size=2, page_token=token), metadata=ALICE
        )
        seen += [j.id for j in page.jobs]
        token = page.next_page_token
        if not token:
            break
    assert seen == ids
    # A token is bound to its owner.
    first = await stub.ListJobs(pb.ListJobsRequest(page_size=2), metadata=ALICE)
    await expect_code(
        stub.ListJobs(
            pb.ListJobsRequest(page_size=2, page_token=first.next_page_token), metadata=BOB
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )


async def test_pause_clears_next_run_and_resume_recomputes_it(api) -> None:
    stub, _ = api
    job = await create(stub)
    paused = (await stub.PauseJob(pb.PauseJobRequest(job_id=job.id), metadata=ALICE)).job
    assert paused.status == pb.JOB_STATUS_PAUSED and not paused.HasField("next_run_time")
    resumed = (await stub.ResumeJob(pb.ResumeJobRequest(job_id=job.id), metadata=ALICE)).job
    assert resumed.status == pb.JOB_STATUS_ACTIVE
    assert resumed.next_run_time == job.next_run_time
    assert resumed.version == job.version + 2


async def test_delete_removes_the_job(api) -> None:
    stub, _ = api
    job = await create(stub)
    await stub.DeleteJob(pb.DeleteJobRequest(job_id=job.id), metadata=ALICE)
    await expect_code(
        stub.GetJob(pb.GetJobRequest(job_id=job.id), metadata=ALICE), grpc.StatusCode.NOT_FOUND
    )


async def test_trigger_records_a_manual_run_and_dispatches_it(api) -> None:
    stub, fake = api
    job = await create(
        stub, config=pb.JobConfig(prompt="remember: I like tea", tools=["memory_write"])
    )
    assert not job.HasField("last_run_time")
    run = (await stub.TriggerJob(pb.TriggerJobRequest(job_id=job.id), metadata=ALICE)).job_run
    assert run.trigger == pb.JOB_RUN_TRIGGER_MANUAL and run.attempt == 1
    # A manual run is a run: the job says when it last ran, as after a scheduled slot.
    after = (await stub.GetJob(pb.GetJobRequest(job_id=job.id), metadata=ALICE)).job
    assert after.last_run_time == run.scheduled_slot

    async def succeeded() -> pb.JobRun:
        for _ in range(100):
            runs = (
                await stub.ListJobRuns(pb.ListJobRunsRequest(job_id=job.id), metadata=ALICE)
            ).job_runs
            if runs and runs[0].state == pb.JOB_RUN_STATE_SUCCEEDED:
                return runs[0]
            await asyncio.sleep(0.05)
        raise AssertionError("the triggered run did not succeed")

    done = await succeeded()
    assert done.id == run.id and done.orchestrator_run_id
    assert fake.starts[done.orchestrator_run_id] == 1
    request = fake.requests[done.orchestrator_run_id]
    assert request.thread_id == f"automation:{job.id}"
    assert request.run_id == core.orchestrator_run_id(run.id, 1)
    assert request.origin == message_pb2.RUNTIME_MODE_AUTOMATION
    assert request.time_zone == "Europe/London"
    assert list(request.declared_tools) == ["memory_write"]
    assert request.profile == profile_to_pb(AUTOMATION_MEMORY_DEFAULT)
    (message,) = request.messages
    assert (
        message.role == message_pb2.ROLE_USER
        and message.kind == message_pb2.MESSAGE_KIND_USER_MESSAGE
    )
    assert message.content[0].text.text == "remember: I like tea"
    assert fake.owners[done.orchestrator_run_id] == "alice"


async def test_default_job_is_daily_memory_at_ten_local(api) -> None:
    stub, _ = api
    (job,) = (
        await stub.EnsureDefaultJobs(
            pb.EnsureDefaultJobsRequest(timezone="America/New_York"), metadata=ALICE
        )
    ).jobs
    assert (
        job.default_job
        and job.schedule.type == pb.SCHEDULE_TYPE_DAILY
        and job.schedule.local_time == "10:00"
    )
    assert job.timezone == "America/New_York"
    assert list(job.config.tools) == ["memory_write", "memory_forget"]
    assert job.config.prompt == core.DEFAULT_MEMORY_PROMPT
    assert not job.execution_profile.enable_router
    assert job.execution_profile.executor == execution_profile_pb2.EXECUTOR_MEMORY
    assert job.execution_profile.name == "automation_memory_default"


async def test_default_job_defaults_to_shanghai(api) -> None:
    stub, _ = api
    (job,) = (await stub.EnsureDefaultJobs(pb.EnsureDefaultJobsRequest(), metadata=ALICE)).jobs
    assert job.timezone == "Asia/Shanghai"


async def test_ensure_default_jobs_twice_and_concurrently_leaves_exactly_one(api) -> None:
    stub, _ = api
    calls = [
        stub.EnsureDefaultJobs(pb.EnsureDefaultJobsRequest(), metadata=ALICE) for _ in range(6)
    ]
    results = await asyncio.gather(*calls)
    again = await stub.EnsureDefaultJobs(pb.EnsureDefaultJobsRequest(), metadata=ALICE)
    assert {r.jobs[0].id for r in [*results, again]} == {again.jobs[0].id}
    listed = await stub.ListJobs(pb.ListJobsRequest(), metadata=ALICE)
    assert len(listed.jobs) == 1
    bob = await stub.EnsureDefaultJobs(pb.EnsureDefaultJobsRequest(), metadata=BOB)
    assert bob.jobs[0].id != again.jobs[0].id


async def test_default_job_with_a_bad_timezone_is_invalid(api) -> None:
    stub, _ = api
    err = await expect_code(
        stub.EnsureDefaultJobs(
            pb.EnsureDefaultJobsRequest(timezone="Nowhere/City"), metadata=ALICE
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    # The error the helper raises carries the violations.
    assert err.violations[0][0] == "timezone"  # type: ignore[attr-defined]


async def test_once_job_in_the_past_runs_once_then_completes(api) -> None:
    stub, fake = api
    past = datetime.now(UTC) - timedelta(minutes=5)
    sched = pb.Schedule(type=pb.SCHEDULE_TYPE_ONCE)
    sched.run_at.FromDatetime(past)
    job = await create(stub, schedule=sched)

    for _ in range(100):
        got = (await stub.GetJob(pb.GetJobRequest(job_id=job.id), metadata=ALICE)).job
        runs = (
            await stub.ListJobRuns(pb.ListJobRunsRequest(job_id=job.id), metadata=ALICE)
        ).job_runs
        if (
            got.status == pb.JOB_STATUS_COMPLETED
            and runs
            and runs[0].state == pb.JOB_RUN_STATE_SUCCEEDED
        ):
            break
        await asyncio.sleep(0.05)
    assert got.status == pb.JOB_STATUS_COMPLETED and not got.HasField("next_run_time")
    assert len(runs) == 1 and runs[0].trigger == pb.JOB_RUN_TRIGGER_SCHEDULE
    assert sum(fake.starts.values()) == 1
