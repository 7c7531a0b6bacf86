"""RouterService in a real grpc.aio server, with the rule and with a model deciding."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Sequence

import grpc
import pytest
from agentmesh.router.v1 import router_service_pb2 as pb
from agentmesh.router.v1 import router_service_pb2_grpc as pb_grpc
from agentmesh.type.v1 import execution_profile_pb2, message_pb2

from services.router.service import build
from shared import errors
from shared.messages import Msg, TextBlock, msg_to_pb, user
from shared.model.base import ChatResponse, ToolSpec
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, CHAT_DEFAULT, profile_to_pb
from shared.settings import Settings
from tests.grpc_helpers import channel, owner_md, running_service


class AnsweringModel:
    """A model that answers every prompt with the same text."""

    name = "answering"

    def __init__(self, answer: str) -> None:
        self.answer = answer

    async def stream(
        self, messages: Sequence[Msg], *, tools: Sequence[ToolSpec] = ()
    ) -> AsyncIterator[ChatResponse]:
        yield ChatResponse(content=(TextBlock(self.answer),))
        yield ChatResponse(is_last=True, finished_reason="stop")


def route_request(
    text: str, tools: Sequence[str], profile: object = CHAT_DEFAULT
) -> pb.RouteRequest:
    return pb.RouteRequest(
        run_id="run-1",
        # The profile of the test, converted for the request.
        profile=profile_to_pb(profile),  # type: ignore[arg-type]
        input_message=msg_to_pb(user(text)),
        tools=[message_pb2.ToolSpec(name=t) for t in tools],
    )


async def test_route_passes_the_profiles_executor_and_narrows_to_named_tools(
    settings: Settings,
) -> None:
    async with running_service("router", build, settings) as addr, channel(addr) as ch:
        stub = pb_grpc.RouterServiceStub(ch)
        response = await stub.Route(
            route_request("use web search for tea", ["web_search", "memory_write"]),
            metadata=owner_md("alice"),
        )
        memory = await stub.Route(
            route_request("anything", ["memory_write"], AUTOMATION_MEMORY_DEFAULT),
            metadata=owner_md("alice"),
        )
    assert response.executor == execution_profile_pb2.EXECUTOR_WORKER
    assert list(response.tool_names) == ["web_search"]
    assert not response.HasField("usage")  # the rule decided
    assert memory.executor == execution_profile_pb2.EXECUTOR_MEMORY
    assert list(memory.tool_names) == ["memory_write"]


async def test_a_model_that_tries_to_widen_is_clamped(settings: Settings) -> None:
    model = AnsweringModel(
        '{"executor": "memory", "tools": ["rm_rf", "web_search"], "reason": "x"}'
    )
    builder = functools.partial(build, model=model)
    async with running_service("router", builder, settings) as addr, channel(addr) as ch:
        response = await pb_grpc.RouterServiceStub(ch).Route(
            route_request("hello", ["web_search", "memory_write"]), metadata=owner_md("alice")
        )
    assert response.executor == execution_profile_pb2.EXECUTOR_WORKER
    assert list(response.tool_names) == ["web_search"]
    # The model was asked: its call's usage comes back (here estimated: it reported none).
    assert response.HasField("usage") and response.usage.estimated
    assert response.usage.input_tokens > 0


async def test_an_unusable_model_answer_falls_back_to_the_rule(settings: Settings) -> None:
    builder = functools.partial(build, model=AnsweringModel("no idea"))
    async with running_service("router", builder, settings) as addr, channel(addr) as ch:
        response = await pb_grpc.RouterServiceStub(ch).Route(
            route_request("hello", ["web_search"]), metadata=owner_md("alice")
        )
    assert list(response.tool_names) == ["web_search"]


async def test_profile_without_executor_is_invalid_argument(settings: Settings) -> None:
    request = route_request("hello", [])
    request.profile.executor = execution_profile_pb2.EXECUTOR_UNSPECIFIED
    async with running_service("router", build, settings) as addr, channel(addr) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await pb_grpc.RouterServiceStub(ch).Route(request, metadata=owner_md("alice"))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert errors.from_rpc_error(info.value).violations[0][0] == "profile.executor"
