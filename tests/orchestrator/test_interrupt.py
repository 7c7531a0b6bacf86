"""interrupt / rollback stop the thread's active run at once on the replica that runs it
(a local signal), not at its next lease renewal."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from agentmesh.history.v1 import history_service_pb2 as history_pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from agentmesh.type.v1 import run_event_pb2

from services.orchestrator.core import RunPolicy
from shared.settings import Settings
from tests.executor.models import TurnsModel, text
from tests.orchestrator.conftest import (
    ALICE,
    collect,
    history_of,
    run_record,
    running_suite,
    start_request,
)

# About 20 s of streaming at 0.05 s a word: it ends long after the test's bound.
SLOW_TEXT = " ".join(f"word{i}" for i in range(400))


@dataclass(frozen=True)
class NoRenewalInTime(RunPolicy):
    """Leases renewed only once a minute: a cancel that waited for the renewal would come
    far too late for the test, so only the local signal can stop the run in time."""

    lease_seconds: float = 180.0

    @property
    def renew_seconds(self) -> float:
        return 60.0


async def _interrupted_by(strategy: int, settings: Settings) -> None:
    thread_id = f"t-{uuid.uuid4().hex[:8]}"
    first_id, second_id = f"r1-{thread_id}", f"r2-{thread_id}"
    model = TurnsModel([text(SLOW_TEXT), text("short answer")], latency=0.05)
    async with running_suite(settings, model=model, policy=NoRenewalInTime()) as suite:
        first = suite.orchestrator.StartRun(start_request(thread_id, first_id), metadata=ALICE)
        while not (await first.read()).event.HasField("text_message_content"):
            pass
        began = time.monotonic()
        second = suite.orchestrator.StartRun(
            start_request(thread_id, second_id, multitask_strategy=strategy), metadata=ALICE
        )
        first_rest = await collect(first)
        stopped_after = time.monotonic() - began
        second_events = await collect(second)
        record = await run_record(suite, first_id)
        visible = await history_of(suite, thread_id)
    assert first_rest[-1].run_finished.outcome == run_event_pb2.RUN_OUTCOME_CANCELLED
    assert stopped_after < 5.0, f"the active run stopped {stopped_after:.1f} s after"
    assert second_events[-1].run_finished.outcome == run_event_pb2.RUN_OUTCOME_SUCCESS
    assert record.state == history_pb.RUN_STATE_CANCELLED and record.cancel_requested
    rolled_back = strategy == pb.MULTITASK_STRATEGY_ROLLBACK
    assert record.rolled_back == rolled_back
    assert {m.run_id for m in visible} == ({second_id} if rolled_back else {first_id, second_id})


async def test_interrupt_stops_the_active_run_on_this_replica_at_once(settings: Settings) -> None:
    await _interrupted_by(pb.MULTITASK_STRATEGY_INTERRUPT, settings)


async def test_rollback_stops_the_active_run_on_this_replica_at_once(settings: Settings) -> None:
    await _interrupted_by(pb.MULTITASK_STRATEGY_ROLLBACK, settings)
