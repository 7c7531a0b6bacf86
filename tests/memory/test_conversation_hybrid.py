"""SearchConversation with an embedding model (the real local model, as test_hybrid_search):
the background embedder gives indexed messages their vectors, and a paraphrase that shares
no word with a message finds it; the vector half keeps to the owner and the exclusions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from agentmesh.memory.v1 import memory_service_pb2_grpc as pb_grpc

from services.memory import conversation_store
from services.memory.service import MIGRATIONS, build
from shared.settings import Settings
from tests.conftest import migrated_engine
from tests.grpc_helpers import channel, running_service
from tests.memory.test_conversation import ids, index, said, search
from tests.memory.test_hybrid_search import embedding_server, hybrid_settings  # noqa: F401

pytestmark = pytest.mark.usefixtures("embedding_server")


@pytest.fixture
async def stub(hybrid_settings: Settings) -> AsyncIterator[pb_grpc.MemoryServiceStub]:  # noqa: F811
    async with (
        running_service("memory", build, hybrid_settings) as address,
        channel(address) as ch,
    ):
        yield pb_grpc.MemoryServiceStub(ch)


async def _embedded(settings: Settings, timeout: float = 60.0) -> None:
    """Waits until the conversation embedder has embedded every indexed message."""
    async with migrated_engine(settings, "memory", MIGRATIONS) as engine:
        deadline = time.monotonic() + timeout
        while True:
            async with engine.connect() as conn:
                pending = await conversation_store.unembedded(
                    conn, settings.embedding_model, settings.embedding_dimensions, 1
                )
            if not pending:
                return
            assert time.monotonic() < deadline, "the embedder did not catch up"
            await asyncio.sleep(0.1)


async def test_a_paraphrase_finds_the_message_by_meaning(
    stub,
    hybrid_settings: Settings,  # noqa: F811
) -> None:
    await index(
        stub,
        "alice",
        said("m1", "We adopted a puppy called Max last weekend"),
        said("m2", "I work night shifts at the hospital"),
        said("m3", "我住在上海的浦东"),
    )
    await index(stub, "bob", said("b1", "My kitten sleeps all day"))
    await _embedded(hybrid_settings)
    assert ids(await search(stub, "alice", "Do I have any pets?"))[0] == "m1"
    assert ids(await search(stub, "alice", "我在哪个城市生活？"))[0] == "m3"
    # Nearest in meaning, but another owner's; and an excluded message is never answered.
    assert "b1" not in ids(await search(stub, "alice", "cat"))
    found = await search(stub, "alice", "Do I have any pets?", exclude_message_ids=["m1"])
    assert "m1" not in ids(found)
