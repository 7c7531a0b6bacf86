"""The in-process transport (shared/inproc.py) answers as the network does: every case runs
against both, through the same shared.server bootstrap, interceptors and generated stubs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from agentmesh.executor.v1 import executor_service_pb2, executor_service_pb2_grpc
from agentmesh.router.v1 import router_service_pb2, router_service_pb2_grpc
from agentmesh.type.v1 import run_event_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from shared import inproc
from shared.clients import open_channel
from shared.errors import InvalidArgument, from_rpc_error
from shared.identity import OWNER_KEY, REQUEST_ID_KEY, call_metadata
from shared.interceptors import VERSION_KEY
from shared.logs import request_id_var
from shared.server import GrpcServer, ServiceParts
from shared.transport import MAX_MESSAGE_BYTES
from shared.version import VERSION

NAME = "conformance"
ROUTER = router_service_pb2.DESCRIPTOR.services_by_name["RouterService"].full_name
EXECUTOR = executor_service_pb2.DESCRIPTOR.services_by_name["ExecutorService"].full_name


@dataclass
class Seen:
    """What the handlers observed, for the assertions."""

    metadata: dict[str, str] = field(default_factory=dict)
    request_id_in_handler: str = "unset"
    time_remaining: float | None = None
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    yielded: int = 0
    kept: list[Any] = field(default_factory=list)


class Router(router_service_pb2_grpc.RouterServiceServicer):
    """Route answers by run_id: the case to play."""

    def __init__(self, seen: Seen) -> None:
        self.seen = seen

    async def Route(
        self, request: router_service_pb2.RouteRequest, context: grpc.aio.ServicerContext
    ) -> router_service_pb2.RouteResponse:
        case = request.run_id
        self.seen.metadata = {
            k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)
        }
        self.seen.time_remaining = context.time_remaining()
        if case == "invalid":
            raise InvalidArgument("profile.name", "is not a known profile")
        if case == "crash":
            raise RuntimeError("a secret that must not reach the caller")
        if case == "slow":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.seen.cancelled.set()
                raise
        if case.startswith("big:"):
            return router_service_pb2.RouteResponse(reason="x" * int(case[4:]))
        if case == "mutate":
            # The handler changes what it was given and what it answered, after answering:
            # the caller's objects must not change.
            request.run_id = "changed by the handler"
            response = router_service_pb2.RouteResponse(reason="as answered")
            self.seen.kept.append(response)
            return response
        self.seen.request_id_in_handler = request_id_var.get()
        size = len(request.input_message.SerializeToString())
        return router_service_pb2.RouteResponse(reason=f"echo {size}", tool_names=["a", "b"])


class Executor(executor_service_pb2_grpc.ExecutorServiceServicer):
    """Execute streams events by run_id: endless (until cancelled) or failing after two."""

    def __init__(self, seen: Seen) -> None:
        self.seen = seen

    async def Execute(
        self, request: executor_service_pb2.ExecuteRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[executor_service_pb2.ExecuteResponse]:
        try:
            n = 0
            while True:
                if request.run_id == "fail-after-two" and n == 2:
                    raise InvalidArgument("input_message", "refused mid-stream")
                if request.run_id == "two" and n == 2:
                    return
                n += 1
                self.seen.yielded = n
                yield executor_service_pb2.ExecuteResponse(
                    event=run_event_pb2.RunEvent(run_id=f"{request.run_id}-{n}")
                )
                await asyncio.sleep(0.01)
        finally:
            # Cancelled, or closed by the interceptor's generator ending (GeneratorExit).
            self.seen.cancelled.set()


@dataclass
class Transport:
    kind: str
    server: GrpcServer
    channel: grpc.aio.Channel
    seen: Seen

    @property
    def router(self) -> router_service_pb2_grpc.RouterServiceStub:
        return router_service_pb2_grpc.RouterServiceStub(self.channel)

    @property
    def executor(self) -> executor_service_pb2_grpc.ExecutorServiceStub:
        return executor_service_pb2_grpc.ExecutorServiceStub(self.channel)


def _parts(seen: Seen) -> ServiceParts:
    def register(server: grpc.aio.Server) -> None:
        router_service_pb2_grpc.add_RouterServiceServicer_to_server(Router(seen), server)
        executor_service_pb2_grpc.add_ExecutorServiceServicer_to_server(Executor(seen), server)

    return ServiceParts(register=register, service_names=[ROUTER, EXECUTOR])


@pytest.fixture(params=["network", "inproc"])
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[Transport]:
    kind: str = request.param
    inproc.reset()
    if kind == "inproc":
        inproc.host([NAME])
    seen = Seen()
    server = GrpcServer(NAME, _parts(seen), grace_seconds=1.0)
    port = await server.start("127.0.0.1", 0)
    channel = open_channel(f"127.0.0.1:{port}", peer=NAME)
    assert isinstance(channel, inproc.InProcessChannel) == (kind == "inproc")
    try:
        yield Transport(kind, server, channel, seen)
    finally:
        await channel.close()
        await server.stop()
        inproc.reset()


def _md(owner: str = "alice") -> tuple[tuple[str, str], ...]:
    return call_metadata(owner, request_id="req-123")


async def test_a_unary_call_carries_the_metadata_and_answers_the_response(
    transport: Transport,
) -> None:
    request = router_service_pb2.RouteRequest(run_id="echo")
    request.input_message.id = "m1"
    call = transport.router.Route(request, metadata=_md(), timeout=5)
    response = await call
    size = len(request.input_message.SerializeToString())
    assert response.reason == f"echo {size}"
    assert list(response.tool_names) == ["a", "b"]
    assert transport.seen.metadata[OWNER_KEY] == "alice"
    assert transport.seen.metadata[REQUEST_ID_KEY] == "req-123"
    # The server interceptor ran: the request id it took from the metadata is the handler's.
    assert transport.seen.request_id_in_handler == "req-123"
    assert await call.code() is grpc.StatusCode.OK
    assert (VERSION_KEY, VERSION) in tuple(await call.trailing_metadata())


async def test_a_domain_error_arrives_with_its_code_details_and_field_violation(
    transport: Transport,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await transport.router.Route(
            router_service_pb2.RouteRequest(run_id="invalid"), metadata=_md(), timeout=5
        )
    err = caught.value
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert err.details() == "profile.name: is not a known profile"
    assert (VERSION_KEY, VERSION) in tuple(err.trailing_metadata() or ())
    rebuilt = from_rpc_error(err)
    assert isinstance(rebuilt, InvalidArgument)
    assert list(rebuilt.violations) == [("profile.name", "is not a known profile")]


async def test_an_unexpected_exception_is_internal_without_its_text(transport: Transport) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await transport.router.Route(
            router_service_pb2.RouteRequest(run_id="crash"), metadata=_md(), timeout=5
        )
    assert caught.value.code() is grpc.StatusCode.INTERNAL
    assert "secret" not in (caught.value.details() or "")


async def test_a_deadline_ends_the_call_and_cancels_the_handler(transport: Transport) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await transport.router.Route(
            router_service_pb2.RouteRequest(run_id="slow"), metadata=_md(), timeout=0.3
        )
    assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    await asyncio.wait_for(transport.seen.cancelled.wait(), 5)
    remaining = transport.seen.time_remaining
    # The handler saw the caller's deadline; gRPC core rounds it to its clock's tick (seen:
    # 0.30009 s of a 0.3 s timeout over the network), so allow a millisecond or two.
    assert remaining is not None and 0 < remaining <= 0.302


async def test_cancelling_a_stream_midway_cancels_the_handler(transport: Transport) -> None:
    call = transport.executor.Execute(
        executor_service_pb2.ExecuteRequest(run_id="endless"), metadata=_md(), timeout=10
    )
    got = []
    async for item in call:
        got.append(item.event.run_id)
        if len(got) == 3:
            break
    assert got == ["endless-1", "endless-2", "endless-3"]
    assert call.cancel()
    await asyncio.wait_for(transport.seen.cancelled.wait(), 5)
    assert await call.code() is grpc.StatusCode.CANCELLED
    with pytest.raises(asyncio.CancelledError):
        await call.read()


async def test_a_stream_that_fails_midway_delivers_what_came_before_then_the_error(
    transport: Transport,
) -> None:
    call = transport.executor.Execute(
        executor_service_pb2.ExecuteRequest(run_id="fail-after-two"), metadata=_md(), timeout=10
    )
    got = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for item in call:
            got.append(item.event.run_id)
    assert got == ["fail-after-two-1", "fail-after-two-2"]
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert list(from_rpc_error(caught.value).violations) == [
        ("input_message", "refused mid-stream")
    ]


async def test_a_stream_that_ends_reads_eof(transport: Transport) -> None:
    call = transport.executor.Execute(
        executor_service_pb2.ExecuteRequest(run_id="two"), metadata=_md(), timeout=10
    )
    assert (await call.read()).event.run_id == "two-1"
    assert (await call.read()).event.run_id == "two-2"
    assert await call.read() is grpc.aio.EOF
    assert await call.code() is grpc.StatusCode.OK


async def test_large_messages_pass_both_ways_up_to_the_limit(transport: Transport) -> None:
    request = router_service_pb2.RouteRequest(run_id="echo")
    request.input_message.id = "m" * (8 * 1024 * 1024)
    response = await transport.router.Route(request, metadata=_md(), timeout=30)
    assert response.reason == f"echo {len(request.input_message.SerializeToString())}"
    big = await transport.router.Route(
        router_service_pb2.RouteRequest(run_id=f"big:{8 * 1024 * 1024}"),
        metadata=_md(),
        timeout=30,
    )
    assert len(big.reason) == 8 * 1024 * 1024


async def test_a_request_over_the_limit_is_resource_exhausted(transport: Transport) -> None:
    request = router_service_pb2.RouteRequest(run_id="echo")
    request.input_message.id = "m" * (MAX_MESSAGE_BYTES + 1)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await transport.router.Route(request, metadata=_md(), timeout=30)
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_a_response_over_the_limit_is_resource_exhausted(transport: Transport) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await transport.router.Route(
            router_service_pb2.RouteRequest(run_id=f"big:{MAX_MESSAGE_BYTES + 1}"),
            metadata=_md(),
            timeout=30,
        )
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_caller_and_handler_never_share_a_message(transport: Transport) -> None:
    request = router_service_pb2.RouteRequest(run_id="mutate")
    response = await transport.router.Route(request, metadata=_md(), timeout=5)
    transport.seen.kept[0].reason = "changed after answering"
    assert request.run_id == "mutate"
    assert response.reason == "as answered"


async def test_the_callers_request_id_reaches_the_handler_only_through_metadata(
    transport: Transport,
) -> None:
    token = request_id_var.set("callers-own")
    try:
        await transport.router.Route(
            router_service_pb2.RouteRequest(run_id="echo"),
            metadata=call_metadata("alice"),
            timeout=5,
        )
    finally:
        request_id_var.reset(token)
    # No x-request-id sent: the interceptor made one up; the caller's context did not leak.
    assert transport.seen.request_id_in_handler not in ("callers-own", "unset", "")


async def test_health_is_served_and_turns_not_serving_on_shutdown(transport: Transport) -> None:
    health = health_pb2_grpc.HealthStub(transport.channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=ROUTER), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    await transport.server.health.enter_graceful_shutdown()
    reply = await health.Check(health_pb2.HealthCheckRequest(service=ROUTER), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING


async def test_a_stream_both_ways_takes_an_iterator_of_requests(transport: Transport) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(transport.channel)
    call = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
    )
    names = [s.name async for reply in call for s in reply.list_services_response.service]
    assert {ROUTER, EXECUTOR} <= set(names)
    assert await call.code() is grpc.StatusCode.OK


async def test_a_stream_both_ways_takes_written_requests_one_by_one(transport: Transport) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(transport.channel)
    call = stub.ServerReflectionInfo(timeout=5)
    for _ in range(2):
        await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
        reply = await call.read()
        assert ROUTER in {s.name for s in reply.list_services_response.service}
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF


async def test_an_unknown_method_is_unimplemented(transport: Transport) -> None:
    rpc = transport.channel.unary_unary(
        "/agentmesh.router.v1.RouterService/NoSuchMethod",
        request_serializer=router_service_pb2.RouteRequest.SerializeToString,
        response_deserializer=router_service_pb2.RouteResponse.FromString,
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await rpc(router_service_pb2.RouteRequest(), metadata=_md(), timeout=5)
    assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED


async def test_a_call_after_the_server_stopped_is_unavailable(transport: Transport) -> None:
    await transport.server.stop()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await transport.router.Route(
            router_service_pb2.RouteRequest(run_id="echo"), metadata=_md(), timeout=2
        )
    assert caught.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


async def test_cancelling_the_awaiting_task_cancels_the_call(transport: Transport) -> None:
    call = transport.router.Route(
        router_service_pb2.RouteRequest(run_id="slow"), metadata=_md(), timeout=30
    )
    task = asyncio.create_task(_await(call))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(transport.seen.cancelled.wait(), 5)


async def _await(call: Any) -> Any:
    return await call


async def test_in_process_a_stream_not_read_holds_its_handler_back() -> None:
    """The window HTTP/2 flow control keeps over the network (there: 64 KiB of messages):
    a reader that stops, stops the handler within STREAM_WINDOW messages."""
    inproc.reset()
    inproc.host([NAME])
    seen = Seen()
    server = GrpcServer(NAME, _parts(seen), grace_seconds=1.0)
    await server.start("127.0.0.1", 0)
    channel = open_channel("unused:1", peer=NAME)
    try:
        call = executor_service_pb2_grpc.ExecutorServiceStub(channel).Execute(
            executor_service_pb2.ExecuteRequest(run_id="endless"), metadata=_md(), timeout=10
        )
        await call.read()
        await asyncio.sleep(0.5)  # ~50 items at one per 10 ms, without the window
        assert seen.yielded <= inproc.STREAM_WINDOW + 2
        assert (await call.read()).event.run_id == "endless-2"
        call.cancel()
        await asyncio.wait_for(seen.cancelled.wait(), 5)
    finally:
        await channel.close()
        await server.stop()
        inproc.reset()


async def test_in_process_a_peer_not_started_yet_is_unavailable_then_reached() -> None:
    inproc.reset()
    inproc.host([NAME])
    channel = open_channel("127.0.0.1:1", peer=NAME)
    stub = router_service_pb2_grpc.RouterServiceStub(channel)
    try:
        assert channel.get_state() is grpc.ChannelConnectivity.TRANSIENT_FAILURE
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Route(router_service_pb2.RouteRequest(run_id="echo"), timeout=1)
        assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
        server = GrpcServer(NAME, _parts(Seen()), grace_seconds=1.0)
        ready = asyncio.create_task(channel.channel_ready())
        await server.start("127.0.0.1", 0)
        await asyncio.wait_for(ready, 5)
        assert channel.get_state() is grpc.ChannelConnectivity.READY
        reply = await stub.Route(
            router_service_pb2.RouteRequest(run_id="echo"), metadata=_md(), timeout=5
        )
        assert reply.reason.startswith("echo")
        await server.stop()
    finally:
        await channel.close()
        inproc.reset()
