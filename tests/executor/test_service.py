"""ExecutorService in a real grpc.aio server."""

from __future__ import annotations

import asyncio
import functools

import grpc
import pytest
from agentmesh.executor.v1 import executor_service_pb2 as pb
from agentmesh.executor.v1 import executor_service_pb2_grpc as pb_grpc
from agentmesh.type.v1 import execution_profile_pb2, message_pb2

from services.executor.service import build
from shared import errors
from shared.messages import msg_from_pb, msg_to_pb, user
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, CHAT_DEFAULT, profile_to_pb
from shared.settings import Settings
from tests.executor.models import TurnsModel, text
from tests.grpc_helpers import channel, owner_md, running_service


def request(**overrides: object) -> pb.ExecuteRequest:
    values: dict[str, object] = {
        "run_id": "run-1",
        "thread_id": "thread-1",
        "executor": execution_profile_pb2.EXECUTOR_WORKER,
        "profile": profile_to_pb(CHAT_DEFAULT),
        "input_message": msg_to_pb(user("hello executor")),
        "reply_message_id": "reply-1",
        "time_zone": "Asia/Shanghai",
    }
    values.update(overrides)
    return pb.ExecuteRequest(**values)  # type: ignore[arg-type]


async def test_execute_streams_text_events_then_the_reply_then_the_result(settings: Settings) -> None:
    async with running_service("executor", build, settings) as addr, channel(addr) as ch:
        stub = pb_grpc.ExecutorServiceStub(ch)
        items = [r async for r in stub.Execute(request(), metadata=owner_md("alice"))]
    kinds = [r.WhichOneof("item") for r in items]
    assert kinds[-2:] == ["message", "result"] and set(kinds[:-2]) == {"event"}
    events = [r.event for r in items[:-2]]
    start = events[0].text_message_start
    assert start.message_id == "reply-1" and start.role == message_pb2.ROLE_ASSISTANT
    assert events[-1].WhichOneof("payload") == "text_message_end"
    deltas = [e.text_message_content.delta for e in events[1:-1]]
    assert deltas and all(deltas)
    reply = msg_from_pb(items[-2].message)
    assert reply.id == "reply-1" and reply.text == "".join(deltas)
    assert items[-1].result.finished_reason == "stop"
    assert all(e.sequence == 0 for e in events)  # the orchestrator numbers them


async def test_memory_executor_is_failed_precondition_until_its_agent_exists(
    settings: Settings,
) -> None:
    async with running_service("executor", build, settings) as addr, channel(addr) as ch:
        stub = pb_grpc.ExecutorServiceStub(ch)
        call = stub.Execute(
            request(
                executor=execution_profile_pb2.EXECUTOR_MEMORY,
                profile=profile_to_pb(AUTOMATION_MEMORY_DEFAULT),
            ),
            metadata=owner_md("alice"),
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            [r async for r in call]
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.details() == "memory executor not available"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"executor": execution_profile_pb2.EXECUTOR_UNSPECIFIED}, "executor"),
        ({"reply_message_id": ""}, "reply_message_id"),
        ({"input_message": None}, "input_message"),
        ({"client_tools": [message_pb2.ToolSpec(name="x", parameters_json="[1]")]}, "client_tools[0].parameters_json"),
    ],
)
async def test_invalid_request_is_invalid_argument_naming_the_field(
    settings: Settings, overrides: dict[str, object], field: str
) -> None:
    async with running_service("executor", build, settings) as addr, channel(addr) as ch:
        stub = pb_grpc.ExecutorServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            [r async for r in stub.Execute(request(**overrides), metadata=owner_md("alice"))]
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert errors.from_rpc_error(info.value).violations[0][0] == field


async def test_call_without_owner_is_unauthenticated(settings: Settings) -> None:
    async with running_service("executor", build, settings) as addr, channel(addr) as ch:
        stub = pb_grpc.ExecutorServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            [r async for r in stub.Execute(request())]
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_cancelled_call_closes_the_model_stream(settings: Settings) -> None:
    model = TurnsModel([text("one two three four five six seven eight nine ten")], latency=0.2)
    async with running_service("executor", functools.partial(build, model=model), settings) as addr:
        async with channel(addr) as ch:
            call = pb_grpc.ExecutorServiceStub(ch).Execute(request(), metadata=owner_md("alice"))
            first = await call.read()
            assert first.event.WhichOneof("payload") == "text_message_start"
            assert model.open_streams == 1
            call.cancel()
            for _ in range(50):
                if model.closed_streams:
                    break
                await asyncio.sleep(0.02)
    assert model.closed_streams == 1 and model.open_streams == 0
