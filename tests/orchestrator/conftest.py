"""The run pipeline for real: orchestrator, router, executor and history servers on port 0."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc
from agentmesh.history.v1 import history_service_pb2 as history_pb
from agentmesh.history.v1 import history_service_pb2_grpc as history_grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2_grpc as pb_grpc
from agentmesh.type.v1 import message_pb2, run_event_pb2

from services.executor.service import build as build_executor
from services.history.service import build as build_history
from services.launcher import free_port
from services.memory.service import build as build_memory
from services.orchestrator.core import RunPolicy
from services.orchestrator.service import build as build_orchestrator
from services.router.service import build as build_router
from shared.messages import msg_to_pb, user
from shared.model.base import ChatModel
from shared.profiles import ProfileRegistry
from shared.settings import Settings
from tests.grpc_helpers import channel, owner_md, running_service

ALICE = owner_md("alice")
BOB = owner_md("bob")


def dead_address() -> str:
    """An address nothing listens on (connections are refused at once)."""
    return f"127.0.0.1:{free_port()}"


@dataclass
class Suite:
    orchestrator: pb_grpc.OrchestratorServiceStub
    history: history_grpc.HistoryServiceStub


@asynccontextmanager
async def running_suite(
    settings: Settings,
    *,
    history: bool = True,
    router: bool = True,
    executor: bool = True,
    model: ChatModel | None = None,
    router_model: ChatModel | None = None,
    token_latency: float = 0.0,
    profiles: ProfileRegistry | None = None,
    memory: bool = False,
    policy: RunPolicy | None = None,
) -> AsyncIterator[Suite]:
    """Start the services the orchestrator calls (a missing one gets a dead address), then it.
    With `memory`, a memory service for the executor's memory tools and agent; with
    `router_model`, a router that asks that model when it has a choice."""
    async with AsyncExitStack() as stack:
        memory_addr = (
            await stack.enter_async_context(running_service("memory", build_memory, settings))
            if memory
            else dead_address()
        )
        peers = settings.model_copy(
            update={"scripted_token_latency": token_latency, "memory_addr": memory_addr}
        )
        addresses: dict[str, Any] = {
            # The orchestrator indexes chat runs' messages for conversation recall.
            "memory_addr": memory_addr,
            "history_addr": await stack.enter_async_context(
                running_service("history", build_history, peers)
            )
            if history
            else dead_address(),
            "router_addr": await stack.enter_async_context(
                running_service(
                    "router", functools.partial(build_router, model=router_model), peers
                )
            )
            if router
            else dead_address(),
            "executor_addr": await stack.enter_async_context(
                running_service("executor", functools.partial(build_executor, model=model), peers)
            )
            if executor
            else dead_address(),
        }
        orchestrator_settings = settings.model_copy(update=addresses)
        address = await stack.enter_async_context(
            running_service(
                "orchestrator",
                functools.partial(build_orchestrator, profiles=profiles, policy=policy),
                orchestrator_settings,
            )
        )
        orchestrator_channel = await stack.enter_async_context(channel(address))
        history_channel = await stack.enter_async_context(channel(addresses["history_addr"]))
        yield Suite(
            pb_grpc.OrchestratorServiceStub(orchestrator_channel),
            history_grpc.HistoryServiceStub(history_channel),
        )


def start_request(
    thread_id: str, run_id: str, text: str = "hello orchestrator", **fields: Any
) -> pb.StartRunRequest:
    values: dict[str, Any] = {
        "thread_id": thread_id,
        "run_id": run_id,
        "messages": [msg_to_pb(user(text))],
        "origin": message_pb2.RUNTIME_MODE_CHAT,
    }
    values.update(fields)
    return pb.StartRunRequest(**values)


async def collect(call: Any) -> list[run_event_pb2.RunEvent]:
    """The rest of a streaming call's events (read() so a partly read call works too)."""
    events = []
    while (response := await call.read()) is not grpc.aio.EOF:
        events.append(response.event)
    return events


def shape(events: Sequence[run_event_pb2.RunEvent]) -> list[str]:
    """Event types, with the step name for steps ("STEP_STARTED:router")."""
    out = []
    for event in events:
        payload = event.WhichOneof("payload") or ""
        name = payload.upper()
        if payload in ("step_started", "step_finished"):
            name += ":" + getattr(event, payload).step_name
        out.append(name)
    return out


def squeeze(names: Sequence[str]) -> list[str]:
    """Consecutive repeats collapsed (one or more TEXT_MESSAGE_CONTENT -> one)."""
    return [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]


async def history_of(suite: Suite, thread_id: str, owner: Any = ALICE) -> list[message_pb2.Message]:
    response = await suite.history.ListHistory(
        history_pb.ListHistoryRequest(thread_id=thread_id, direction=history_pb.DIRECTION_FORWARD),
        metadata=owner,
    )
    return list(response.messages)


async def run_record(suite: Suite, run_id: str) -> history_pb.Run:
    response = await suite.history.GetRun(history_pb.GetRunRequest(run_id=run_id), metadata=ALICE)
    return response.run


def rpc_code(exc: BaseException) -> grpc.StatusCode:
    assert isinstance(exc, grpc.aio.AioRpcError)
    return exc.code()
