"""Recall: a profile's memory policy puts the owner's most relevant memories into the step's
context as one block, within the budget, and yields its audit record; the memory agent sees
the memories its new messages recall; a memory cites the messages that state it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentmesh.memory.v1 import memory_service_pb2 as pb

from services.executor import context, core, recall
from services.executor.agents.base import StepRequest
from services.executor.agents.memory import MemoryAgent
from services.executor.agents.worker import WorkerAgent
from services.executor.memory_tools import memory_tools
from services.executor.recall import Recalled
from services.executor.tools import ToolContext, ToolRegistry
from shared.domain import ExecutorKind, MessageKind
from shared.errors import InvalidArgument, Unavailable
from shared.messages import Msg, Role, user
from shared.model.scripted import NO_MEMORIES
from shared.model.tokens import messages_tokens, text_tokens
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, CHAT_DEFAULT, AgentConfig, MemoryPolicy
from tests.executor.models import TurnsModel, text
from tests.executor.test_context import SmallModel, card, long_step
from tests.executor.test_memory_output import Marks


@dataclass
class Found:
    id: str
    content: str
    kind: str = "fact"
    score: float = 0.0


@dataclass
class Answer:
    memories: list[Found]
    mode: int
    mode_reason: str


class Memories:
    """A memory service's search: given results per query, records what it was asked;
    every search ran in `modes[query]` (default hybrid: a mode and its reason)."""

    def __init__(
        self,
        results: dict[str, list[Found]],
        *,
        fail: Exception | None = None,
        modes: dict[str, tuple[int, str]] | None = None,
    ) -> None:
        self.results = results
        self.fail = fail
        self.modes = modes or {}
        self.asked: list[tuple[str, str, int]] = []

    async def search_response(self, owner: str, query: str, page_size: int = 10) -> Answer:
        self.asked.append((owner, query, page_size))
        if self.fail is not None:
            raise self.fail
        mode, reason = self.modes.get(query, (pb.SEARCH_MODE_HYBRID, ""))
        return Answer(self.results.get(query, []), mode, reason)


TEA = Found("mem-1", "User likes green tea", "preference", 0.9)
LIN = Found("mem-2", "User's name is Lin", "name", 0.4)


def step(said: str = "green tea?", **profile: Any) -> StepRequest:
    return StepRequest(
        run_id="run-1",
        thread_id="t-1",
        owner="alice",
        executor=ExecutorKind.WORKER,
        profile=CHAT_DEFAULT.model_copy(update=profile),
        context=(),
        input=user(said, id="m-in"),
        tools=(),
        client_tools=(),
        time_zone="Asia/Shanghai",
        reply_message_id="reply-1",
    )


async def run(agent: WorkerAgent, request: StepRequest) -> list[Any]:
    return [item async for item in agent.run(request)]


def worker(model: Any, memories: Memories | None) -> WorkerAgent:
    return WorkerAgent(
        model, ToolRegistry(()), max_tool_rounds=2, tool_timeout_seconds=5, memories=memories
    )


def systems(messages: list[Msg]) -> list[str]:
    return [m.text for m in messages if m.role is Role.SYSTEM]


async def test_the_owners_recalled_memories_lead_the_models_context() -> None:
    memories = Memories({"green tea?": [TEA, LIN]})
    model = TurnsModel([text("ok")])
    items = await run(worker(model, memories), step())
    assert memories.asked == [("alice", "green tea?", 5)]
    [sent] = [messages for messages, _ in model.seen]
    assert systems(sent) == [f"{recall.HEADER}\n- User likes green tea\n- User's name is Lin"]
    assert sent[-1].text == "green tea?"
    # The audit record comes first: the block, and the ids and scores it used.
    first = items[0]
    assert isinstance(first, Msg) and first.kind is MessageKind.MEMORY_RECALL
    assert first.id == "reply-1.recall" and first.text == systems(sent)[0]
    assert first.metadata["memory_recall"] == [
        {"id": "mem-1", "score": 0.9},
        {"id": "mem-2", "score": 0.4},
    ]


async def test_the_recall_record_says_the_search_was_hybrid() -> None:
    items = await run(worker(TurnsModel([text("ok")]), Memories({"green tea?": [TEA]})), step())
    assert items[0].metadata["memory_search"] == {"mode": "hybrid"}


async def test_the_recall_record_says_the_search_fell_back_to_words_and_why() -> None:
    memories = Memories(
        {"green tea?": [TEA]},
        modes={"green tea?": (pb.SEARCH_MODE_LEXICAL, "embedding_timeout")},
    )
    items = await run(worker(TurnsModel([text("ok")]), memories), step())
    assert items[0].kind is MessageKind.MEMORY_RECALL
    assert items[0].metadata["memory_search"] == {
        "mode": "lexical",
        "reason": "embedding_timeout",
    }


async def test_a_policy_that_is_off_searches_nothing() -> None:
    memories = Memories({"green tea?": [TEA]})
    model = TurnsModel([text("ok")])
    items = await run(worker(model, memories), step(memory=MemoryPolicy(mode="off")))
    assert memories.asked == []
    assert systems(model.seen[0][0]) == []
    assert not any(isinstance(i, Msg) and i.kind is MessageKind.MEMORY_RECALL for i in items)


async def test_top_k_and_min_relevance_bound_the_block() -> None:
    policy = MemoryPolicy(mode="recall", top_k=1, min_relevance=0.5)
    assert recall.choose([_recalled(LIN), _recalled(TEA)], policy, 1000) == [_recalled(TEA)]
    assert recall.choose([_recalled(LIN)], policy, 1000) == []


def _recalled(f: Found) -> Recalled:
    return Recalled(f.id, f.content, f.kind, f.score)


async def test_the_block_stops_at_the_token_budget() -> None:
    many = [Recalled(f"m{i}", f"fact number {i} " * 5, "fact", 1.0) for i in range(5)]
    budget = text_tokens(recall.block_text(many[:2]))
    chosen = recall.choose(many, MemoryPolicy(mode="recall", top_k=5), budget)
    assert chosen == many[:2]
    assert recall.choose(many, MemoryPolicy(mode="recall"), 1) == []


async def test_the_block_fits_the_context_and_the_oldest_history_makes_room() -> None:
    big = [Found(f"m{i}", f"long remembered fact {i} " * 20, score=1.0) for i in range(5)]
    memories = Memories({"the question": big})
    model = SmallModel(card(2048, 200))
    request = long_step()
    request = type(request)(**{**request.__dict__, "profile": CHAT_DEFAULT})
    agent = WorkerAgent(
        model, ToolRegistry(()), max_tool_rounds=2, tool_timeout_seconds=5, memories=memories
    )
    await run(agent, request)
    [sent] = model.seen
    [block] = systems(sent)
    assert 0 < text_tokens(block) <= CHAT_DEFAULT.memory.max_tokens
    assert messages_tokens(sent) <= context.input_budget(model.card)
    assert sent[-1].text == "the question"


def test_the_block_gets_no_more_than_the_call_leaves() -> None:
    question = user("q " * 100)
    left = 300 - messages_tokens([question])
    assert context.recall_budget(300, [question], (), 400) == left
    assert context.recall_budget(300, [question], (), 50) == 50
    assert context.recall_budget(10, [question], (), 400) == 0
    assert context.recall_budget(None, [question], (), 400) == 400


async def test_the_template_places_the_block_at_its_memories_placeholder() -> None:
    agent = AgentConfig(system_prompt="You help. Known: {memories} End.")
    model = TurnsModel([text("ok")])
    await run(worker(model, Memories({"green tea?": [TEA]})), step(agent=agent))
    [prompt] = systems(model.seen[0][0])
    assert prompt == f"You help. Known: {recall.HEADER}\n- User likes green tea End."


async def test_without_a_placeholder_the_block_follows_the_prompt() -> None:
    agent = AgentConfig(system_prompt="You help.")
    model = TurnsModel([text("ok")])
    await run(worker(model, Memories({"green tea?": [TEA]})), step(agent=agent))
    assert systems(model.seen[0][0]) == [
        "You help.",
        f"{recall.HEADER}\n- User likes green tea",
    ]


async def test_a_memory_service_that_fails_leaves_the_step_without_memories() -> None:
    model = TurnsModel([text("ok")])
    items = await run(worker(model, Memories({}, fail=Unavailable("memory down"))), step())
    assert systems(model.seen[0][0]) == []
    assert any(isinstance(i, Msg) and i.kind is MessageKind.AGENT_REPLY for i in items)


async def test_a_query_the_service_refuses_recalls_nothing_and_the_step_runs() -> None:
    model = TurnsModel([text("ok")])
    bad = Memories({}, fail=InvalidArgument("query", "must contain more than punctuation"))
    await run(worker(model, bad), step(said="?!"))
    assert systems(model.seen[0][0]) == []


def test_several_queries_merge_each_memory_once_with_its_best_score() -> None:
    a = [_recalled(LIN), Recalled("mem-1", "User likes green tea", "preference", 0.2)]
    b = [_recalled(TEA)]
    assert recall.merge([a, b]) == [_recalled(TEA), _recalled(LIN)]


def test_a_memory_cites_the_messages_that_state_it() -> None:
    ids = ("m1", "m2", "m3")
    texts = ("I love green tea", "I live in Hangzhou", "我叫林, 我喜欢绿茶")
    assert core.stating_messages("User likes green tea", ids, texts) == ("m1",)
    assert core.stating_messages("User lives in Hangzhou", ids, texts) == ("m2",)
    assert core.stating_messages("用户叫林", ids, texts) == ("m3",)
    # Nothing in common: the window's messages, since no one can be told.
    assert core.stating_messages("Unrelated", ids, texts) == ids


def test_a_forget_cites_the_newest_message_about_it() -> None:
    ids = ("m1", "m2")
    texts = ("I love pears.", "Please forget that I love pears.")
    assert core.stating_messages("User likes pears", ids, texts) == ids
    assert core.stating_messages("User likes pears", ids, texts, newest=True) == ("m2",)


def test_each_job_and_capability_has_its_own_watermark() -> None:
    both = core.watermark_name("automation:job-1", ["memory_write", "memory_forget"])
    same = ["memory_forget", "memory_write", "memory_search"]
    assert both == core.watermark_name("automation:job-1", same)
    assert both != core.watermark_name("automation:job-1", ["memory_write"])
    assert both != core.watermark_name("automation:job-2", ["memory_write", "memory_forget"])
    assert len(both) <= 63 and both.startswith("memory_agent.")


async def test_the_memory_agent_sees_the_memories_its_new_messages_recall() -> None:
    memories = Memories({"I now prefer black tea": [TEA]})
    model = TurnsModel([text(NO_MEMORIES)])
    agent = MemoryAgent(
        model,
        ToolRegistry(()),
        Marks(),
        max_tool_rounds=2,
        tool_timeout_seconds=5,
        memories=memories,
    )
    told = user("I now prefer black tea", id="m1", thread_id="chat-1", position=1)
    request = StepRequest(
        run_id="job-1",
        thread_id="automation:job-1",
        owner="alice",
        executor=ExecutorKind.MEMORY,
        profile=AUTOMATION_MEMORY_DEFAULT,
        context=(told,),
        input=user("extract"),
        tools=(),
        client_tools=(),
        time_zone="Asia/Shanghai",
        reply_message_id="reply-1",
    )
    items = [item async for item in agent.run(request)]
    assert memories.asked == [("alice", "I now prefer black tea", 20)]
    assert f"{recall.HEADER}\n- User likes green tea" in systems(model.seen[0][0])
    assert any(isinstance(i, Msg) and i.kind is MessageKind.MEMORY_RECALL for i in items)


class Client:
    """The memory service behind the memory tools: records what the tools ask."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, tuple[str, ...]]] = []
        self.forgets: list[dict[str, Any]] = []

    async def write(
        self, owner: str, content: str, kind: str, run_id: str, message_ids: Any
    ) -> Any:
        self.writes.append((content, tuple(message_ids)))
        memory = pb.Memory(id="mem-1", content=content)
        return pb.WriteMemoryResponse(created=True, memory=memory)

    async def forget(self, owner: str, **fields: Any) -> list[Any]:
        self.forgets.append(fields)
        return [Found("mem-1", "User likes pears")]


