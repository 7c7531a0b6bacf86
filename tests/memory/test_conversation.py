"""Conversation recall in the memory service: IndexConversation, SearchConversation,
DeleteConversation, and the index's share of DeleteOwnerData and of the retention sweep."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
from agentmesh.memory.v1 import memory_service_pb2 as pb
from agentmesh.memory.v1 import memory_service_pb2_grpc as pb_grpc
from google.protobuf import timestamp_pb2

from services.memory import conversation_tasks
from services.memory.service import MIGRATIONS
from shared.settings import Settings
from tests.conftest import migrated_engine
from tests.grpc_helpers import owner_md
from tests.memory.conftest import rpc_error

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def said(
    message_id: str, text: str, thread_id: str = "t1", role: str = "user", when: datetime = NOW
) -> pb.ConversationMessage:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(when)
    return pb.ConversationMessage(
        message_id=message_id, thread_id=thread_id, role=role, text=text, create_time=ts
    )


async def index(
    stub: pb_grpc.MemoryServiceStub, owner: str, *messages: pb.ConversationMessage
) -> int:
    reply = await stub.IndexConversation(
        pb.IndexConversationRequest(messages=list(messages)), metadata=owner_md(owner)
    )
    return reply.indexed_count


async def search(
    stub: pb_grpc.MemoryServiceStub, owner: str, query: str, **fields: Any
) -> list[pb.ConversationHit]:
    reply = await stub.SearchConversation(
        pb.SearchConversationRequest(query=query, **fields), metadata=owner_md(owner)
    )
    return list(reply.hits)


def ids(hits: list[pb.ConversationHit]) -> list[str]:
    return [h.message.message_id for h in hits]


async def test_a_message_said_once_is_found_by_its_words_with_its_thread(stub) -> None:
    await index(
        stub,
        "alice",
        said("m1", "By the way, my sister Laura lives in Lisbon", thread_id="old"),
        said("m2", "What a nice weather today", thread_id="old"),
        said("m3", "Sure, Lisbon is lovely in spring", thread_id="old", role="assistant"),
    )
    hits = await search(stub, "alice", "Where does Laura live?")
    assert ids(hits)[0] == "m1"
    first = hits[0]
    assert first.message.thread_id == "old"
    assert first.message.role == "user"
    assert first.message.text == "By the way, my sister Laura lives in Lisbon"
    assert first.message.create_time.ToDatetime(tzinfo=UTC) == NOW
    assert 0 < first.score <= 1


async def test_chinese_messages_are_found_by_their_words(stub) -> None:
    await index(stub, "alice", said("m1", "我上周去杭州出差了"), said("m2", "今天天气不错"))
    assert ids(await search(stub, "alice", "杭州")) == ["m1"]


async def test_another_owners_messages_are_never_found(stub) -> None:
    await index(stub, "alice", said("m1", "my locker code is 4711"))
    assert await search(stub, "bob", "locker code") == []
    # The same message id in another owner's index is another message.
    assert await index(stub, "bob", said("m1", "my bike is red")) == 1
    assert ids(await search(stub, "alice", "locker code")) == ["m1"]
    assert await search(stub, "alice", "bike") == []


async def test_excluded_messages_are_left_out(stub) -> None:
    await index(stub, "alice", said("m1", "the green tea shop"), said("m2", "green tea again"))
    found = await search(stub, "alice", "green tea", exclude_message_ids=["m2"])
    assert ids(found) == ["m1"]


async def test_indexing_a_message_again_keeps_one_row(stub) -> None:
    assert await index(stub, "alice", said("m1", "I parked on level 3")) == 1
    assert await index(stub, "alice", said("m1", "I parked on level 3")) == 0
    assert ids(await search(stub, "alice", "parked level")) == ["m1"]


async def test_a_deleted_thread_is_never_found_again(stub) -> None:
    await index(
        stub,
        "alice",
        said("m1", "the wifi password is swordfish", thread_id="gone"),
        said("m2", "the wifi router is in the hall", thread_id="kept"),
    )
    reply = await stub.DeleteConversation(
        pb.DeleteConversationRequest(thread_id="gone"), metadata=owner_md("alice")
    )
    assert reply.deleted_count == 1
    assert ids(await search(stub, "alice", "wifi")) == ["m2"]
    # Another owner's deletion of a thread of that name deletes nothing of alice's.
    await stub.DeleteConversation(
        pb.DeleteConversationRequest(thread_id="kept"), metadata=owner_md("bob")
    )
    assert ids(await search(stub, "alice", "wifi")) == ["m2"]


async def test_a_message_of_a_deleted_thread_that_arrives_late_is_not_indexed(stub) -> None:
    await stub.DeleteConversation(
        pb.DeleteConversationRequest(thread_id="gone"), metadata=owner_md("alice")
    )
    # Written before the deletion (a run that ended just before it): never indexed.
    before = NOW - timedelta(days=1)
    late = said("m1", "the wifi password is swordfish", thread_id="gone", when=before)
    assert await index(stub, "alice", late) == 0
    # A thread of the same id written afterwards is another conversation.
    after = datetime.now(UTC) + timedelta(seconds=1)
    fresh = said("m2", "the new wifi password is marlin", thread_id="gone", when=after)
    assert await index(stub, "alice", fresh) == 1
    assert ids(await search(stub, "alice", "wifi password")) == ["m2"]


async def test_all_threads_of_the_caller_and_none_of_another_owners_can_go(stub) -> None:
    await index(stub, "alice", said("m1", "wifi one", thread_id="a"), said("m2", "wifi two"))
    await index(stub, "bob", said("m1", "wifi three"))
    reply = await stub.DeleteConversation(
        pb.DeleteConversationRequest(all_threads=True), metadata=owner_md("alice")
    )
    assert reply.deleted_count == 2
    assert await search(stub, "alice", "wifi") == []
    assert ids(await search(stub, "bob", "wifi")) == ["m1"]
    err = await rpc_error(
        stub.DeleteConversation(
            pb.DeleteConversationRequest(thread_id="a", all_threads=True),
            metadata=owner_md("alice"),
        )
    )
    assert (err.code, err.violations[0][0]) == (grpc.StatusCode.INVALID_ARGUMENT, "thread_id")
    err = await rpc_error(
        stub.DeleteConversation(pb.DeleteConversationRequest(), metadata=owner_md("alice"))
    )
    assert (err.code, err.violations[0][0]) == (grpc.StatusCode.INVALID_ARGUMENT, "thread_id")


async def test_deleting_the_owner_deletes_their_conversation_index(stub) -> None:
    await index(stub, "alice", said("m1", "my passport number is X123"))
    await index(stub, "bob", said("m1", "my passport expired"))
    reply = await stub.DeleteOwnerData(pb.DeleteOwnerDataRequest(), metadata=owner_md("alice"))
    assert reply.deleted_counts["conversationMessages"] == 1
    assert await search(stub, "alice", "passport") == []
    assert ids(await search(stub, "bob", "passport")) == ["m1"]


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (said("m1", "hi", role="system"), "messages[1].role"),
        (said("m1", "   "), "messages[1].text"),
        (said("m1", "x" * 20_001), "messages[1].text"),
        (said("m1", "bad\x00text"), "messages[1].text"),
        (said("", "hi"), "messages[1].message_id"),
        (said("m1", "hi", thread_id="a b"), "messages[1].thread_id"),
        (
            pb.ConversationMessage(message_id="m1", thread_id="t", role="user", text="hi"),
            "messages[1].create_time",
        ),
    ],
)
async def test_a_bad_message_is_refused_naming_its_field_and_nothing_is_stored(
    stub, message: pb.ConversationMessage, field: str
) -> None:
    err = await rpc_error(index(stub, "alice", said("m0", "a fine first message"), message))
    assert err.code is grpc.StatusCode.INVALID_ARGUMENT
    assert err.violations[0][0] == field
    assert await search(stub, "alice", "fine first message") == []


async def test_too_many_messages_or_exclusions_are_refused(stub) -> None:
    many = [said(f"m{i}", "hello") for i in range(101)]
    err = await rpc_error(index(stub, "alice", *many))
    assert (err.code, err.violations[0][0]) == (grpc.StatusCode.INVALID_ARGUMENT, "messages")
    err = await rpc_error(
        search(stub, "alice", "hello", exclude_message_ids=[f"m{i}" for i in range(1001)])
    )
    assert (err.code, err.violations[0][0]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "exclude_message_ids",
    )
    err = await rpc_error(search(stub, "alice", "  "))
    assert (err.code, err.violations[0][0]) == (grpc.StatusCode.INVALID_ARGUMENT, "query")


async def test_retention_forgets_threads_whose_newest_message_is_older(
    stub, settings: Settings
) -> None:
    old = NOW - timedelta(days=40)
    await index(
        stub,
        "alice",
        said("m1", "the old spare key is under the mat", thread_id="stale", when=old),
        said("m2", "the new spare key is with Tom", thread_id="live", when=old),
        said("m3", "ok", thread_id="live", when=NOW),
    )
    async with migrated_engine(settings, "memory", MIGRATIONS) as engine:
        gone = await conversation_tasks.expire_once(engine, 30, now=NOW + timedelta(days=1))
    assert gone == 1
    assert ids(await search(stub, "alice", "spare key")) == ["m2"]


async def test_retention_runs_one_sweep_ahead_of_history(stub, settings: Settings) -> None:
    # 30 days less an hour old: history keeps it for another hour, so its next sweep (an
    # hour away) may delete it; this sweep does so already.
    when = NOW - timedelta(days=30) + timedelta(minutes=30)
    await index(stub, "alice", said("m1", "the spare key is under the mat", when=when))
    async with migrated_engine(settings, "memory", MIGRATIONS) as engine:
        assert await conversation_tasks.expire_once(engine, 30, now=NOW) == 0
        assert await conversation_tasks.expire_once(engine, 30, now=NOW, early_seconds=3600) == 1
