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
    # The health servicer reads no context here.
    health = await server.health.Check(health_pb2.HealthCheckRequest(service=""), None)  # type: ignore[arg-type]
    assert health.status == health_pb2.HealthCheckResponse.NOT_SERVING


def test_settings_read_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMESH_HISTORY_ADDR", "history:9000")
    monkeypatch.setenv("AGENTMESH_GRACE_SECONDS", "3.5")
    s = Settings()
    assert s.addr("history") == "history:9000"
    assert s.grace_seconds == 3.5


async def _statuses(server: GrpcServer, *names: str) -> list[int]:
    return [
        # The health servicer reads no context here.
        (await server.health.Check(health_pb2.HealthCheckRequest(service=n), None)).status  # type: ignore[arg-type]
        for n in names
    ]


async def test_a_lost_dependency_turns_health_not_serving_and_back_by_itself() -> None:
    """A check of the service's store fails: within one probe interval the server, its
    services and the store's entry are NOT_SERVING (liveness stays SERVING: restarting would
    not bring the store back); once the check passes again, SERVING again."""
    store = {"up": True}

    async def database() -> None:
        if not store["up"]:
            raise ConnectionRefusedError(111, "Connect call failed")

    parts = _parts({"action": "ok"})
    parts.dependencies = {"database": database}
    server = GrpcServer("probe", parts, grace_seconds=1, health_probe_seconds=0.1)
    await server.start("127.0.0.1", 0)
    serving, not_serving = (
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.NOT_SERVING,
    )
    names = ("", _SERVICE, "database", "liveness")
    try:
        assert await _statuses(server, *names) == [serving] * 4
        store["up"] = False
        await asyncio.sleep(0.35)
        assert await _statuses(server, *names) == [not_serving] * 3 + [serving]
        store["up"] = True
        await asyncio.sleep(0.35)
        assert await _statuses(server, *names) == [serving] * 4
    finally:
        await server.stop()


async def test_a_dependency_check_slower_than_the_interval_counts_as_lost() -> None:
    async def hangs() -> None:
        await asyncio.sleep(3600)

    parts = _parts({"action": "ok"})
    parts.dependencies = {"event_log": hangs}
    server = GrpcServer("probe", parts, grace_seconds=1, health_probe_seconds=0.1)
    await server.start("127.0.0.1", 0)
    try:
        assert await server.check_dependencies() == {"event_log"}
        assert (
            await _statuses(server, "", "event_log")
            == [health_pb2.HealthCheckResponse.NOT_SERVING] * 2
        )
    finally:
        await server.stop()


async def test_the_server_closes_the_dependency_checks_it_ran_after_the_service() -> None:
    """A check holding a connection of its own (shared.db.HealthCheck) is the server's to
    close: once, when it stops, after the service's on_stop (which may still use it)."""
    closed: list[str] = []

    class Check:
        async def __call__(self) -> None:
            return None

        async def aclose(self) -> None:
            closed.append("check")

    async def bare() -> None:  # a plain function: nothing to close
        return None

    async def on_stop() -> None:
        closed.append("service")

    parts = _parts({"action": "ok"})
    parts.dependencies = {"database": Check(), "event_log": bare}
    parts.on_stop = on_stop
    server = GrpcServer("probe", parts, grace_seconds=1, health_probe_seconds=0.1)
    await server.start("127.0.0.1", 0)
    assert await server.check_dependencies() == frozenset()
    assert closed == []
    await server.stop()
    assert closed == ["service", "check"]
