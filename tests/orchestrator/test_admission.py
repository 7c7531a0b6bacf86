"""When the stream starts: RUN_STARTED goes out while history admits the run (BeginRun), so
the caller does not wait for the database; under strategy reject history answers first, so a
busy thread is refused with no stream at all."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import grpc
import pytest
from agentmesh.history.v1 import history_service_pb2_grpc as history_grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2_grpc as pb_grpc

from services.executor.service import build as build_executor
from services.history.service import SERVICE_NAME as HISTORY_SERVICE
from services.history.service import build as build_history
from services.orchestrator.service import build as build_orchestrator
from services.router.service import build as build_router
from shared.identity import OWNER_KEY
from shared.server import ServiceParts
from shared.settings import Settings
from tests.grpc_helpers import channel, running_service
from tests.orchestrator.conftest import ALICE, Suite, collect, shape, squeeze, start_request


class GatedHistory:
    """The real history service, except that BeginRun waits until `gate` is open."""

    def __init__(self, real: history_grpc.HistoryServiceStub) -> None:
        self.real = real
        self.gate = asyncio.Event()
        self.begun = asyncio.Event()  # a BeginRun arrived (and waits at the gate)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        async def forward(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if name == "BeginRun":
                self.begun.set()
                await self.gate.wait()
            owner = [(k, v) for k, v in context.invocation_metadata() or () if k == OWNER_KEY]
            return await getattr(self.real, name)(request, metadata=owner)

        return forward


@asynccontextmanager
async def gated_suite(settings: Settings) -> AsyncIterator[tuple[Suite, GatedHistory]]:
    async with AsyncExitStack() as stack:
        enter = stack.enter_async_context
        real = await enter(running_service("history", build_history, settings))
        gated = GatedHistory(history_grpc.HistoryServiceStub(await enter(channel(real))))

        async def build_gated(_: Settings) -> ServiceParts:
            return ServiceParts(
                register=functools.partial(
                    history_grpc.add_HistoryServiceServicer_to_server, gated
                ),
                service_names=[HISTORY_SERVICE],
            )

        history = await enter(running_service("history", build_gated, settings))
        router = await enter(running_service("router", build_router, settings))
        executor = await enter(running_service("executor", build_executor, settings))
        orchestrator = await enter(
            running_service(
                "orchestrator",
                build_orchestrator,
                settings.model_copy(
                    update={
                        "history_addr": history,
                        "router_addr": router,
                        "executor_addr": executor,
                    }
                ),
            )
        )
        yield (
            Suite(
                pb_grpc.OrchestratorServiceStub(await enter(channel(orchestrator))),
                history_grpc.HistoryServiceStub(await enter(channel(real))),
            ),
            gated,
        )


async def test_run_started_reaches_the_caller_while_history_admits_the_run(
    settings: Settings,
) -> None:
    async with gated_suite(settings) as (suite, gated):
        call = suite.orchestrator.StartRun(start_request("t-early", "r-early"), metadata=ALICE)
        # The gate is closed: no BeginRun can have been answered, yet the stream begins.
        first = await asyncio.wait_for(call.read(), 10)
        await asyncio.wait_for(gated.begun.wait(), 10)  # and history is being asked
        gated.gate.set()
        rest = await collect(call)
    assert first.event.WhichOneof("payload") == "run_started"
    assert squeeze(shape([first.event, *rest]))[-1] == "RUN_FINISHED"


async def test_under_reject_history_answers_before_any_event(settings: Settings) -> None:
    async with gated_suite(settings) as (suite, gated):
        call = suite.orchestrator.StartRun(
            start_request("t-reject", "r-reject", multitask_strategy=pb.MULTITASK_STRATEGY_REJECT),
            metadata=ALICE,
        )
        first = asyncio.ensure_future(call.read())
        await asyncio.wait_for(gated.begun.wait(), 10)
        done, _ = await asyncio.wait({first}, timeout=0.3)
        assert not done  # no event while history has not admitted the run
        gated.gate.set()
        response = await asyncio.wait_for(first, 10)
        rest = await collect(call)
    assert response.event.WhichOneof("payload") == "run_started"
    assert squeeze(shape([response.event, *rest]))[-1] == "RUN_FINISHED"


async def test_a_caller_that_gives_up_while_the_run_is_admitted_does_not_cut_the_start_in_half(
    settings: Settings,
) -> None:
    # The gateway's first-event timeout: the caller cancels while history admits the run.
    # The start goes on as a whole, so the same StartRun sent again is RUN_EXISTS, not a
    # second run (and not a run stored in history that nobody runs).
    async with gated_suite(settings) as (suite, gated):
        request = start_request("t-gone", "r-gone", multitask_strategy=pb.MULTITASK_STRATEGY_REJECT)
        call = suite.orchestrator.StartRun(request, metadata=ALICE)
        first = asyncio.ensure_future(call.read())
        await asyncio.wait_for(gated.begun.wait(), 10)
        call.cancel()
        await asyncio.wait({first}, timeout=10)
        gated.gate.set()
        again = suite.orchestrator.StartRun(request, metadata=ALICE)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await asyncio.wait_for(again.read(), 10)
        events = await asyncio.wait_for(_follow_when_stored(suite, "r-gone"), 30)
    assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert squeeze(shape(events))[0] == "RUN_STARTED"
    assert squeeze(shape(events))[-1] == "RUN_FINISHED"


async def _follow_when_stored(suite: Suite, run_id: str) -> list[Any]:
    """The run's events from the start, once its log exists (its start may still be on)."""
    while True:
        follow = suite.orchestrator.StreamRun(
            pb.StreamRunRequest(run_id=run_id, after_sequence=0), metadata=ALICE
        )
        try:
            return await collect(follow)
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.NOT_FOUND:
                raise
            await asyncio.sleep(0.05)
