"""The caller's memories through the gateway (memory peer double)."""

from __future__ import annotations

import httpx
import pytest

from shared.settings import Settings
from tests.gateway.conftest import Peers, bearer


@pytest.fixture(scope="module")
def seeded(peers: Peers) -> Peers:
    peers.memory.seed("lin", "mem-1", "loves green tea")
    peers.memory.seed("lin", "mem-2", "name is Lin")
    peers.memory.seed("kai", "mem-k", "likes coffee")
    return peers


async def test_list_returns_only_the_callers_memories(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    resp = await http.get("/api/v1/memories", headers=bearer(gw_settings, "lin"))
    assert resp.status_code == 200
    memories = resp.json()["memories"]
    assert {m["id"] for m in memories} == {"mem-1", "mem-2"}
    assert set(memories[0]) == {
        "id",
        "content",
        "kind",
        "version",
        "sourceRunId",
        "sourceMessageIds",
        "createTime",
        "updateTime",
    }


async def test_query_searches_memories(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    resp = await http.get(
        "/api/v1/memories?query=tea&page_size=5", headers=bearer(gw_settings, "lin")
    )
    assert [m["id"] for m in resp.json()["memories"]] == ["mem-1"]
    req = seeded.memory.calls[-1].request
    assert (req.query, req.page_size) == ("tea", 5)


async def test_a_search_says_how_it_ran_and_a_listing_does_not(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    found = await http.get("/api/v1/memories?q=tea", headers=bearer(gw_settings, "lin"))
    assert found.status_code == 200, found.text
    body = found.json()
    assert (body["mode"], body["modeReason"]) == ("lexical", "no_embedding_model")
    listed = (await http.get("/api/v1/memories", headers=bearer(gw_settings, "lin"))).json()
    assert "mode" not in listed and "modeReason" not in listed


async def test_search_with_a_page_token_is_400(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    resp = await http.get(
        "/api/v1/memories?query=tea&page_token=x", headers=bearer(gw_settings, "lin")
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["details"][0]["field"] == "page_token"


async def test_delete_forgets_the_memory(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    seeded.memory.seed("lin", "mem-del", "temporary")
    resp = await http.delete("/api/v1/memories/mem-del", headers=bearer(gw_settings, "lin"))
    assert resp.status_code == 204 and resp.content == b""
    again = await http.delete("/api/v1/memories/mem-del", headers=bearer(gw_settings, "lin"))
    assert again.status_code == 404


async def test_deleting_another_owners_memory_is_404_and_keeps_it(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    seeded: Peers,
) -> None:
    resp = await http.delete("/api/v1/memories/mem-k", headers=bearer(gw_settings, "lin"))
    assert resp.status_code == 404
    assert "mem-k" in seeded.memory.memories["kai"]
