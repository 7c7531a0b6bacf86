"""GetMemory and ListMemories (newest update first, paginated)."""

from __future__ import annotations

import grpc

from tests.memory.conftest import rpc_error


async def test_get_returns_the_memory(client) -> None:
    alice = client("alice")
    written = (await alice.write("My name is Lin", kind="name")).memory
    assert await alice.get(written.id) == written


async def test_get_unknown_id_is_not_found(client) -> None:
    error = await rpc_error(client("alice").get("no-such-id"))
    assert error.code == grpc.StatusCode.NOT_FOUND


async def test_get_empty_id_is_invalid_argument(client) -> None:
    error = await rpc_error(client("alice").get(""))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.violations[0][0] == "id"


async def test_list_is_newest_update_first(client) -> None:
    alice = client("alice")
    for fact in ("fact one", "fact two", "fact three"):
        await alice.write(fact)
    await alice.write("fact one")  # updating moves it to the front
    assert [m.content for m in await alice.list_all()] == ["fact one", "fact three", "fact two"]


async def test_list_pages_cover_every_memory_once(client) -> None:
    alice = client("alice")
    for i in range(7):
        await alice.write(f"fact number {i}")
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await alice.list(page_size=3, page_token=token)
        pages += 1
        assert len(page.memories) <= 3
        seen.extend(m.content for m in page.memories)
        token = page.next_page_token
        if not token:
            break
    assert pages == 3
    assert seen == [f"fact number {i}" for i in reversed(range(7))]


async def test_list_page_size_defaults_to_50_as_every_listing(client) -> None:
    alice = client("alice")
    for i in range(51):
        await alice.write(f"fact number {i}")
    page = await alice.list()
    assert len(page.memories) == 50 and page.next_page_token
    rest = await alice.list(page_token=page.next_page_token)
    assert len(rest.memories) == 1 and not rest.next_page_token


async def test_list_and_search_page_size_is_at_most_1000(client) -> None:
    alice = client("alice")
    assert len((await alice.list(page_size=1000)).memories) == 0
    assert len(await alice.search("tea", page_size=1000)) == 0
    for bad in (1001, -1):
        for call in (alice.list(page_size=bad), alice.search("tea", page_size=bad)):
            error = await rpc_error(call)
            assert error.code == grpc.StatusCode.INVALID_ARGUMENT
            assert error.violations[0][0] == "page_size"


async def test_list_rejects_a_garbled_page_token(client) -> None:
    error = await rpc_error(client("alice").list(page_token="not-a-token"))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.violations[0][0] == "page_token"
