"""Each service says which version answered: `x-agentmesh-version` trailing metadata on
every response (success, error, streaming), and a start-up log line with the version and the
gRPC services served (which reflection also lists)."""

from __future__ import annotations

import logging

import grpc
import pytest
from agentmesh.history.v1 import history_service_pb2, history_service_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.history.service import SERVICE_NAME as HISTORY
from services.history.service import build as build_history
from shared import errors
from shared.interceptors import VERSION_KEY
from shared.settings import Settings
from shared.version import VERSION
from tests.grpc_helpers import channel, owner_md, running_service


def _version(metadata: object) -> str | None:
    # Trailing metadata as grpc gives it: pairs of any values.
    return dict(metadata or ()).get(VERSION_KEY)  # type: ignore[call-overload, no-any-return]


async def test_every_response_carries_the_version(settings: Settings) -> None:
    async with (
        running_service("history", build_history, settings) as address,
        channel(address) as ch,
    ):
        ok = history_service_pb2_grpc.HistoryServiceStub(ch).ListThreads(
            history_service_pb2.ListThreadsRequest(), metadata=owner_md("alice")
        )
        await ok
        assert _version(await ok.trailing_metadata()) == VERSION

        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await history_service_pb2_grpc.HistoryServiceStub(ch).GetThread(
                history_service_pb2.GetThreadRequest(thread_id="missing"),
                metadata=owner_md("alice"),
            )
        assert failed.value.code() is grpc.StatusCode.NOT_FOUND
        assert _version(failed.value.trailing_metadata()) == VERSION
        # The status details travel beside it.
        assert errors.from_rpc_error(failed.value).reason == "NOT_FOUND"

        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest())
        await health
        assert _version(await health.trailing_metadata()) == VERSION

        stream = reflection_pb2_grpc.ServerReflectionStub(ch).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        reply = await stream.read()
        assert await stream.read() is grpc.aio.EOF
        assert _version(await stream.trailing_metadata()) == VERSION
        listed = [s.name for s in reply.list_services_response.service]
        assert HISTORY in listed


async def test_start_up_log_line_names_version_and_services(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agentmesh.server")
    async with running_service("history", build_history, settings):
        pass
    [record] = [r for r in caplog.records if r.getMessage() == "serving"]
    # The structured fields the JSON formatter adds to a record.
    fields = record.fields  # type: ignore[attr-defined]
    assert fields["service"] == "history" and fields["version"] == VERSION
    assert fields["grpc_services"] == [HISTORY]
