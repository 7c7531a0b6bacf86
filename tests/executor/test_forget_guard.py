"""The structured memory extraction's forget guard: a forget runs only when the user's
request it quotes is in one of their messages and asks to forget (English and Chinese),
never when the model quotes the user's own statement of a fact; and the reply's "forgot N"
counts the memories the forgets removed."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from agentmesh.memory.v1 import memory_service_pb2 as memory_pb2

from services.executor.agents.memory import MemoryAgent
from services.executor.memory_tools import ForgetRequest, MemoryClient, MemoryForget
from services.executor.tools import ToolRegistry
from shared.messages import Msg
from tests.executor.test_memory_output import Marks
from tests.executor.test_memory_structured import Answers, Tool, step


@pytest.mark.parametrize(
    ("said", "quote"),
    [
        ("Please forget that I live in Paris.", "Please forget that I live in Paris"),
        ("I like tea now. Forget my coffee!", "Forget my coffee"),
        ("Can you forget where I live?", "Can you forget where I live?"),
        ("I'd like you to forget my address.", "I'd like you to forget my address"),
        ("OK, stop remembering that I hate rain", "stop remembering that I hate rain"),
        ("Don't remember my phone number anymore.", "Don't remember my phone number anymore"),
        ("Delete the memory about my job please", "Delete the memory about my job please"),
        ("请忘记我住在上海。", "请忘记我住在上海"),
        ("我现在喜欢红茶，忘掉我喜欢绿茶吧", "忘掉我喜欢绿茶吧"),
        ("把我住在北京这件事忘了", "把我住在北京这件事忘了"),
        ("你可以忘了我的地址吗？", "你可以忘了我的地址吗？"),
        ("别再记着我喜欢咖啡了", "别再记着我喜欢咖啡了"),
        ("删除关于我工作的记忆", "删除关于我工作的记忆"),
        ("不要记住我住在上海", "不要记住我住在上海"),
        ("\u201cPlease forget my address\u201d", "\u201cPlease forget my address\u201d"),
        ("I don't want you to remember my address", "I don't want you to remember my address"),
        ("I love green tea and forget that I hate rain", "and forget that I hate rain"),
        ("I moved to Paris so forget my old address", "I moved to Paris so forget my old address"),
        ("我搬到上海了，所以忘掉我住在北京", "我搬到上海了，所以忘掉我住在北京"),
    ],
)
def test_a_quoted_request_to_forget_is_accepted(said: str, quote: str) -> None:
    assert ForgetRequest(memory="x", user_request=quote).asked_in([said])


@pytest.mark.parametrize(
    ("said", "quote"),
    [
        # The user's own statement, quoted as if it asked for the forget (SmolLM2 does this).
        ("I like tea.", "I like tea"),
        ("My name is Lin and I live in Paris", "I live in Paris"),
        ("I always forget my keys", "I always forget my keys"),
        ("I forgot my umbrella today", "I forgot my umbrella today"),
        ("I don't remember where I parked", "I don't remember where I parked"),
        ("Don't forget that I like tea!", "Don't forget that I like tea"),
        ("Don\u2019t forget that I like tea!", "Don\u2019t forget that I like tea"),
        ("Never forget my birthday", "Never forget my birthday"),
        ("我喜欢绿茶。", "我喜欢绿茶"),
        ("我住在上海", "我住在上海"),
        ("我忘了带伞", "我忘了带伞"),
        ("我总是忘记密码", "我总是忘记密码"),
        ("请不要忘记我喜欢茶", "请不要忘记我喜欢茶"),
        ("别忘了我的生日", "别忘了我的生日"),
        ("我忘了。", "我忘了"),
        ("Remember that I like tea", "Remember that I like tea"),
        ("记住我喜欢茶", "记住我喜欢茶"),
        ("I grow bread wheat and forget-me-nots", "I grow bread wheat and forget-me-nots"),
    ],
)
def test_a_quote_that_does_not_ask_to_forget_is_refused(said: str, quote: str) -> None:
    assert not ForgetRequest(memory="x", user_request=quote).asked_in([said])


class ForgettingClient:
    """The memory service's ForgetMemory as MemoryForget sees it: the memories it removed
    (`stored` holds the owner's memories; a content_query forgets those containing it)."""

    def __init__(self, *stored: str) -> None:
        self.stored = list(stored)

    async def forget(self, owner: str, **request: Any) -> list[memory_pb2.Memory]:
        query = request["content_query"]
        gone = [m for m in self.stored if query in m]
        self.stored = [m for m in self.stored if m not in gone]
        return [memory_pb2.Memory(id=f"mem-{i}", content=m) for i, m in enumerate(gone)]


async def forget_run(client: ForgettingClient, document: dict[str, Any], *said: str) -> str:
    forget = MemoryForget(cast(MemoryClient, client))
    agent = MemoryAgent(
        Answers(json.dumps(document, ensure_ascii=False)),
        ToolRegistry((Tool("memory_write", "content"), forget)),
        Marks(),
        max_tool_rounds=2,
        tool_timeout_seconds=5,
    )
    items = [item async for item in agent.run(step(*said))]
    return "".join(m.text for m in items if isinstance(m, Msg) and not m.tool_results)


async def test_a_forget_quoting_the_user_s_statement_forgets_nothing() -> None:
    client = ForgettingClient("User likes tea")
    document = {
        "memories": [{"content": "User likes tea", "kind": "preference"}],
        "forget": [{"memory": "User likes tea", "user_request": "I like tea"}],
    }
    reply = await forget_run(client, document, "I like tea")
    assert client.stored == ["User likes tea"]
    assert "Saved 1 memory, forgot 0. Ignored 1 forget request(s)" in reply


async def test_the_reply_counts_the_memories_forgotten_not_the_forgets_run() -> None:
    client = ForgettingClient("User likes coffee", "User likes iced coffee", "User likes tea")
    document = {
        "memories": [],
        "forget": [
            {"memory": "coffee", "user_request": "forget that I like coffee"},
            {"memory": "rain", "user_request": "forget that I hate rain"},
        ],
    }
    reply = await forget_run(
        client, document, "Please forget that I like coffee, and forget that I hate rain"
    )
    assert client.stored == ["User likes tea"]
    assert "Saved 0 memories, forgot 2." in reply
    client = ForgettingClient("User likes tea")
    document = {"memories": [], "forget": [{"memory": "rain", "user_request": "forget the rain"}]}
    reply = await forget_run(client, document, "forget the rain")
    assert "Saved 0 memories, forgot 0." in reply and client.stored == ["User likes tea"]
