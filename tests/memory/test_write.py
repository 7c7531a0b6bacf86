"""WriteMemory: idempotent upsert of one fact per owner and content key."""

from __future__ import annotations

import asyncio

import grpc
from agentmesh.memory.v1 import memory_service_pb2 as pb

from tests.memory.conftest import rpc_error


async def test_writing_the_same_fact_twice_is_one_memory_at_version_2(client) -> None:
    alice = client("alice")
    first = await alice.write("I love green tea.", kind="preference")
    second = await alice.write("I love green tea.", kind="preference")
    assert first.created and not second.created
    assert second.memory.id == first.memory.id
    assert second.memory.version == 2
    assert [m.id for m in await alice.list_all()] == [first.memory.id]


async def test_normalised_variants_are_one_fact(client) -> None:
    alice = client("alice")
    first = await alice.write("I love green tea.")
    second = await alice.write("i love  GREEN tea")
    assert not second.created and second.memory.id == first.memory.id
    # The latest wording is kept.
    assert second.memory.content == "i love  GREEN tea"
    assert len(await alice.list_all()) == 1


async def test_repeated_writes_never_toggle_the_memory_away(client) -> None:
    alice = client("alice")
    for expected_version in range(1, 6):
        response = await alice.write("My name is Lin")
        assert response.memory.version == expected_version
        assert [m.content for m in await alice.list_all()] == ["My name is Lin"]


async def test_rewrite_merges_sources_and_keeps_what_it_does_not_name(client) -> None:
    alice = client("alice")
    first = await alice.write(
        "I live in Hangzhou", kind="place", source_run_id="run-1", source_message_ids=["m1", "m2"]
    )
    second = await alice.write("I live in Hangzhou", source_message_ids=["m2", "m3"])
    assert second.memory.kind == "place"
    assert second.memory.source_run_id == "run-1"
    assert list(second.memory.source_message_ids) == ["m1", "m2", "m3"]
    assert second.memory.create_time == first.memory.create_time
    assert second.memory.update_time.ToDatetime() > first.memory.update_time.ToDatetime()
    stored = await alice.get(first.memory.id)
    assert list(stored.source_message_ids) == ["m1", "m2", "m3"]
    assert stored.version == 2


async def test_rewrite_with_a_kind_and_run_updates_them(client) -> None:
    alice = client("alice")
    await alice.write("I hate coffee", source_run_id="run-1")
    second = await alice.write("I hate coffee", kind="dislike", source_run_id="run-2")
    assert (second.memory.kind, second.memory.source_run_id) == ("dislike", "run-2")


async def test_kind_defaults_to_fact(client) -> None:
    response = await client("alice").write("The sky is blue")
    assert response.memory.kind == "fact"


async def test_concurrent_writes_of_one_fact_make_one_row(client) -> None:
    alice = client("alice")
    responses = await asyncio.gather(
        *(alice.write("I love green tea", source_message_ids=[f"m{i}"]) for i in range(20))
    )
    assert sum(r.created for r in responses) == 1
    assert len({r.memory.id for r in responses}) == 1
    (memory,) = await alice.list_all()
    assert memory.version == 20
    assert sorted(memory.source_message_ids) == sorted(f"m{i}" for i in range(20))


async def test_empty_content_is_invalid_argument_naming_content(client) -> None:
    error = await rpc_error(client("alice").write("   "))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.violations[0][0] == "content"


async def test_content_over_2000_characters_is_invalid_argument(client) -> None:
    error = await rpc_error(client("alice").write("x" * 2001))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.violations[0][0] == "content"


async def test_content_of_2000_chinese_characters_is_stored(client) -> None:
    response = await client("alice").write("茶" * 2000)
    assert response.created and len(response.memory.content) == 2000


async def test_unknown_kind_is_invalid_argument_naming_kind(client) -> None:
    error = await rpc_error(client("alice").write("I love tea", kind="hobby"))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.violations[0][0] == "kind"


async def test_call_without_owner_is_unauthenticated(stub) -> None:
    error = await rpc_error(stub.WriteMemory(pb.WriteMemoryRequest(content="I love tea")))
    assert error.code == grpc.StatusCode.UNAUTHENTICATED
