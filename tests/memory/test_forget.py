"""ForgetMemory by id and by content (the rule of services.memory.core.matches)."""

from __future__ import annotations

import grpc
from agentmesh.memory.v1 import memory_service_pb2 as pb

from tests.grpc_helpers import owner_md
from tests.memory.conftest import rpc_error


async def test_forget_by_id_removes_it(client) -> None:
    alice = client("alice")
    memory = (await alice.write("I love green tea")).memory
    assert await alice.forget_id(memory.id) == [memory.id]
    assert await alice.list_all() == []
    assert (await rpc_error(alice.get(memory.id))).code == grpc.StatusCode.NOT_FOUND


async def test_forget_unknown_id_is_not_found(client) -> None:
    error = await rpc_error(client("alice").forget_id("no-such-id"))
    assert error.code == grpc.StatusCode.NOT_FOUND


async def test_forget_by_english_content_removes_matching_memories_only(client) -> None:
    alice = client("alice")
    tea = (await alice.write("I love green tea")).memory
    await alice.write("I love black coffee")
    assert await alice.forget_query("green tea") == [tea.id]
    assert [m.content for m in await alice.list_all()] == ["I love black coffee"]


async def test_forget_by_chinese_content_removes_matching_memories_only(client) -> None:
    alice = client("alice")
    tea = (await alice.write("我喜欢绿茶")).memory
    await alice.write("我住在杭州")
    assert await alice.forget_query("绿茶") == [tea.id]
    assert [m.content for m in await alice.list_all()] == ["我住在杭州"]


async def test_forget_by_the_normalised_whole_fact(client) -> None:
    alice = client("alice")
    tea = (await alice.write("I love green tea.")).memory
    assert await alice.forget_query("i LOVE green tea!") == [tea.id]
    chinese = (await alice.write("我喜欢绿茶。")).memory
    assert await alice.forget_query("我喜欢绿茶") == [chinese.id]


async def test_forget_by_content_removes_every_match(client) -> None:
    alice = client("alice")
    ids = {(await alice.write(f)).memory.id for f in ("I love green tea", "Green tea at 8am")}
    await alice.write("I love tea")
    assert set(await alice.forget_query("Green TEA")) == ids
    assert [m.content for m in await alice.list_all()] == ["I love tea"]


async def test_forget_matches_whole_words_not_parts_of_words(client) -> None:
    alice = client("alice")
    await alice.write("I like steam trains")
    assert await alice.forget_query("tea") == []
    assert len(await alice.list_all()) == 1


async def test_forgetting_nothing_returns_an_empty_list(client) -> None:
    alice = client("alice")
    await alice.write("I love green tea")
    assert await alice.forget_query("coffee") == []
    assert await alice.forget_query("咖啡") == []


async def test_a_forgotten_fact_written_again_is_a_new_memory(client) -> None:
    alice = client("alice")
    first = (await alice.write("I love green tea")).memory
    await alice.forget_query("green tea")
    again = await alice.write("I love green tea")
    assert again.created and again.memory.version == 1 and again.memory.id != first.id


async def test_forget_without_a_target_is_invalid_argument(stub) -> None:
    error = await rpc_error(stub.ForgetMemory(pb.ForgetMemoryRequest(), metadata=owner_md("alice")))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.violations[0][0] == "target"


async def test_forget_with_an_empty_query_is_invalid_argument(client) -> None:
    for query in ("", "  ", "?!"):
        error = await rpc_error(client("alice").forget_query(query))
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT
        assert error.violations[0][0] == "content_query"


async def test_a_fact_without_words_is_forgotten_by_its_exact_content(client) -> None:
    alice = client("alice")
    cup = (await alice.write("🍵")).memory
    await alice.write("$")
    assert await alice.forget_query("🍵") == [cup.id]
    assert [m.content for m in await alice.list_all()] == ["$"]
