"""The shared bootstrap: health, reflection, error mapping, graceful shutdown."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from shared import errors
from shared.server import GrpcServer, ServiceParts
from shared.settings import Settings

# A tiny real service built from the health proto's generic handler API.
_SERVICE = "agentmesh.test.Probe"


def _parts(behaviour: dict[str, object]) -> ServiceParts:
    async def call(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        action = behaviour["action"]
        if action == "invalid":
            raise errors.InvalidArgument("thread_id", "must not be empty")
        if action == "crash":
            raise RuntimeError("secret internal detail")
        if action == "slow":
            await asyncio.sleep(0.5)
        return b"ok"

    def register(server: grpc.aio.Server) -> None:
        handler = grpc.method_handlers_generic_handler(
            _SERVICE,
            {"Call": grpc.unary_unary_rpc_method_handler(call)},
        )
        server.add_generic_rpc_handlers((handler,))

    return ServiceParts(register=register, service_names=[_SERVICE])


async def _start(behaviour: dict[str, object], grace: float = 2.0) -> tuple[GrpcServer, str]:
    server = GrpcServer("probe", _parts(behaviour), grace_seconds=grace)
    port = await server.start("127.0.0.1", 0)
    return server, f"127.0.0.1:{port}"


async def test_health_reports_serving_for_service_and_overall() -> None:
    server, addr = await _start({"action": "ok"})
    try:
        async with grpc.aio.insecure_channel(addr) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            for name in ("", _SERVICE):
                resp = await stub.Check(health_pb2.HealthCheckRequest(service=name))
                assert resp.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await server.stop()


async def test_domain_error_becomes_status_with_field_violation() -> None:
    server, addr = await _start({"action": "invalid"})
    try:
        async with grpc.aio.insecure_channel(addr) as ch:
            call = ch.unary_unary(f"/{_SERVICE}/Call")
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call(b"")
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            err = errors.from_rpc_error(info.value)
            assert isinstance(err, errors.InvalidArgument)
            assert err.violations == (("thread_id", "must not be empty"),)
            assert err.reason == "INVALID_ARGUMENT"
    finally:
        await server.stop()


async def test_unexpected_exception_is_internal_without_details() -> None:
    server, addr = await _start({"action": "crash"})
    try:
        async with grpc.aio.insecure_channel(addr) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await ch.unary_unary(f"/{_SERVICE}/Call")(b"")
            assert info.value.code() == grpc.StatusCode.INTERNAL
            assert "secret" not in (info.value.details() or "")
            assert rpc_status.from_call(info.value) is not None
    finally:
        await server.stop()


async def test_graceful_stop_lets_in_flight_call_finish_and_marks_not_serving() -> None:
    behaviour: dict[str, object] = {"action": "slow"}
    server, addr = await _start(behaviour, grace=5.0)
    async with grpc.aio.insecure_channel(addr) as ch:
        in_flight = asyncio.ensure_future(ch.unary_unary(f"/{_SERVICE}/Call")(b""))
        await asyncio.sleep(0.1)
        await server.stop()
        assert await in_flight == b"ok"
    health = await server.health.Check(health_pb2.HealthCheckRequest(service=""), None)  # type: ignore[arg-type]
    assert health.status == health_pb2.HealthCheckResponse.NOT_SERVING


def test_settings_read_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMESH_HISTORY_ADDR", "history:9000")
    monkeypatch.setenv("AGENTMESH_GRACE_SECONDS", "3.5")
    s = Settings()
    assert s.addr("history") == "history:9000"
    assert s.grace_seconds == 3.5
