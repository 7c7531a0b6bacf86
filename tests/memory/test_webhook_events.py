"""Memory's webhook outbox (shared/outbox.py): every change record has its memory.changed
event, written with it, without the memory's content; the events go with the owner's data."""

from __future__ import annotations

import json
from collections.abc import Callable

from agentmesh.memory.v1 import memory_service_pb2 as pb
from agentmesh.memory.v1 import memory_service_pb2_grpc as pb_grpc

from tests.grpc_helpers import owner_md
from tests.memory.conftest import Client

ADMIN = owner_md("webhook-deliverer", admin=True)


async def _events(stub: pb_grpc.MemoryServiceStub) -> list[tuple[str, dict[str, object]]]:
    reply = await stub.ListWebhookEvents(pb.ListWebhookEventsRequest(), metadata=ADMIN)
    return [(e.owner_id, json.loads(e.data_json)) for e in reply.events]


async def test_write_update_and_forget_are_memory_changed_events(
    stub: pb_grpc.MemoryServiceStub, client: Callable[[str], Client]
) -> None:
    alice = client("alice")
    written = await alice.write("User likes pears", kind="preference", source_run_id="job-1")
    await alice.stub.UpdateMemory(
        pb.UpdateMemoryRequest(id=written.memory.id, content="User likes green pears"),
        metadata=alice._md(),
    )
    await alice.forget_id(written.memory.id)
    events = await _events(stub)
    assert [(o, d["action"], d["memoryId"]) for o, d in events] == [
        ("alice", a, written.memory.id) for a in ("write", "update", "forget")
    ]
    assert events[0][1]["sourceRunId"] == "job-1" and events[0][1]["kind"] == "preference"
    assert all("pears" not in json.dumps(d) for _, d in events)  # never the content


async def test_an_owners_events_go_with_the_owners_data(
    stub: pb_grpc.MemoryServiceStub, client: Callable[[str], Client]
) -> None:
    await client("alice").write("User likes pears")
    await client("bob").write("User likes figs")
    gone = await stub.DeleteOwnerData(pb.DeleteOwnerDataRequest(), metadata=owner_md("alice"))
    assert gone.deleted_counts["webhookEvents"] == 1
    assert [o for o, _ in await _events(stub)] == ["bob"]
