"""The owner's commit sequence: every message an owner stores gets the next number of their
counter, in the order the transactions commit, and LoadContext says up to which number
everything has committed (the memory job's watermark counts in it, so a message that
commits late is never skipped)."""

from __future__ import annotations

import asyncio

import pytest
from agentmesh.history.v1 import history_service_pb2 as pb

from services.history import store
from shared import db
from shared.settings import Settings
from tests.conftest import USES_POSTGRES
from tests.history.conftest import CHAT, History, text_msg


async def append(h: History, thread_id: str, *ids: str, owner: str = "alice") -> list[int]:
    resp = await h.stub.AppendMessages(
        pb.AppendMessagesRequest(
            thread_id=thread_id, messages=[text_msg(i) for i in ids], runtime_mode=CHAT
        ),
        metadata=h.md(owner),
    )
    return [m.owner_sequence for m in resp.messages]


async def owner_window(h: History, owner: str = "alice") -> pb.LoadContextResponse:
    return await h.stub.LoadContext(
        pb.LoadContextRequest(across_threads=True, page_size=1000), metadata=h.md(owner)
    )


async def test_an_owners_messages_are_numbered_across_threads_in_commit_order(
    history: History,
) -> None:
    assert await append(history, "t1", "a1", "a2") == [1, 2]
    assert await append(history, "t2", "b1") == [3]
    # Another owner counts on their own.
    assert await append(history, "t9", "z1", owner="bob") == [1]
    window = await owner_window(history)
    assert window.sequence_horizon == 3
    assert sorted(m.owner_sequence for m in window.messages) == [1, 2, 3]
    assert (await owner_window(history, "bob")).sequence_horizon == 1
    assert (await owner_window(history, "nobody")).sequence_horizon == 0


async def test_a_message_sent_again_keeps_its_number(history: History) -> None:
    assert await append(history, "t1", "a1") == [1]
    assert await append(history, "t1", "a1", "a2") == [1, 2]


@pytest.mark.skipif(not USES_POSTGRES, reason="SQLite has one writer: commits are in order")
async def test_a_later_transaction_waits_so_numbers_follow_commits(
    history: History, settings: Settings
) -> None:
    await append(history, "t1", "a1")  # the schema exists, and alice's counter
    engine = db.create_engine(settings, "history", pool_size=3)
    try:
        async with engine.connect() as first, engine.connect() as second:
            await first.begin()
            taken = await store.next_sequences(first, "alice", 1)
            await second.begin()
            later = asyncio.create_task(store.next_sequences(second, "alice", 1))
            await asyncio.sleep(0.3)
            # The second waits for the first: it cannot take a number and commit before it.
            assert not later.done()
            async with engine.connect() as reader:
                assert await store.sequence_horizon(reader, "alice") == taken - 1
            await first.commit()
            assert await later == taken + 1
            await second.commit()
            async with engine.connect() as reader:
                assert await store.sequence_horizon(reader, "alice") == taken + 1
    finally:
        await engine.dispose()
