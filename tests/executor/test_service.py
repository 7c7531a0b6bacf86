"""ExecutorService in a real grpc.aio server."""

from __future__ import annotations

import asyncio
import functools

import grpc
import pytest
from agentmesh.executor.v1 import executor_service_pb2 as pb
from agentmesh.executor.v1 import executor_service_pb2_grpc as pb_grpc
from agentmesh.memory.v1 import memory_service_pb2 as memory_pb
from agentmesh.memory.v1 import memory_service_pb2_grpc as memory_grpc
from agentmesh.type.v1 import execution_profile_pb2, message_pb2

from services.executor.service import build
from services.memory.service import build as build_memory
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
    return pb.ExecuteRequest(**values)


async def test_execute_streams_text_events_then_the_reply_then_the_result(
    settings: Settings,
) -> None:
    async with running_service("executor", build, settings) as addr, channel(addr) as ch:
        stub = pb_grpc.ExecutorServiceStub(ch)
        items = [r async for r in stub.Execute(request(), metadata=owner_md("alice"))]
    kinds = [r.WhichOneof("item") for r in items]
    # The model turn's usage as it starts (its input, counted), should it be cut short.
    assert kinds[0] == "turn_usage" and items[0].turn_usage.input_tokens > 0
    assert items[0].turn_usage.estimated and items[0].turn_usage.output_tokens == 0
    assert kinds[-2:] == ["message", "result"] and set(kinds[1:-2]) == {"event"}
    events = [r.event for r in items[1:-2]]
    start = events[0].text_message_start
    assert start.message_id == "reply-1" and start.role == message_pb2.ROLE_ASSISTANT
    assert events[-1].WhichOneof("payload") == "text_message_end"
    deltas = [e.text_message_content.delta for e in events[1:-1]]
    assert deltas and all(deltas)
    reply = msg_from_pb(items[-2].message)
    assert reply.id == "reply-1" and reply.text == "".join(deltas)
    assert items[-1].result.finished_reason == "stop"
    assert all(e.sequence == 0 for e in events)  # the orchestrator numbers them


async def test_a_caller_asking_for_batches_gets_the_same_items_grouped(settings: Settings) -> None:
    async with running_service("executor", build, settings) as addr, channel(addr) as ch:
        stub = pb_grpc.ExecutorServiceStub(ch)
        single = [r async for r in stub.Execute(request(), metadata=owner_md("alice"))]
        batched = [
            r async for r in stub.Execute(request(batch_items=True), metadata=owner_md("alice"))
        ]
    assert all(r.items and r.WhichOneof("item") is None for r in batched)
    flat = [item for r in batched for item in r.items]
    assert [i.WhichOneof("item") for i in flat] == [i.WhichOneof("item") for i in single]
    assert msg_from_pb(flat[-2].message).text == msg_from_pb(single[-2].message).text
    assert len(batched) < len(flat)  # a scripted model is never waited for: items group


def chat_message(text_: str, position: int, *, thread_id: str = "chat-1") -> message_pb2.Message:
    pb_msg = msg_to_pb(user(text_, thread_id=thread_id, position=position))
    pb_msg.created_at.GetCurrentTime()
    return pb_msg


def memory_request(context: list[message_pb2.Message], run_id: str = "run-m1") -> pb.ExecuteRequest:
    return request(
        run_id=run_id,
        executor=execution_profile_pb2.EXECUTOR_MEMORY,
        profile=profile_to_pb(AUTOMATION_MEMORY_DEFAULT),
        context_messages=context,
        input_message=msg_to_pb(user("Extract durable memories.")),
        declared_tools=["memory_write", "memory_forget"],
        reply_message_id=f"reply-{run_id}",
    )


async def test_memory_agent_writes_the_facts_for_the_run_owner_once(settings: Settings) -> None:
    async with running_service("memory", build_memory, settings) as memory_addr:
        executor_settings = settings.model_copy(update={"memory_addr": memory_addr})
        async with (
            running_service("executor", build, executor_settings) as addr,
            channel(addr) as ch,
            channel(memory_addr) as mch,
        ):
            stub = pb_grpc.ExecutorServiceStub(ch)
            memories = memory_grpc.MemoryServiceStub(mch)
            context = [chat_message("I love green tea and my name is Lin", 1)]
            first = [
                r async for r in stub.Execute(memory_request(context), metadata=owner_md("alice"))
            ]
            again = [
                r
                async for r in stub.Execute(
                    memory_request(context, "run-m2"), metadata=owner_md("alice")
                )
            ]
            alice = await memories.ListMemories(
                memory_pb.ListMemoriesRequest(), metadata=owner_md("alice")
            )
            bob = await memories.ListMemories(
                memory_pb.ListMemoriesRequest(), metadata=owner_md("bob")
            )
    payloads = [r.event.WhichOneof("payload") for r in first if r.WhichOneof("item") == "event"]
    assert payloads.count("tool_call_start") == 2 and payloads.count("tool_call_result") == 2
    assert sorted(m.content for m in alice.memories) == [
        "User likes green tea",
        "User's name is Lin",
    ]
    assert {m.source_run_id for m in alice.memories} == {"run-m1"}
    assert list(bob.memories) == []
    # The second run finds nothing after the watermark: no tool call, nothing written.
    assert not any(r.event.WhichOneof("payload") == "tool_call_start" for r in again)
    assert (
        "No new messages"
        in msg_from_pb(next(r.message for r in again if r.WhichOneof("item") == "message")).text
    )


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"executor": execution_profile_pb2.EXECUTOR_UNSPECIFIED}, "executor"),
        ({"reply_message_id": ""}, "reply_message_id"),
        ({"input_message": None}, "input_message"),
        (
            {"client_tools": [message_pb2.ToolSpec(name="x", parameters_json="[1]")]},
            "client_tools[0].parameters_json",
        ),
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
            assert (await call.read()).WhichOneof("item") == "turn_usage"
            first = await call.read()
            assert first.event.WhichOneof("payload") == "text_message_start"
            assert model.open_streams == 1
            call.cancel()
            for _ in range(50):
                if model.closed_streams:
                    break
                await asyncio.sleep(0.02)
    assert model.closed_streams == 1 and model.open_streams == 0
