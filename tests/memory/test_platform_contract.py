"""agentmesh.platform.v1 on a real memory service (shared/owner_data.py): the export pages
over every registered table, scoped to the caller; deletion takes them all; a bad page
token is INVALID_ARGUMENT naming page_token; the outbox needs the admin scope."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import grpc
import pytest
from agentmesh.memory.v1 import memory_service_pb2 as memory_pb
from agentmesh.memory.v1 import memory_service_pb2_grpc as memory_grpc
from agentmesh.platform.v1 import platform_service_pb2 as pb
from agentmesh.platform.v1 import platform_service_pb2_grpc as pb_grpc

from services.memory.service import build
from shared.settings import Settings
from tests.grpc_helpers import channel, owner_md, running_service
from tests.memory.conftest import Client, rpc_error

# The async stub exists in the type stubs only.
Fixture = tuple["pb_grpc.PlatformServiceAsyncStub", Client, Client]


@pytest.fixture
async def platform(settings: Settings) -> AsyncIterator[Fixture]:
    """The memory service's platform contract, and memory clients of alice and bob."""
    async with running_service("memory", build, settings) as address, channel(address) as ch:
        memory = memory_grpc.MemoryServiceStub(ch)
        yield pb_grpc.PlatformServiceStub(ch), Client(memory, "alice"), Client(memory, "bob")


async def _export(
    stub: pb_grpc.PlatformServiceAsyncStub, owner: str, page_size: int
) -> list[tuple[str, dict[str, object]]]:
    out: list[tuple[str, dict[str, object]]] = []
    token = ""
    while True:
        page = await stub.ExportOwnerData(
            pb.ExportOwnerDataRequest(page_size=page_size, page_token=token),
            metadata=owner_md(owner),
        )
        out += [(r.table, json.loads(r.row_json)) for r in page.records]
        token = page.next_page_token
        if not token:
            return out


async def test_the_export_pages_over_every_table_of_the_caller_only(platform: Fixture) -> None:
    stub, alice, bob = platform
    first = await alice.write("Alice likes green tea")
    await alice.stub.UpdateMemory(
        memory_pb.UpdateMemoryRequest(id=first.memory.id, content="Alice likes black tea"),
        metadata=owner_md("alice"),
    )
    await bob.write("Bob likes coffee")
    whole = await _export(stub, "alice", 1000)
    assert await _export(stub, "alice", 1) == whole
    tables = {t for t, _ in whole}
    assert {"memories", "memory_changes", "webhook_outbox"} <= tables
    text = str(whole)
    assert "green tea" in text and "black tea" in text  # the replaced content is there too
    assert "Bob" not in text and all(row["owner_id"] == "alice" for _, row in whole)


async def test_a_deletion_takes_every_table_of_the_caller(platform: Fixture) -> None:
    stub, alice, bob = platform
    await alice.write("Alice likes green tea")
    await bob.write("Bob likes coffee")
    gone = await stub.DeleteOwnerData(pb.DeleteOwnerDataRequest(), metadata=owner_md("alice"))
    assert gone.deleted_counts["memories"] == 1 and gone.deleted_counts["memoryChanges"] == 1
    assert await _export(stub, "alice", 1000) == []
    assert [m.content for m in await bob.list_all()] == ["Bob likes coffee"]


async def test_a_bad_page_token_is_invalid_argument_naming_it(platform: Fixture) -> None:
    stub, alice, _ = platform
    for fact in ("tea", "coffee", "water"):
        await alice.write(f"Alice likes {fact}")
    page = await stub.ExportOwnerData(
        pb.ExportOwnerDataRequest(page_size=1), metadata=owner_md("alice")
    )
    for token, who in ((page.next_page_token + "x", "alice"), (page.next_page_token, "bob")):
        err = await rpc_error(
            stub.ExportOwnerData(
                pb.ExportOwnerDataRequest(page_token=token), metadata=owner_md(who)
            )
        )
        assert err.code == grpc.StatusCode.INVALID_ARGUMENT and "page_token" in str(err)


async def test_the_outbox_needs_the_admin_scope(platform: Fixture) -> None:
    stub, alice, _ = platform
    await alice.write("Alice likes green tea")
    err = await rpc_error(
        stub.ListWebhookEvents(pb.ListWebhookEventsRequest(), metadata=owner_md("alice"))
    )
    assert err.code == grpc.StatusCode.PERMISSION_DENIED
    listed = await stub.ListWebhookEvents(
        pb.ListWebhookEventsRequest(), metadata=owner_md("deliverer", admin=True)
    )
    assert [e.type for e in listed.events] == ["memory.changed"]
    acked = await stub.AcknowledgeWebhookEvents(
        pb.AcknowledgeWebhookEventsRequest(event_ids=[listed.events[0].id]),
        metadata=owner_md("deliverer", admin=True),
    )
    assert acked.acknowledged_count == 1
