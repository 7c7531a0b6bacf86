"""The orchestrator's peers (history, router, executor): one channel each, a deadline on
every call, the run's owner in the metadata, peer errors turned back into DomainErrors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from agentmesh.executor.v1 import executor_service_pb2, executor_service_pb2_grpc
from agentmesh.history.v1 import history_service_pb2, history_service_pb2_grpc
from agentmesh.router.v1 import router_service_pb2, router_service_pb2_grpc

from shared.clients import open_channel
from shared.errors import from_rpc_error
from shared.identity import call_metadata
from shared.logs import request_id_var
from shared.settings import Settings

HISTORY_SERVICE = history_service_pb2.DESCRIPTOR.services_by_name["HistoryService"].full_name
ROUTER_SERVICE = router_service_pb2.DESCRIPTOR.services_by_name["RouterService"].full_name


# The caller of the cross-owner lease sweep (history requires the admin scope for it).
SWEEPER = "system.orchestrator"


def _metadata(owner: str, *, admin: bool = False) -> tuple[tuple[str, str], ...]:
    return call_metadata(owner, request_id=request_id_var.get() or None, admin=admin)


class Peers:
    def __init__(self, settings: Settings) -> None:
        self.rpc_timeout = settings.rpc_timeout_seconds
        self.run_timeout = settings.run_timeout_seconds
        # History writes carry client-chosen ids (run id, message ids) and the router only
        # decides: both may be retried. An executor step may not (it runs tools): the run
        # tries it again itself, only while it has produced nothing (RunManager._executor_step).
        self._channels = [
            open_channel(settings.addr("history"), idempotent_services=[HISTORY_SERVICE]),
            open_channel(settings.addr("router"), idempotent_services=[ROUTER_SERVICE]),
            open_channel(settings.addr("executor")),
        ]
        self.history = history_service_pb2_grpc.HistoryServiceStub(self._channels[0])
        self.router = router_service_pb2_grpc.RouterServiceStub(self._channels[1])
        self.executor = executor_service_pb2_grpc.ExecutorServiceStub(self._channels[2])

    async def begin_run(
        self, owner: str, request: history_service_pb2.BeginRunRequest
    ) -> history_service_pb2.BeginRunResponse:
        try:
            response: history_service_pb2.BeginRunResponse = await self.history.BeginRun(
                request, timeout=self.rpc_timeout, metadata=_metadata(owner)
            )
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from None
        return response

    async def finish_run(
        self, owner: str, request: history_service_pb2.FinishRunRequest
    ) -> history_service_pb2.FinishRunResponse:
        try:
            response: history_service_pb2.FinishRunResponse = await self.history.FinishRun(
                request, timeout=self.rpc_timeout, metadata=_metadata(owner)
            )
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from None
        return response

    async def load_context(
        self, owner: str, request: history_service_pb2.LoadContextRequest
    ) -> history_service_pb2.LoadContextResponse:
        try:
            response: history_service_pb2.LoadContextResponse = await self.history.LoadContext(
                request, timeout=self.rpc_timeout, metadata=_metadata(owner)
            )
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from None
        return response

    async def _history_call(self, rpc: Any, request: Any, owner: str, admin: bool = False) -> Any:
        try:
            return await rpc(request, timeout=self.rpc_timeout, metadata=_metadata(owner, admin=admin))
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from None

    async def renew_lease(
        self, owner: str, request: history_service_pb2.RenewRunLeaseRequest
    ) -> history_service_pb2.RenewRunLeaseResponse:
        response: history_service_pb2.RenewRunLeaseResponse = await self._history_call(
            self.history.RenewRunLease, request, owner
        )
        return response

    async def request_cancellation(self, owner: str, run_id: str) -> history_service_pb2.Run:
        response: history_service_pb2.RequestRunCancellationResponse = await self._history_call(
            self.history.RequestRunCancellation,
            history_service_pb2.RequestRunCancellationRequest(run_id=run_id),
            owner,
        )
        return response.run

    async def get_run(self, owner: str, run_id: str) -> history_service_pb2.Run:
        response: history_service_pb2.GetRunResponse = await self._history_call(
            self.history.GetRun, history_service_pb2.GetRunRequest(run_id=run_id), owner
        )
        return response.run

    async def expire_leases(self) -> list[history_service_pb2.Run]:
        response: history_service_pb2.ExpireRunLeasesResponse = await self._history_call(
            self.history.ExpireRunLeases,
            history_service_pb2.ExpireRunLeasesRequest(page_size=100),
            SWEEPER,
            admin=True,
        )
        return list(response.runs)

    async def route(
        self, owner: str, request: router_service_pb2.RouteRequest
    ) -> router_service_pb2.RouteResponse:
        try:
            response: router_service_pb2.RouteResponse = await self.router.Route(
                request, timeout=self.rpc_timeout, metadata=_metadata(owner)
            )
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from None
        return response

    async def execute(
        self, owner: str, request: executor_service_pb2.ExecuteRequest
    ) -> AsyncIterator[executor_service_pb2.ExecuteResponse]:
        call = self.executor.Execute(request, timeout=self.run_timeout, metadata=_metadata(owner))
        try:
            async for response in call:
                # A batching executor (request.batch_items) sends several items at once.
                if response.items:
                    for item in response.items:
                        yield item
                else:
                    yield response
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from None
        finally:
            # A cancelled run stops the executor's step (and its model stream) at once.
            call.cancel()

    async def aclose(self) -> None:
        for channel in self._channels:
            await channel.close()
