"""An executor replica that becomes unavailable mid-step: the step is tried again when it had
produced nothing yet, and the run fails with RUN_ERROR UNAVAILABLE when it had (issue 7).

The executor the orchestrator reaches is a flaky replica in front of a real executor: each
call follows the next entry of its script (fail at once, fail after the first relayed event,
or pass the real executor's answer through), the way a replica that died would look to the
orchestrator (UNAVAILABLE)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import grpc
import pytest
from agentmesh.executor.v1 import executor_service_pb2 as executor_pb
from agentmesh.executor.v1 import executor_service_pb2_grpc as executor_grpc
from agentmesh.history.v1 import history_service_pb2 as history_pb
from agentmesh.history.v1 import history_service_pb2_grpc as history_grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2_grpc as pb_grpc
from agentmesh.type.v1 import message_pb2

from services.executor.service import SERVICE_NAME as EXECUTOR_SERVICE
from services.executor.service import build as build_executor
from services.history.service import build as build_history
from services.orchestrator import core
from services.orchestrator.service import build as build_orchestrator
from services.router.service import build as build_router
from shared.identity import OWNER_KEY
from shared.server import ServiceParts
from shared.settings import Settings
from tests.grpc_helpers import channel, running_service
from tests.orchestrator.conftest import (
    ALICE,
    Suite,
    collect,
    history_of,
    run_record,
    shape,
    squeeze,
    start_request,
)

# Fail before answering anything / after relaying the first event / pass everything through.
DIES_AT_ONCE = "dies at once"
# Cancels the call before answering, as a replica shutting down does to a call that reaches
# it while it stops (RST_STREAM: the caller sees CANCELLED).
STOPS_AT_ONCE = "stops at once"
DIES_AFTER_OUTPUT = "dies after output"
WORKS = "works"


@dataclass
class FlakyExecutor(executor_grpc.ExecutorServiceServicer):
    """An executor replica that follows `script`, one entry per call (then WORKS)."""

    real: executor_grpc.ExecutorServiceStub | None = None
    script: list[str] = field(default_factory=list)
    calls: int = 0

    async def Execute(
        self, request: executor_pb.ExecuteRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[executor_pb.ExecuteResponse]:
        behaviour = self.script[self.calls] if self.calls < len(self.script) else WORKS
        self.calls += 1
        if behaviour == DIES_AT_ONCE:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "connection lost")
        if behaviour == STOPS_AT_ONCE:
            await context.abort(grpc.StatusCode.CANCELLED, "CANCELLED")
        assert self.real is not None
        owner = [(k, v) for k, v in context.invocation_metadata() or () if k == OWNER_KEY]
        async for item in self.real.Execute(request, metadata=owner):
            yield item
            kinds = {i.WhichOneof("item") for i in item.items} | {item.WhichOneof("item")}
            if behaviour == DIES_AFTER_OUTPUT and "event" in kinds:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "connection lost")


@asynccontextmanager
async def suite_with(flaky: FlakyExecutor, settings: Settings) -> AsyncIterator[Suite]:
    """History, router, a real executor behind `flaky`, and the orchestrator calling `flaky`."""
    async with AsyncExitStack() as stack:
        history = await stack.enter_async_context(
            running_service("history", build_history, settings)
        )
        router = await stack.enter_async_context(running_service("router", build_router, settings))
        real = await stack.enter_async_context(
            running_service("executor", build_executor, settings)
        )
        flaky.real = executor_grpc.ExecutorServiceStub(
            await stack.enter_async_context(channel(real))
        )

        async def build_flaky(_: Settings) -> ServiceParts:
            return ServiceParts(
                register=functools.partial(
                    executor_grpc.add_ExecutorServiceServicer_to_server, flaky
                ),
                service_names=[EXECUTOR_SERVICE],
            )

        flaky_addr = await stack.enter_async_context(
            running_service("executor", build_flaky, settings)
        )
        orchestrator = await stack.enter_async_context(
            running_service(
                "orchestrator",
                build_orchestrator,
                settings.model_copy(
                    update={
                        "history_addr": history,
                        "router_addr": router,
                        "executor_addr": flaky_addr,
                    }
                ),
            )
        )
        yield Suite(
            pb_grpc.OrchestratorServiceStub(await stack.enter_async_context(channel(orchestrator))),
            history_grpc.HistoryServiceStub(await stack.enter_async_context(channel(history))),
        )


@pytest.mark.parametrize("how", [DIES_AT_ONCE, STOPS_AT_ONCE])
async def test_step_whose_replica_died_before_any_output_is_retried_and_succeeds(
    settings: Settings, how: str
) -> None:
    flaky = FlakyExecutor(script=[how, how])
    async with suite_with(flaky, settings) as suite:
        events = await collect(
            suite.orchestrator.StartRun(start_request("t-retry", "r-retry"), metadata=ALICE)
        )
        stored = await history_of(suite, "t-retry")
        record = await run_record(suite, "r-retry")
    assert flaky.calls == 3
    # The failed attempts left nothing on the stream: one step, one message.
    assert squeeze(shape(events)) == [
        "RUN_STARTED",
        "STEP_STARTED:router",
        "STEP_FINISHED:router",
        "STEP_STARTED:worker",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED:worker",
        "RUN_FINISHED",
    ]
    assert [m.kind for m in stored] == [
        message_pb2.MESSAGE_KIND_USER_MESSAGE,
        message_pb2.MESSAGE_KIND_AGENT_REPLY,
    ]
    assert record.state == history_pb.RUN_STATE_SUCCEEDED


async def test_step_whose_replica_died_after_output_fails_the_run_without_retry(
    settings: Settings,
) -> None:
    flaky = FlakyExecutor(script=[DIES_AFTER_OUTPUT])
    async with suite_with(flaky, settings) as suite:
        events = await collect(
            suite.orchestrator.StartRun(start_request("t-after", "r-after"), metadata=ALICE)
        )
        record = await run_record(suite, "r-after")
    assert flaky.calls == 1
    names = shape(events)
    assert names[:5] == [
        "RUN_STARTED",
        "STEP_STARTED:router",
        "STEP_FINISHED:router",
        "STEP_STARTED:worker",
        "TEXT_MESSAGE_START",
    ]
    assert names[-1] == "RUN_ERROR" and names.count("TEXT_MESSAGE_START") == 1
    assert events[-1].run_error.code == "UNAVAILABLE"
    assert record.state == history_pb.RUN_STATE_FAILED and record.error_code == "UNAVAILABLE"


async def test_step_whose_replicas_keep_dying_fails_after_the_bounded_attempts(
    settings: Settings,
) -> None:
    flaky = FlakyExecutor(script=[DIES_AT_ONCE] * (core.EXECUTOR_STEP_ATTEMPTS + 2))
    async with suite_with(flaky, settings) as suite:
        events = await collect(
            suite.orchestrator.StartRun(start_request("t-dead", "r-dead"), metadata=ALICE)
        )
        stored = await history_of(suite, "t-dead")
        record = await run_record(suite, "r-dead")
    assert flaky.calls == core.EXECUTOR_STEP_ATTEMPTS
    assert shape(events) == [
        "RUN_STARTED",
        "STEP_STARTED:router",
        "STEP_FINISHED:router",
        "STEP_STARTED:worker",
        "RUN_ERROR",
    ]
    assert events[-1].run_error.code == "UNAVAILABLE"
    assert [m.kind for m in stored] == [message_pb2.MESSAGE_KIND_USER_MESSAGE]
    assert record.state == history_pb.RUN_STATE_FAILED and record.error_code == "UNAVAILABLE"
