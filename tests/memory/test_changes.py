"""Every change of a memory is on record (ListMemoryChanges), scoped to its owner: writes,
rewrites, edits (UpdateMemory) and forgets, with who did it, the run and messages behind
it, and why."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from agentmesh.memory.v1 import memory_service_pb2 as pb

from tests.memory.conftest import Client, rpc_error


async def changes(c: Client, page_size: int = 0) -> list[pb.MemoryChange]:
    out: list[pb.MemoryChange] = []
    token = ""
    while True:
        page = await c.stub.ListMemoryChanges(
            pb.ListMemoryChangesRequest(page_size=page_size, page_token=token), metadata=c._md()
        )
        out.extend(page.changes)
        token = page.next_page_token
        if not token:
            return out


async def update(c: Client, **fields: object) -> pb.Memory:
    response = await c.stub.UpdateMemory(pb.UpdateMemoryRequest(**fields), metadata=c._md())
    return response.memory


async def test_writes_and_forgets_are_recorded_with_their_sources_and_reason(
    client: Callable[[str], Client],
) -> None:
    alice = client("alice")
    written = await alice.write(
        "User likes pears", kind="preference", source_run_id="job-1", source_message_ids=["m1"]
    )
    await alice.write("user likes pears.", source_run_id="job-2", source_message_ids=["m2"])
    forgotten = await alice.stub.ForgetMemory(
        pb.ForgetMemoryRequest(
            content_query="pears",
            reason="the user asked",
            source_run_id="job-3",
            source_message_ids=["m3"],
        ),
        metadata=alice._md(),
    )
    assert [m.content for m in forgotten.memories] == ["user likes pears."]
    record = await changes(alice)
    assert [(c.action, c.actor, c.source_run_id, list(c.source_message_ids)) for c in record] == [
        ("write", "run", "job-1", ["m1"]),
        ("rewrite", "run", "job-2", ["m2"]),
        ("forget", "run", "job-3", ["m3"]),
    ]
    assert record[2].memory_id == written.memory.id
    assert (record[2].content, record[2].reason) == ("user likes pears.", "the user asked")
    assert all(c.HasField("create_time") for c in record)
    # Nobody else sees any of it.
    assert await changes(client("bob")) == []


async def test_an_edit_changes_content_and_kind_and_is_recorded(
    client: Callable[[str], Client],
) -> None:
    alice = client("alice")
    memory = (await alice.write("I live in Hangzhou", kind="place")).memory
    edited = await update(alice, id=memory.id, content="I live in Shanghai", actor="api")
    assert (edited.content, edited.kind, edited.version) == ("I live in Shanghai", "place", 2)
    assert [m.content for m in await alice.search("Shanghai")] == ["I live in Shanghai"]
    assert await alice.search("Hangzhou") == []
    kind_only = await update(alice, id=memory.id, kind="fact", expected_version=2)
    assert (kind_only.content, kind_only.kind, kind_only.version) == (
        "I live in Shanghai",
        "fact",
        3,
    )
    last = (await changes(alice))[-2:]
    assert [(c.action, c.actor, c.previous_content) for c in last] == [
        ("update", "api", "I live in Hangzhou"),
        ("update", "run", ""),
    ]


async def test_an_edit_at_another_version_is_aborted_and_changes_nothing(
    client: Callable[[str], Client],
) -> None:
    alice = client("alice")
    memory = (await alice.write("I like tea")).memory
    error = await rpc_error(
        update(alice, id=memory.id, content="I like coffee", expected_version=5)
    )
    assert error.reason == "VERSION_MISMATCH"
    assert (await alice.get(memory.id)).content == "I like tea"


async def test_an_edit_onto_another_memorys_fact_is_refused(
    client: Callable[[str], Client],
) -> None:
    alice = client("alice")
    tea = (await alice.write("I like tea")).memory
    await alice.write("I like coffee")
    error = await rpc_error(update(alice, id=tea.id, content="i like coffee."))
    assert error.code.name == "ALREADY_EXISTS"
    assert (await alice.get(tea.id)).content == "I like tea"


async def test_another_owners_memory_cannot_be_edited(client: Callable[[str], Client]) -> None:
    memory = (await client("alice").write("I like tea")).memory
    error = await rpc_error(update(client("bob"), id=memory.id, content="hacked"))
    assert error.code.name == "NOT_FOUND"
    assert (await client("alice").get(memory.id)).content == "I like tea"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"id": "m", "content": "", "kind": ""}, "content"),
        ({"id": "", "content": "x"}, "id"),
        ({"id": "m", "kind": "drink"}, "kind"),
        ({"id": "m", "content": "!!!"}, "content"),
        ({"id": "m", "content": "x", "actor": "root"}, "actor"),
    ],
)
async def test_bad_edits_name_the_field(
    client: Callable[[str], Client], fields: dict[str, object], field: str
) -> None:
    error = await rpc_error(update(client("alice"), **fields))
    assert error.code.name == "INVALID_ARGUMENT"
    assert error.violations[0][0] == field


async def test_a_forget_reason_is_bounded(client: Callable[[str], Client]) -> None:
    alice = client("alice")
    await alice.write("I like tea")
    request = pb.ForgetMemoryRequest(content_query="tea", reason="x" * 501)
    error = await rpc_error(alice.stub.ForgetMemory(request, metadata=alice._md()))
    assert error.violations[0][0] == "reason"
    assert len(await alice.list_all()) == 1


async def test_changes_page_in_order(client: Callable[[str], Client]) -> None:
    alice = client("alice")
    for i in range(5):
        await alice.write(f"fact {i}")
    assert [c.content for c in await changes(alice, page_size=2)] == [f"fact {i}" for i in range(5)]
