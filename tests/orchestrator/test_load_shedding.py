"""Load shedding at the orchestrator: over its bound of runs in flight (per replica, per
owner) StartRun is refused at once with UNAVAILABLE reason OVERLOADED, before anything of
the run is stored; the runs it took go on unaffected."""

from __future__ import annotations

import time
import uuid

import grpc
import pytest
from agentmesh.history.v1 import history_service_pb2 as history_pb
from agentmesh.type.v1 import run_event_pb2

from shared.errors import from_rpc_error
from shared.settings import Settings
from tests.orchestrator.conftest import (
    ALICE,
    BOB,
    collect,
    owner_md,
    running_suite,
    start_request,
)

CAROL = owner_md("carol")
SLOW = " ".join(f"word{i}" for i in range(60))  # about 3 s at 0.05 s a token


def ids() -> tuple[str, str]:
    return f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"


async def _refused(suite: object, md: object) -> tuple[float, grpc.aio.AioRpcError, str]:
    thread_id, run_id = ids()
    began = time.monotonic()
    # The in-process suite's stub attributes are set at run time.
    call = suite.orchestrator.StartRun(start_request(thread_id, run_id), metadata=md)  # type: ignore[attr-defined]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call.read()
    return time.monotonic() - began, info.value, run_id


async def test_over_the_bounds_start_run_is_refused_at_once_and_stores_nothing(
    settings: Settings,
) -> None:
    bounded = settings.model_copy(
        update={"max_runs_in_flight": 2, "max_runs_in_flight_per_owner": 1}
    )
    async with running_suite(bounded, token_latency=0.05) as suite:
        alice = suite.orchestrator.StartRun(start_request(*ids(), SLOW), metadata=ALICE)
        assert (await alice.read()).event.HasField("run_started")
        # Alice is at her bound; Bob is not (one owner does not take another's room).
        took, owner_err, owner_run = await _refused(suite, ALICE)
        bob = suite.orchestrator.StartRun(start_request(*ids(), SLOW), metadata=BOB)
        assert (await bob.read()).event.HasField("run_started")
        # Now the replica is at its bound: Carol, with no run in flight, is refused too.
        _, process_err, process_run = await _refused(suite, CAROL)
        alice_rest, bob_rest = await collect(alice), await collect(bob)
        for run_id, md in ((owner_run, ALICE), (process_run, CAROL)):
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await suite.history.GetRun(history_pb.GetRunRequest(run_id=run_id), metadata=md)
            assert missing.value.code() == grpc.StatusCode.NOT_FOUND  # nothing stored
        # The bound is released when a run ends: Alice runs again.
        again = await collect(suite.orchestrator.StartRun(start_request(*ids()), metadata=ALICE))
    assert took < 1.0
    for err, scope in ((owner_err, "owner"), (process_err, "process")):
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        domain = from_rpc_error(err)
        assert domain.reason == "OVERLOADED" and domain.metadata["scope"] == scope
        assert domain.metadata["retry_after_seconds"] == "1"
    for rest in (alice_rest, bob_rest, again):
        assert rest[-1].run_finished.outcome == run_event_pb2.RUN_OUTCOME_SUCCESS
