"""Conversation recall in the executor: a profile whose memory policy has `conversation`
also recalls the owner's past chat messages (never those already in the step's context),
ranked with the memories under one top_k and budget; the conversation_search tool."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from agentmesh.memory.v1 import memory_service_pb2 as pb

from services.executor import recall
from services.executor.memory_tools import ConversationSearch
from services.executor.tools import ToolContext
from shared.domain import MessageKind
from shared.errors import Unavailable
from shared.messages import Msg, assistant, user
from shared.profiles import MemoryPolicy
from tests.executor.models import TurnsModel, text
from tests.executor.test_recall import TEA, Answer, Found, run, step, systems, worker

SAID = datetime(2026, 3, 9, 8, 30, tzinfo=UTC)


def hit(message_id: str, said: str, score: float, thread_id: str = "old") -> pb.ConversationHit:
    message = pb.ConversationMessage(
        message_id=message_id, thread_id=thread_id, role="user", text=said
    )
    message.create_time.FromDatetime(SAID)
    return pb.ConversationHit(message=message, score=score)


class Service:
    """A memory service's two searches: results per query; records what was asked."""

    def __init__(
        self,
        memories: dict[str, list[Found]],
        messages: dict[str, list[pb.ConversationHit]],
        *,
        fail: Exception | None = None,
    ) -> None:
        self.memories = memories
        self.messages = messages
        self.fail = fail
        self.asked: list[tuple[str, str, int, tuple[str, ...]]] = []

    async def search_response(self, owner: str, query: str, page_size: int = 10) -> Answer:
        return Answer(self.memories.get(query, []), pb.SEARCH_MODE_HYBRID, "")

    async def search_conversation(
        self, owner: str, query: str, page_size: int = 10, exclude: Sequence[str] = ()
    ) -> list[pb.ConversationHit]:
        self.asked.append((owner, query, page_size, tuple(exclude)))
        if self.fail is not None:
            raise self.fail
        return self.messages.get(query, [])


CONVERSING = MemoryPolicy(mode="recall", conversation=True)
LOCKER = hit("m-old", "my locker code at the gym is 4711", 0.95)


async def test_a_message_said_in_another_thread_joins_the_memories_in_the_block() -> None:
    service = Service({"green tea?": [TEA]}, {"green tea?": [LOCKER]})
    model = TurnsModel([text("ok")])
    items = await run(worker(model, service), step(memory=CONVERSING))
    [sent] = [messages for messages, _ in model.seen]
    assert systems(sent) == [
        f"{recall.HEADER}\n- User likes green tea\n"
        f"{recall.CONVERSATION_HEADER}\n"
        "- (2026-03-09, the user said) my locker code at the gym is 4711"
    ]
    [record] = [i for i in items if isinstance(i, Msg) and i.kind is MessageKind.MEMORY_RECALL]
    assert record.metadata["memory_recall"] == [
        {"id": "m-old", "score": 0.95, "source": "conversation", "threadId": "old"},
        {"id": "mem-1", "score": 0.9},
    ]


async def test_the_messages_in_the_steps_context_are_left_out() -> None:
    service = Service({}, {})
    request = step(memory=CONVERSING)
    earlier = (user("hello", id="c1"), assistant("hi", id="c2"))
    request = type(request)(**{**request.__dict__, "context": earlier})
    await run(worker(TurnsModel([text("ok")]), service), request)
    assert service.asked == [("alice", "green tea?", 5, ("c1", "c2", "m-in"))]


async def test_without_conversation_in_the_policy_no_message_is_searched() -> None:
    service = Service({"green tea?": [TEA]}, {"green tea?": [LOCKER]})
    model = TurnsModel([text("ok")])
    await run(worker(model, service), step(memory=MemoryPolicy(mode="recall")))
    assert service.asked == []
    assert recall.CONVERSATION_HEADER not in systems(model.seen[0][0])[0]


async def test_memories_and_messages_share_top_k_by_score() -> None:
    weak = hit("m-weak", "tea is fine I guess", 0.1)
    service = Service({"green tea?": [TEA]}, {"green tea?": [LOCKER, weak]})
    policy = MemoryPolicy(mode="recall", conversation=True, top_k=2)
    found = await recall.recall(service, "alice", policy, ["green tea?"], 1000)
    assert [r.id for r in found.memories] == ["m-old", "mem-1"]


async def test_a_long_message_is_shown_by_its_beginning() -> None:
    long = hit("m-long", "word " * 400, 0.9)
    service = Service({}, {"green tea?": [long]})
    [found] = (await recall.recall(service, "alice", CONVERSING, ["green tea?"], 100_000)).memories
    line = recall.block_text([found]).splitlines()[1]
    assert len(line) < recall.MAX_EXCERPT_CHARS + 40 and line.endswith("…")


async def test_a_failed_conversation_search_leaves_the_memories() -> None:
    service = Service({"green tea?": [TEA]}, {}, fail=Unavailable("memory is down"))
    found = await recall.recall(service, "alice", CONVERSING, ["green tea?"], 1000)
    assert [r.id for r in found.memories] == ["mem-1"]


class Client:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    async def search_conversation(
        self, owner: str, query: str, page_size: int = 10, exclude: Sequence[str] = ()
    ) -> list[pb.ConversationHit]:
        self.asked.append((owner, query))
        return [LOCKER]


async def test_the_conversation_search_tool_searches_the_runs_owner() -> None:
    client = Client()
    # A recording double of the memory client.
    tool = ConversationSearch(client)  # type: ignore[arg-type]
    result = await tool.execute({"query": "locker"}, ToolContext("alice", "r1", "t1", "UTC"))
    assert client.asked == [("alice", "locker")]
    assert json.loads(result) == [
        {
            "threadId": "old",
            "role": "user",
            "date": "2026-03-09",
            "text": "my locker code at the gym is 4711",
        }
    ]
