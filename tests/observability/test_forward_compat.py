"""Contracts across independent deploys: every service tolerates what a newer peer may send.

A newer client may set fields this server does not know (they arrive as unknown tags) and
enum values added after this server was built (they arrive as plain numbers: the server
interceptor reads them as UNSPECIFIED inside a message's data and refuses them elsewhere:
shared/compat.py). Each service must then answer normally or with a clean INVALID_ARGUMENT
naming the field: never INTERNAL, never a crash. Requests go through a raw generic call,
bytes in and bytes out, so the unknown tags reach the server exactly as a newer peer would
send them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from agentmesh.executor.v1 import executor_service_pb2 as executor_pb
from agentmesh.history.v1 import history_service_pb2 as history_pb
from agentmesh.memory.v1 import memory_service_pb2 as memory_pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as orchestrator_pb
from agentmesh.router.v1 import router_service_pb2 as router_pb
from agentmesh.scheduler.v1 import scheduler_service_pb2 as scheduler_pb
from agentmesh.type.v1 import execution_profile_pb2, message_pb2
from google.protobuf.message import Message

from services.executor.service import build as build_executor
from services.history.service import build as build_history
from services.memory.service import build as build_memory
from services.router.service import build as build_router
from services.scheduler.service import build as build_scheduler
from shared import errors
from shared.messages import msg_to_pb, user
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, CHAT_DEFAULT, profile_to_pb
from shared.settings import Settings
from tests.grpc_helpers import channel, owner_md, running_service
from tests.observability.suite import running_suite

ALICE = owner_md("alice")
# An enum number no version of agentmesh has used (yet).
FUTURE_ENUM = 99


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


# Two fields from a newer schema: a length-delimited one (a string or message) and a varint.
_TEXT = b"from a newer peer"
UNKNOWN_FIELDS = (
    _varint(4242 << 3 | 2) + _varint(len(_TEXT)) + _TEXT + _varint(4243 << 3 | 0) + _varint(7)
)


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    request: Callable[[], Message]
    response: type[Message]
    streaming: bool = False
    # The field holding a future enum value; None: only unknown fields are sent, and the
    # answer must be a normal one.
    field: str | None = None
    # Codes that are a normal answer to this request besides OK.
    normal: tuple[grpc.StatusCode, ...] = ()


async def _outcome(ch: grpc.aio.Channel, case: Case) -> str | None:
    """None when the answer is acceptable; otherwise what went wrong."""
    payload = case.request().SerializeToString() + UNKNOWN_FIELDS
    try:
        if case.streaming:
            answers = [
                a async for a in ch.unary_stream(case.method)(payload, metadata=ALICE, timeout=20)
            ]
        else:
            answers = [await ch.unary_unary(case.method)(payload, metadata=ALICE, timeout=20)]
        for raw in answers:
            case.response.FromString(raw)
    except grpc.aio.AioRpcError as err:
        if err.code() in case.normal:
            return None
        if err.code() is grpc.StatusCode.INVALID_ARGUMENT and case.field is not None:
            fields = [f for f, _ in errors.from_rpc_error(err).violations]
            if case.field in fields:
                return None
            return f"INVALID_ARGUMENT naming {fields}, not {case.field}: {err.details()}"
        return f"{err.code().name}: {err.details()}"
    return None


async def _failures(address: str, cases: list[Case]) -> list[str]:
    async with channel(address) as ch:
        return [
            f"{case.name}: {problem}" for case in cases if (problem := await _outcome(ch, case))
        ]


def _ids() -> tuple[str, str]:
    return uuid.uuid4().hex, uuid.uuid4().hex


def _user(text: str, **fields: Any) -> message_pb2.Message:
    message = msg_to_pb(user(text))
    message.kind = message_pb2.MESSAGE_KIND_USER_MESSAGE
    for key, value in fields.items():
        setattr(message, key, value)
    return message


def _profile(**fields: Any) -> execution_profile_pb2.ExecutionProfile:
    profile = profile_to_pb(CHAT_DEFAULT)
    for key, value in fields.items():
        setattr(profile, key, value)
    return profile


async def test_history_tolerates_unknown_fields_and_enum_values(settings: Settings) -> None:
    svc = "/agentmesh.history.v1.HistoryService/"
    thread_id, run_id = _ids()
    begun = history_pb.BeginRunRequest(
        thread_id=thread_id,
        run_id=run_id,
        runtime_mode=message_pb2.RUNTIME_MODE_CHAT,
        profile=_profile(),
        input_messages=[_user("hello")],
    )
    cases = [
        Case("BeginRun", svc + "BeginRun", lambda: begun, history_pb.BeginRunResponse),
        Case(
            "ListThreads",
            svc + "ListThreads",
            history_pb.ListThreadsRequest,
            history_pb.ListThreadsResponse,
        ),
        Case(
            "ListHistory(direction)",
            svc + "ListHistory",
            lambda: history_pb.ListHistoryRequest(thread_id=thread_id, direction=FUTURE_ENUM),
            history_pb.ListHistoryResponse,
            field="direction",
        ),
        Case(
            "BeginRun(runtime_mode)",
            svc + "BeginRun",
            lambda: history_pb.BeginRunRequest(
                thread_id=uuid.uuid4().hex,
                run_id=uuid.uuid4().hex,
                runtime_mode=FUTURE_ENUM,
                profile=_profile(),
            ),
            history_pb.BeginRunResponse,
            field="runtime_mode",
        ),
        Case(
            "BeginRun(profile.executor)",
            svc + "BeginRun",
            lambda: history_pb.BeginRunRequest(
                thread_id=uuid.uuid4().hex,
                run_id=uuid.uuid4().hex,
                runtime_mode=message_pb2.RUNTIME_MODE_CHAT,
                profile=_profile(executor=FUTURE_ENUM),
            ),
            history_pb.BeginRunResponse,
            field="profile.executor",
        ),
        Case(
            "BeginRun(input_messages[0].kind)",
            svc + "BeginRun",
            lambda: history_pb.BeginRunRequest(
                thread_id=uuid.uuid4().hex,
                run_id=uuid.uuid4().hex,
                runtime_mode=message_pb2.RUNTIME_MODE_CHAT,
                profile=_profile(),
                input_messages=[_user("hello", kind=FUTURE_ENUM)],
            ),
            history_pb.BeginRunResponse,
            field="input_messages[0].kind",
        ),
        Case(
            "FinishRun(state)",
            svc + "FinishRun",
            lambda: history_pb.FinishRunRequest(run_id=run_id, state=FUTURE_ENUM),
            history_pb.FinishRunResponse,
            field="state",
        ),
    ]
    async with running_service("history", build_history, settings) as address:
        assert await _failures(address, cases) == []


async def test_memory_tolerates_unknown_fields(settings: Settings) -> None:
    svc = "/agentmesh.memory.v1.MemoryService/"
    cases = [
        Case(
            "WriteMemory",
            svc + "WriteMemory",
            lambda: memory_pb.WriteMemoryRequest(content="User likes green tea"),
            memory_pb.WriteMemoryResponse,
        ),
        Case(
            "SearchMemories",
            svc + "SearchMemories",
            lambda: memory_pb.SearchMemoriesRequest(query="tea"),
            memory_pb.SearchMemoriesResponse,
        ),
        Case(
            "ListMemories",
            svc + "ListMemories",
            memory_pb.ListMemoriesRequest,
            memory_pb.ListMemoriesResponse,
        ),
    ]
    async with running_service("memory", build_memory, settings) as address:
        assert await _failures(address, cases) == []


def _job(**fields: Any) -> scheduler_pb.Job:
    values: dict[str, Any] = {
        "title": "daily digest",
        "schedule": scheduler_pb.Schedule(
            type=scheduler_pb.SCHEDULE_TYPE_DAILY, local_time="10:00"
        ),
        "timezone": "Europe/London",
        "config": scheduler_pb.JobConfig(prompt="summarise my day", tools=["memory_write"]),
        "execution_profile": profile_to_pb(AUTOMATION_MEMORY_DEFAULT),
    }
    values.update(fields)
    return scheduler_pb.Job(**values)


async def test_scheduler_tolerates_unknown_fields_and_enum_values(settings: Settings) -> None:
    svc = "/agentmesh.scheduler.v1.SchedulerService/"
    profile = profile_to_pb(AUTOMATION_MEMORY_DEFAULT)
    # Deliberately a value this build does not know.
    profile.executor = FUTURE_ENUM  # type: ignore[assignment]
    cases = [
        Case(
            "CreateJob",
            svc + "CreateJob",
            lambda: scheduler_pb.CreateJobRequest(job=_job()),
            scheduler_pb.CreateJobResponse,
        ),
        Case(
            "ListJobs",
            svc + "ListJobs",
            scheduler_pb.ListJobsRequest,
            scheduler_pb.ListJobsResponse,
        ),
        Case(
            "CreateJob(job.schedule.type)",
            svc + "CreateJob",
            lambda: scheduler_pb.CreateJobRequest(
                job=_job(schedule=scheduler_pb.Schedule(type=FUTURE_ENUM, local_time="10:00"))
            ),
            scheduler_pb.CreateJobResponse,
            field="job.schedule.type",
        ),
        Case(
            "CreateJob(job.catch_up_policy)",
            svc + "CreateJob",
            lambda: scheduler_pb.CreateJobRequest(job=_job(catch_up_policy=FUTURE_ENUM)),
            scheduler_pb.CreateJobResponse,
            field="job.catch_up_policy",
        ),
        Case(
            "CreateJob(job.execution_profile.executor)",
            svc + "CreateJob",
            lambda: scheduler_pb.CreateJobRequest(job=_job(execution_profile=profile)),
            scheduler_pb.CreateJobResponse,
            field="job.execution_profile.executor",
        ),
    ]
    async with running_service("scheduler", build_scheduler, settings) as address:
        assert await _failures(address, cases) == []


def _route(**fields: Any) -> router_pb.RouteRequest:
    values: dict[str, Any] = {
        "run_id": uuid.uuid4().hex,
        "profile": _profile(),
        "input_message": msg_to_pb(user("hello router")),
    }
    values.update(fields)
    return router_pb.RouteRequest(**values)


async def test_router_tolerates_unknown_fields_and_enum_values(settings: Settings) -> None:
    svc = "/agentmesh.router.v1.RouterService/"
    cases = [
        Case("Route", svc + "Route", _route, router_pb.RouteResponse),
        Case(
            "Route(profile.executor)",
            svc + "Route",
            lambda: _route(profile=_profile(executor=FUTURE_ENUM)),
            router_pb.RouteResponse,
            field="profile.executor",
        ),
        Case(
            "Route(input_message.role)",
            svc + "Route",
            lambda: _route(input_message=_user("hello", role=FUTURE_ENUM)),
            router_pb.RouteResponse,
            field="input_message.role",
        ),
    ]
    async with running_service("router", build_router, settings) as address:
        assert await _failures(address, cases) == []


def _execute(**fields: Any) -> executor_pb.ExecuteRequest:
    thread_id, run_id = _ids()
    values: dict[str, Any] = {
        "run_id": run_id,
        "thread_id": thread_id,
        "executor": execution_profile_pb2.EXECUTOR_WORKER,
        "profile": _profile(),
        "input_message": msg_to_pb(user("hello executor")),
        "reply_message_id": uuid.uuid4().hex,
    }
    values.update(fields)
    return executor_pb.ExecuteRequest(**values)


async def test_executor_tolerates_unknown_fields_and_enum_values(settings: Settings) -> None:
    svc = "/agentmesh.executor.v1.ExecutorService/"
    cases = [
        Case("Execute", svc + "Execute", _execute, executor_pb.ExecuteResponse, streaming=True),
        Case(
            "Execute(executor)",
            svc + "Execute",
            lambda: _execute(executor=FUTURE_ENUM),
            executor_pb.ExecuteResponse,
            streaming=True,
            field="executor",
        ),
        Case(
            "Execute(profile.executor)",
            svc + "Execute",
            lambda: _execute(profile=_profile(executor=FUTURE_ENUM)),
            executor_pb.ExecuteResponse,
            streaming=True,
            field="profile.executor",
        ),
        Case(
            "Execute(input_message.role)",
            svc + "Execute",
            lambda: _execute(input_message=_user("hello", role=FUTURE_ENUM)),
            executor_pb.ExecuteResponse,
            streaming=True,
            field="input_message.role",
        ),
    ]
    async with running_service("executor", build_executor, settings) as address:
        assert await _failures(address, cases) == []


def _start(**fields: Any) -> orchestrator_pb.StartRunRequest:
    thread_id, run_id = _ids()
    values: dict[str, Any] = {
        "thread_id": thread_id,
        "run_id": run_id,
        "messages": [msg_to_pb(user("hello orchestrator"))],
        "origin": message_pb2.RUNTIME_MODE_CHAT,
    }
    values.update(fields)
    return orchestrator_pb.StartRunRequest(**values)


async def test_orchestrator_tolerates_unknown_fields_and_enum_values(settings: Settings) -> None:
    svc = "/agentmesh.orchestrator.v1.OrchestratorService/"
    automation = profile_to_pb(AUTOMATION_MEMORY_DEFAULT)
    # Deliberately a value this build does not know.
    automation.executor = FUTURE_ENUM  # type: ignore[assignment]
    cases = [
        Case(
            "StartRun", svc + "StartRun", _start, orchestrator_pb.StartRunResponse, streaming=True
        ),
        Case(
            "CancelRun",
            svc + "CancelRun",
            lambda: orchestrator_pb.CancelRunRequest(run_id=uuid.uuid4().hex),
            orchestrator_pb.CancelRunResponse,
            normal=(grpc.StatusCode.NOT_FOUND,),  # no such run
        ),
        Case(
            "StartRun(messages[0].role)",
            svc + "StartRun",
            lambda: _start(messages=[_user("hello", role=FUTURE_ENUM)]),
            orchestrator_pb.StartRunResponse,
            streaming=True,
            field="messages[0].role",
        ),
        Case(
            "StartRun(origin)",
            svc + "StartRun",
            lambda: _start(origin=FUTURE_ENUM),
            orchestrator_pb.StartRunResponse,
            streaming=True,
            field="origin",
        ),
        Case(
            "StartRun(profile.executor)",
            svc + "StartRun",
            lambda: _start(origin=message_pb2.RUNTIME_MODE_AUTOMATION, profile=automation),
            orchestrator_pb.StartRunResponse,
            streaming=True,
            field="profile.executor",
        ),
    ]
    async with running_suite(settings) as suite:
        assert await _failures(suite.addrs["orchestrator"], cases) == []
