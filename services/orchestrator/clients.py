"""The orchestrator's peers (history, router, executor; memory for conversation recall's
index): one channel each, a deadline on
every call, the run's owner in the metadata, peer errors turned back into DomainErrors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from agentmesh.executor.v1 import executor_service_pb2, executor_service_pb2_grpc
from agentmesh.history.v1 import history_service_pb2, history_service_pb2_grpc
from agentmesh.memory.v1 import memory_service_pb2, memory_service_pb2_grpc
from agentmesh.router.v1 import router_service_pb2, router_service_pb2_grpc

from shared.clients import RECONNECT_WAIT_SECONDS, open_channel
from shared.errors import Unavailable, from_rpc_error
from shared.identity import call_metadata
from shared.logs import request_id_var
from shared.settings import Settings

HISTORY_SERVICE = history_service_pb2.DESCRIPTOR.services_by_name["HistoryService"].full_name
ROUTER_SERVICE = router_service_pb2.DESCRIPTOR.services_by_name["RouterService"].full_name


# The caller of the cross-owner lease sweep (history requires the admin scope for it).
SWEEPER = "system.orchestrator"


# The pause before an executor step is tried again on a channel that is connected (another
# replica takes it): a replica answering UNAVAILABLE at once is not called in a tight loop.
RETRY_PAUSE_SECONDS = 0.05

# The longest a finished chat run waits for its messages to be indexed for recall.
INDEX_TIMEOUT_SECONDS = 2.0


async def reconnected(channel: grpc.aio.Channel, longest: float) -> bool:
    """Whether `channel`, after a call on it failed as unavailable, connects to its peer
    again within `longest` seconds (the call may then be made again). False at once when
    it is connected (the peer itself answered UNAVAILABLE)."""
    if longest <= 0:
        return False
    if channel.get_state() is grpc.ChannelConnectivity.READY:
        return False
    try:
        await asyncio.wait_for(channel.channel_ready(), longest)
    except TimeoutError:
        return False
    return True


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
            open_channel(
                settings.addr("history"), idempotent_services=[HISTORY_SERVICE], peer="history"
            ),
            open_channel(
                settings.addr("router"), idempotent_services=[ROUTER_SERVICE], peer="router"
            ),
            open_channel(settings.addr("executor"), peer="executor"),
            open_channel(settings.addr("memory"), peer="memory"),
        ]
        self.history = history_service_pb2_grpc.HistoryServiceStub(self._channels[0])
        self.router = router_service_pb2_grpc.RouterServiceStub(self._channels[1])
        self.executor = executor_service_pb2_grpc.ExecutorServiceStub(self._channels[2])
        self.memory = memory_service_pb2_grpc.MemoryServiceStub(self._channels[3])

    async def _unary(
        self, channel: grpc.aio.Channel, rpc: Any, request: Any, owner: str, admin: bool = False
    ) -> Any:
        """One call of an idempotent peer (history, router). When the peer could not be
        reached (it restarts: its channel is not connected), the call waits for the channel
        to connect again (RECONNECT_WAIT_SECONDS in all) and is made again at once: a
        restarted peer is used as soon as it listens, not after a backoff. An UNAVAILABLE
        the peer answered itself (its database is down) is not waited for."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + min(self.rpc_timeout, RECONNECT_WAIT_SECONDS)
        while True:
            try:
                return await rpc(
                    request, timeout=self.rpc_timeout, metadata=_metadata(owner, admin=admin)
                )
            except grpc.aio.AioRpcError as err:
                error = from_rpc_error(err)
                if not isinstance(error, Unavailable) or not await reconnected(
                    channel, give_up - loop.time()
                ):
                    raise error from None

    async def begin_run(
        self, owner: str, request: history_service_pb2.BeginRunRequest
    ) -> history_service_pb2.BeginRunResponse:
        response: history_service_pb2.BeginRunResponse = await self._history_call(
            self.history.BeginRun, request, owner
        )
        return response

    async def finish_run(
        self, owner: str, request: history_service_pb2.FinishRunRequest
    ) -> history_service_pb2.FinishRunResponse:
        response: history_service_pb2.FinishRunResponse = await self._history_call(
            self.history.FinishRun, request, owner
        )
        return response

    async def load_context(
        self, owner: str, request: history_service_pb2.LoadContextRequest
    ) -> history_service_pb2.LoadContextResponse:
        response: history_service_pb2.LoadContextResponse = await self._history_call(
            self.history.LoadContext, request, owner
        )
        return response

    async def _history_call(self, rpc: Any, request: Any, owner: str, admin: bool = False) -> Any:
        return await self._unary(self._channels[0], rpc, request, owner, admin)

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
        response: router_service_pb2.RouteResponse = await self._unary(
            self._channels[1], self.router.Route, request, owner
        )
        return response

    async def list_tools(self, owner: str) -> executor_service_pb2.ListToolsResponse:
        request = executor_service_pb2.ListToolsRequest()
        response: executor_service_pb2.ListToolsResponse = await self._unary(
            self._channels[2], self.executor.ListTools, request, owner
        )
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

    async def executor_reconnected(self, longest: float) -> bool:
        """After an executor step found its replica unavailable: whether a replica can take
        the step now. Another connected replica can, after a short pause; otherwise the
        channel is waited for until it connects again (the replica restarted), at most
        `longest` seconds, and the step goes to it at once."""
        channel = self._channels[2]
        if channel.get_state() is grpc.ChannelConnectivity.READY:
            await asyncio.sleep(RETRY_PAUSE_SECONDS)
            return True
        return await reconnected(channel, longest)

    async def index_conversation(
        self, owner: str, request: memory_service_pb2.IndexConversationRequest
    ) -> None:
        """Conversation recall's index of a finished chat run's messages: one attempt (the
        index is idempotent per message, and a run does not wait for it to come back)."""
        try:
            await self.memory.IndexConversation(
                request,
                timeout=min(self.rpc_timeout, INDEX_TIMEOUT_SECONDS),
                metadata=_metadata(owner),
            )
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from None

    async def aclose(self) -> None:
        for channel in self._channels:
            await channel.close()