def told(*texts: str) -> ToolContext:
    return ToolContext(
        "alice",
        "job-1",
        "automation:job-1",
        "UTC",
        source_message_ids=tuple(f"m{i}" for i in range(1, len(texts) + 1)),
        source_texts=texts,
    )


async def test_a_written_memory_cites_the_message_that_stated_it() -> None:
    client = Client()
    # A recording double of the memory client.
    [write, _, _] = memory_tools(client)  # type: ignore[arg-type]
    context = told("I love pears.", "I live in Hangzhou.")
    await write.execute({"content": "User lives in Hangzhou", "kind": "place"}, context)
    assert client.writes == [("User lives in Hangzhou", ("m2",))]


async def test_a_forget_cites_what_it_forgot_the_request_and_why() -> None:
    client = Client()
    # A recording double of the memory client.
    [_, forget, _] = memory_tools(client)  # type: ignore[arg-type]
    context = told("I love pears.", "Please forget that I love pears.")
    result = await forget.execute({"content_query": "pears"}, context)
    assert result == "forgot 1 memory; mem-1: User likes pears"
    [asked] = client.forgets
    assert asked["message_ids"] == ("m2",) and asked["run_id"] == "job-1"
    assert asked["reason"] == "the user said: Please forget that I love pears."
    # The model's own reason wins; text no store keeps is made storable, not refused.
    await forget.execute({"content_query": "pears", "reason": "asked\u0000 to"}, context)
    assert client.forgets[-1]["reason"] == "asked\ufffd to"
