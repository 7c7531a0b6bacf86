"""History's webhook outbox (shared/outbox.py): a run that reaches its final state leaves
exactly one event, written with that state; the gateway lists and acknowledges them with
the admin scope; an owner's events go with the owner's data."""

from __future__ import annotations

import json

import grpc
import pytest
from agentmesh.history.v1 import history_service_pb2 as pb
from agentmesh.type.v1 import webhook_event_pb2 as event_pb

from tests.history.conftest import REPLY, History, begin, finish, text_msg

ADMIN = "webhook-deliverer"


async def _pending(h: History) -> list[event_pb.WebhookEvent]:
    reply = await h.stub.ListWebhookEvents(
        pb.ListWebhookEventsRequest(), metadata=h.md(ADMIN, admin=True)
    )
    return list(reply.events)


async def test_a_finished_run_leaves_one_event_and_a_retried_finish_none(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("r1-in")])
    await finish(history, "r1", [text_msg("r1-out", REPLY)])
    await finish(history, "r1", [text_msg("r1-out", REPLY)])  # a retry: no second event
    [event] = await _pending(history)
    assert (event.owner_id, event.type) == ("alice", "run.succeeded")
    assert event.id.startswith("evt_")
    data = json.loads(event.data_json)
    assert (data["runId"], data["threadId"], data["state"]) == ("r1", "t1", "succeeded")


async def test_a_failed_run_is_a_run_failed_event(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("r1-in")])
    await finish(history, "r1", [], state=pb.RUN_STATE_FAILED)
    [event] = await _pending(history)
    assert event.type == "run.failed"


async def test_acknowledged_events_are_not_listed_again(history: History) -> None:
    for n in ("1", "2"):
        await begin(history, f"t{n}", f"r{n}", [text_msg(f"r{n}-in")])
        await finish(history, f"r{n}", [text_msg(f"r{n}-out", REPLY)])
    first, second = await _pending(history)
    acked = await history.stub.AcknowledgeWebhookEvents(
        pb.AcknowledgeWebhookEventsRequest(event_ids=[first.id, "evt_unknown"]),
        metadata=history.md(ADMIN, admin=True),
    )
    assert acked.acknowledged_count == 1
    assert [e.id for e in await _pending(history)] == [second.id]


async def test_the_outbox_needs_the_admin_scope(history: History) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await history.stub.ListWebhookEvents(pb.ListWebhookEventsRequest(), metadata=history.md())
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await history.stub.AcknowledgeWebhookEvents(
            pb.AcknowledgeWebhookEventsRequest(event_ids=["x"]), metadata=history.md()
        )
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_an_owners_events_go_with_the_owners_data(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("r1-in")])
    await finish(history, "r1", [text_msg("r1-out", REPLY)])
    await begin(history, "t2", "r2", [text_msg("r2-in")], owner="bob")
    await finish(history, "r2", [text_msg("r2-out", REPLY)], owner="bob")
    gone = await history.stub.DeleteOwnerData(pb.DeleteOwnerDataRequest(), metadata=history.md())
    assert gone.deleted_counts["webhookEvents"] == 1
    assert [e.owner_id for e in await _pending(history)] == ["bob"]
