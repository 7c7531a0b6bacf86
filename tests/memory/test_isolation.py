"""Owner isolation: owner B can neither read nor change owner A's memories by any request."""

from __future__ import annotations

import grpc
import pytest

from tests.memory.conftest import Client, rpc_error


@pytest.fixture
async def alices_tea(client) -> str:
    return (await client("alice").write("I love green tea", kind="preference")).memory.id


async def _alice_unchanged(alice: Client, memory_id: str) -> None:
    memory = await alice.get(memory_id)
    assert (memory.content, memory.version) == ("I love green tea", 1)


async def test_other_owner_gets_not_found_like_a_missing_id(client, alices_tea) -> None:
    foreign = await rpc_error(client("bob").get(alices_tea))
    missing = await rpc_error(client("bob").get("no-such-id"))
    assert foreign.code == missing.code == grpc.StatusCode.NOT_FOUND
    assert foreign.message == missing.message


async def test_other_owner_lists_none_of_them(client, alices_tea) -> None:
    assert await client("bob").list_all() == []


async def test_other_owner_searches_none_of_them(client, alices_tea) -> None:
    await client("alice").write("我喜欢绿茶")
    bob = client("bob")
    assert await bob.search("green tea") == []
    assert await bob.search("绿茶") == []


async def test_other_owner_cannot_forget_by_id(client, alices_tea) -> None:
    error = await rpc_error(client("bob").forget_id(alices_tea))
    assert error.code == grpc.StatusCode.NOT_FOUND
    await _alice_unchanged(client("alice"), alices_tea)


async def test_other_owner_cannot_forget_by_content(client, alices_tea) -> None:
    assert await client("bob").forget_query("I love green tea") == []
    await _alice_unchanged(client("alice"), alices_tea)


async def test_other_owner_writing_the_same_fact_gets_their_own_memory(client, alices_tea) -> None:
    bobs = await client("bob").write("I love green tea", kind="dislike")
    assert bobs.created and bobs.memory.id != alices_tea
    await _alice_unchanged(client("alice"), alices_tea)
    assert (await client("alice").get(alices_tea)).kind == "preference"


async def test_other_owner_cannot_use_a_page_token_of_another(client) -> None:
    alice = client("alice")
    for i in range(3):
        await alice.write(f"fact number {i}")
    token = (await alice.list(page_size=1)).next_page_token
    error = await rpc_error(client("bob").list(page_size=1, page_token=token))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.violations[0][0] == "page_token"


async def test_watermarks_are_per_owner(client) -> None:
    alice, bob = client("alice"), client("bob")
    await alice.advance("", "alice-1")
    assert (await bob.watermark()).position == ""
    error = await rpc_error(bob.advance("alice-1", "bob-1"))
    assert error.code == grpc.StatusCode.ABORTED
    assert (await alice.watermark()).position == "alice-1"
