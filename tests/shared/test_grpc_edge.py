"""The gRPC edge of every service: a bad request is INVALID_ARGUMENT naming the field (or
UNAUTHENTICATED), at once; never INTERNAL, UNKNOWN or a call that runs into its deadline.

Each service is its real server on port 0; requests go as raw bytes through a generic call,
so a request that no client stub would build (undecodable bytes, an enum number no version
has, a Timestamp out of range, a NaN) reaches the server as an attacker would send it.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from agentmesh.executor.v1 import executor_service_pb2 as executor_pb
from agentmesh.history.v1 import history_service_pb2 as history_pb
from agentmesh.memory.v1 import memory_service_pb2 as memory_pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as orchestrator_pb
from agentmesh.router.v1 import router_service_pb2 as router_pb
from agentmesh.scheduler.v1 import scheduler_service_pb2 as scheduler_pb
from agentmesh.type.v1 import execution_profile_pb2, message_pb2
from google.protobuf import timestamp_pb2
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
ADMIN = owner_md("ops", admin=True)
# Every call answers well within this; a call that needs it has hung.
DEADLINE = 5.0
UNKNOWN_ENUM = 99
# Bytes that parse as no message: a length-delimited field 1 of 5 bytes with 2 present, and
# a varint cut short.
UNDECODABLE = (b"\x0a\x05ab", b"\xff\xff\xff")
# Timestamps a client library would refuse to build.
BAD_TIMESTAMPS = (
    timestamp_pb2.Timestamp(seconds=2**62),
    timestamp_pb2.Timestamp(seconds=0, nanos=2_000_000_000),
    timestamp_pb2.Timestamp(seconds=0, nanos=-1),
)
BAD_ZONES = ("Europe", "America", "America/Argentina", "x" * 300, "../../etc/passwd")
BAD_LEASES = (math.nan, math.inf, -math.inf, -1.0)


@dataclass(frozen=True)
class Row:
    name: str
    method: str
    request: Callable[[], bytes]
    field: str | None  # the violation to name; None: UNAUTHENTICATED
    streaming: bool = False
    metadata: tuple[tuple[str, str], ...] = ALICE


def _raw(message: Message) -> Callable[[], bytes]:
    return message.SerializeToString


async def _outcome(ch: grpc.aio.Channel, row: Row) -> str | None:
    """None when the answer is the one expected; otherwise what it was."""
    payload = row.request()
    try:
        if row.streaming:
            call = ch.unary_stream(row.method)(payload, metadata=row.metadata, timeout=DEADLINE)
            answers = [a async for a in call]
        else:
            answers = [
                await ch.unary_unary(row.method)(payload, metadata=row.metadata, timeout=DEADLINE)
            ]
    except grpc.aio.AioRpcError as err:
        want = (
            grpc.StatusCode.UNAUTHENTICATED
            if row.field is None
            else grpc.StatusCode.INVALID_ARGUMENT
        )
        if err.code() is not want:
            return f"{err.code().name}: {err.details()}"
        if row.field is None:
            return None
        fields = [f for f, _ in errors.from_rpc_error(err).violations]
        return None if row.field in fields else f"INVALID_ARGUMENT naming {fields}, not {row.field}"
    return f"OK with {len(answers)} answer(s)"


async def _failures(address: str, rows: list[Row]) -> list[str]:
    async with channel(address) as ch:
        return [f"{row.name}: {problem}" for row in rows if (problem := await _outcome(ch, row))]


def _undecodable(svc: str, methods: list[tuple[str, bool]]) -> list[Row]:
    return [
        Row(f"{m} undecodable {i}", svc + m, lambda raw=raw: raw, "request", streaming=streaming)
        for m, streaming in methods
        for i, raw in enumerate(UNDECODABLE)
    ]


def _ids() -> tuple[str, str]:
    return uuid.uuid4().hex, uuid.uuid4().hex


def _profile(**fields: Any) -> execution_profile_pb2.ExecutionProfile:
    profile = profile_to_pb(CHAT_DEFAULT)
    for key, value in fields.items():
        setattr(profile, key, value)
    return profile


def _user_pb(**fields: Any) -> message_pb2.Message:
    message = msg_to_pb(user("hello"))
    message.kind = message_pb2.MESSAGE_KIND_USER_MESSAGE
    for key, value in fields.items():
        if isinstance(value, Message):
            getattr(message, key).CopyFrom(value)
        else:
            setattr(message, key, value)
    return message


# ---- history ---------------------------------------------------------------------------


def _begin(**fields: Any) -> history_pb.BeginRunRequest:
    thread_id, run_id = _ids()
    values: dict[str, Any] = {
        "thread_id": thread_id,
        "run_id": run_id,
        "runtime_mode": message_pb2.RUNTIME_MODE_CHAT,
        "profile": _profile(),
        "input_messages": [_user_pb()],
        "lease_holder": "orchestrator-1",
    }
    values.update(fields)
    return history_pb.BeginRunRequest(**values)


def _tool_policy_mode(mode: int) -> execution_profile_pb2.ExecutionProfile:
    profile = _profile()
    # Deliberately any mode value.
    profile.tool_policy.mode = mode  # type: ignore[assignment]
    return profile


def _history_rows() -> list[Row]:
    svc = "/agentmesh.history.v1.HistoryService/"
    rows = _undecodable(svc, [("ListHistory", False), ("BeginRun", False), ("ListAudit", False)])
    for lease in BAD_LEASES:
        rows.append(
            Row(
                f"BeginRun lease {lease}",
                svc + "BeginRun",
                _raw(_begin(lease_seconds=lease)),
                "lease_seconds",
            )
        )
        rows.append(
            Row(
                f"RenewRunLease lease {lease}",
                svc + "RenewRunLease",
                _raw(
                    history_pb.RenewRunLeaseRequest(
                        run_id="r-1", lease_holder="o", lease_seconds=lease
                    )
                ),
                "lease_seconds",
            )
        )
    for i, ts in enumerate(BAD_TIMESTAMPS):
        for name in ("start_time", "end_time"):
            flt = history_pb.AuditFilter()
            getattr(flt, name).CopyFrom(ts)
            rows.append(
                Row(
                    f"ListAudit {name} {i}",
                    svc + "ListAudit",
                    _raw(history_pb.ListAuditRequest(owner_id="alice", filter=flt)),
                    f"filter.{name}",
                    metadata=ADMIN,
                )
            )
    for zone in BAD_ZONES:
        rows.append(
            Row(
                f"LoadContext zone {zone[:20]}",
                svc + "LoadContext",
                _raw(
                    history_pb.LoadContextRequest(
                        thread_id="t-1", context=history_pb.ContextOptions(time_zone=zone)
                    )
                ),
                "context.time_zone",
            )
        )
        rows.append(
            Row(
                f"BeginRun zone {zone[:20]}",
                svc + "BeginRun",
                _raw(_begin(context=history_pb.ContextOptions(time_zone=zone))),
                "context.time_zone",
            )
        )
    rows += [
        Row(
            "ListHistory direction 99",
            svc + "ListHistory",
            _raw(history_pb.ListHistoryRequest(thread_id="t-1", direction=UNKNOWN_ENUM)),
            "direction",
        ),
        Row(
            "BeginRun multitask_strategy 99",
            svc + "BeginRun",
            _raw(_begin(multitask_strategy=UNKNOWN_ENUM)),
            "multitask_strategy",
        ),
        Row(
            "BeginRun tool_policy.mode 99",
            svc + "BeginRun",
            _raw(_begin(profile=_tool_policy_mode(UNKNOWN_ENUM))),
            "profile.tool_policy.mode",
        ),
        Row(
            "ListAudit origin 99",
            svc + "ListAudit",
            _raw(
                history_pb.ListAuditRequest(
                    owner_id="alice", filter=history_pb.AuditFilter(origin=UNKNOWN_ENUM)
                )
            ),
            "filter.origin",
            metadata=ADMIN,
        ),
        Row(
            "ListAudit executor 99",
            svc + "ListAudit",
            _raw(
                history_pb.ListAuditRequest(
                    owner_id="alice", filter=history_pb.AuditFilter(executor=UNKNOWN_ENUM)
                )
            ),
            "filter.executor",
            metadata=ADMIN,
        ),
        Row(
            "ListAudit owner_id with a newline",
            svc + "ListAudit",
            _raw(history_pb.ListAuditRequest(owner_id="alice\n")),
            "owner_id",
            metadata=ADMIN,
        ),
        Row(
            "ListAudit without an owner",
            svc + "ListAudit",
            _raw(history_pb.ListAuditRequest(owner_id="alice")),
            None,
            metadata=(("x-agentmesh-scope", "admin"),),
        ),
        Row(
            "ListHistory without an owner",
            svc + "ListHistory",
            _raw(history_pb.ListHistoryRequest(thread_id="t-1")),
            None,
            metadata=(),
        ),
        Row(
            "ListHistory thread id with a newline",
            svc + "ListHistory",
            _raw(history_pb.ListHistoryRequest(thread_id="t-1\n")),
            "thread_id",
        ),
        Row("BeginRun run id with a slash", svc + "BeginRun", _raw(_begin(run_id="a/b")), "run_id"),
    ]
    return rows


async def test_history_edge(settings: Settings) -> None:
    async with running_service("history", build_history, settings) as address:
        assert await _failures(address, _history_rows()) == []


# ---- memory ----------------------------------------------------------------------------


async def test_memory_edge(settings: Settings) -> None:
    svc = "/agentmesh.memory.v1.MemoryService/"
    rows = _undecodable(svc, [("ListMemories", False), ("WriteMemory", False)])
    for i, ts in enumerate(BAD_TIMESTAMPS):
        rows.append(
            Row(
                f"AdvanceWatermark time {i}",
                svc + "AdvanceWatermark",
                _raw(memory_pb.AdvanceWatermarkRequest(position="p-1", time=ts)),
                "time",
            )
        )
    rows += [
        Row(
            "ForgetMemory id with a space",
            svc + "ForgetMemory",
            _raw(memory_pb.ForgetMemoryRequest(id="a b")),
            "id",
        ),
        Row(
            "GetMemory id with a newline",
            svc + "GetMemory",
            _raw(memory_pb.GetMemoryRequest(id="m-1\n")),
            "id",
        ),
        Row(
            "WriteMemory source id with a NUL",
            svc + "WriteMemory",
            _raw(
                memory_pb.WriteMemoryRequest(
                    content="User likes tea", source_message_ids=["a\x00b"]
                )
            ),
            "source_message_ids",
        ),
        Row(
            "WriteMemory content with a NUL",
            svc + "WriteMemory",
            _raw(memory_pb.WriteMemoryRequest(content="User likes\x00tea")),
            "content",
        ),
        Row(
            "SearchMemories query with a NUL",
            svc + "SearchMemories",
            _raw(memory_pb.SearchMemoriesRequest(query="tea\x00")),
            "query",
        ),
        Row(
            "ListMemories without an owner",
            svc + "ListMemories",
            _raw(memory_pb.ListMemoriesRequest()),
            None,
            metadata=(),
        ),
    ]
    async with running_service("memory", build_memory, settings) as address:
        assert await _failures(address, rows) == []


# ---- scheduler -------------------------------------------------------------------------


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


async def test_scheduler_edge(settings: Settings) -> None:
    svc = "/agentmesh.scheduler.v1.SchedulerService/"
    rows = _undecodable(svc, [("ListJobs", False), ("CreateJob", False)])
    for zone in BAD_ZONES:
        rows.append(
            Row(
                f"CreateJob zone {zone[:20]}",
                svc + "CreateJob",
                _raw(scheduler_pb.CreateJobRequest(job=_job(timezone=zone))),
                "job.timezone",
            )
        )
        rows.append(
            Row(
                f"EnsureDefaultJobs zone {zone[:20]}",
                svc + "EnsureDefaultJobs",
                _raw(scheduler_pb.EnsureDefaultJobsRequest(timezone=zone)),
                "timezone",
            )
        )
    for i, ts in enumerate(BAD_TIMESTAMPS):
        once = scheduler_pb.Schedule(type=scheduler_pb.SCHEDULE_TYPE_ONCE, run_at=ts)
        rows.append(
            Row(
                f"CreateJob run_at {i}",
                svc + "CreateJob",
                _raw(scheduler_pb.CreateJobRequest(job=_job(schedule=once))),
                "job.schedule.run_at",
            )
        )
    rows += [
        Row(
            "CreateJob catch_up_policy 99",
            svc + "CreateJob",
            _raw(scheduler_pb.CreateJobRequest(job=_job(catch_up_policy=UNKNOWN_ENUM))),
            "job.catch_up_policy",
        ),
        Row(
            "GetJob id with a newline",
            svc + "GetJob",
            _raw(scheduler_pb.GetJobRequest(job_id="j-1\n")),
            "job_id",
        ),
        Row(
            "DeleteJob id with a slash",
            svc + "DeleteJob",
            _raw(scheduler_pb.DeleteJobRequest(job_id="a/b")),
            "job_id",
        ),
        Row(
            "ListJobs without an owner",
            svc + "ListJobs",
            _raw(scheduler_pb.ListJobsRequest()),
            None,
            metadata=(),
        ),
    ]
    async with running_service("scheduler", build_scheduler, settings) as address:
        assert await _failures(address, rows) == []


# ---- router and executor ---------------------------------------------------------------


async def test_router_edge(settings: Settings) -> None:
    svc = "/agentmesh.router.v1.RouterService/"
    rows = _undecodable(svc, [("Route", False)])
    rows.append(
        Row(
            "Route tool_policy.mode 99",
            svc + "Route",
            _raw(
                router_pb.RouteRequest(
                    run_id="r-1",
                    profile=_tool_policy_mode(UNKNOWN_ENUM),
                    input_message=msg_to_pb(user("hi")),
                )
            ),
            "profile.tool_policy.mode",
        )
    )
    async with running_service("router", build_router, settings) as address:
        assert await _failures(address, rows) == []


async def test_executor_edge(settings: Settings) -> None:
    svc = "/agentmesh.executor.v1.ExecutorService/"
    thread_id, run_id = _ids()

    def execute(**fields: Any) -> executor_pb.ExecuteRequest:
        values: dict[str, Any] = {
            "run_id": run_id,
            "thread_id": thread_id,
            "executor": execution_profile_pb2.EXECUTOR_WORKER,
            "profile": _profile(),
            "input_message": msg_to_pb(user("hello executor")),
            "reply_message_id": "m-1",
        }
        values.update(fields)
        return executor_pb.ExecuteRequest(**values)

    rows = _undecodable(svc, [("Execute", True)])
    rows += [
        Row(
            "Execute thread id with a newline",
            svc + "Execute",
            _raw(execute(thread_id="t\n")),
            "thread_id",
            streaming=True,
        ),
        Row(
            "Execute tool_policy.mode 99",
            svc + "Execute",
            _raw(execute(profile=_tool_policy_mode(UNKNOWN_ENUM))),
            "profile.tool_policy.mode",
            streaming=True,
        ),
        Row(
            "Execute input created_at 2^62",
            svc + "Execute",
            _raw(execute(input_message=_user_pb(created_at=BAD_TIMESTAMPS[0]))),
            "input_message.created_at",
            streaming=True,
        ),
    ]
    async with running_service("executor", build_executor, settings) as address:
        assert await _failures(address, rows) == []


# ---- orchestrator ----------------------------------------------------------------------


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


async def test_orchestrator_edge(settings: Settings) -> None:
    svc = "/agentmesh.orchestrator.v1.OrchestratorService/"
    rows = _undecodable(svc, [("StartRun", True), ("StreamRun", True), ("CancelRun", False)])
    for zone in BAD_ZONES:
        rows.append(
            Row(
                f"StartRun zone {zone[:20]}",
                svc + "StartRun",
                _raw(_start(time_zone=zone)),
                "time_zone",
                streaming=True,
            )
        )
    for i, ts in enumerate(BAD_TIMESTAMPS):
        rows.append(
            Row(
                f"StartRun created_at {i}",
                svc + "StartRun",
                _raw(_start(messages=[_user_pb(created_at=ts)])),
                "messages[0].created_at",
                streaming=True,
            )
        )
    rows += [
        Row(
            "StartRun multitask_strategy 99",
            svc + "StartRun",
            _raw(_start(multitask_strategy=UNKNOWN_ENUM)),
            "multitask_strategy",
            streaming=True,
        ),
        Row(
            "StartRun tool_policy.mode 99",
            svc + "StartRun",
            _raw(_start(profile=_tool_policy_mode(UNKNOWN_ENUM))),
            "profile.tool_policy.mode",
            streaming=True,
        ),
        Row(
            "StartRun content with a NUL",
            svc + "StartRun",
            _raw(_start(messages=[msg_to_pb(user("a\x00b"))])),
            "messages[0].content",
            streaming=True,
        ),
        Row(
            "StartRun thread id with a newline",
            svc + "StartRun",
            _raw(_start(thread_id="t\n")),
            "thread_id",
            streaming=True,
        ),
        Row(
            "StreamRun after_sequence 2^60",
            svc + "StreamRun",
            _raw(orchestrator_pb.StreamRunRequest(run_id="r-1", after_sequence=2**60)),
            "after_sequence",
            streaming=True,
        ),
        Row(
            "StreamRun after_sequence 2^64-1",
            svc + "StreamRun",
            _raw(orchestrator_pb.StreamRunRequest(run_id="r-1", after_sequence=2**64 - 1)),
            "after_sequence",
            streaming=True,
        ),
        Row(
            "CancelRun run id with a NUL",
            svc + "CancelRun",
            _raw(orchestrator_pb.CancelRunRequest(run_id="a\x00b")),
            "run_id",
        ),
        Row(
            "StartRun without an owner",
            svc + "StartRun",
            _raw(_start()),
            None,
            streaming=True,
            metadata=(),
        ),
    ]
    async with running_suite(settings) as suite:
        address = suite.addrs["orchestrator"]
        assert await _failures(address, rows) == []
        # A finished run resumed from past its last event (2^53 - 1 is the largest sequence
        # number) ends at once, with nothing to send.
        start = _start()
        async with channel(address) as ch:
            stub = ch.unary_stream(svc + "StartRun")
            events = [e async for e in stub(start.SerializeToString(), metadata=ALICE, timeout=30)]
            assert events
            follow = ch.unary_stream(svc + "StreamRun")
            for after in (10**13, 2**53 - 1):
                request = orchestrator_pb.StreamRunRequest(
                    run_id=start.run_id, after_sequence=after
                )
                answers = [
                    a
                    async for a in follow(
                        request.SerializeToString(), metadata=ALICE, timeout=DEADLINE
                    )
                ]
                assert answers == []


@pytest.mark.parametrize("raw", UNDECODABLE)
async def test_health_checks_answer_undecodable_bytes_with_invalid_argument(
    settings: Settings, raw: bytes
) -> None:
    async with running_service("router", build_router, settings) as address:
        async with channel(address) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await ch.unary_unary("/grpc.health.v1.Health/Check")(raw, timeout=DEADLINE)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
