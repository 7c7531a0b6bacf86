"""A card whose endpoint tokenizes (card.tokenizer) has the context budget counted by the
model's own tokenizer, the estimate staying the fallback (shared.model.tokens.text_counter,
OpenAIChatModel.count_tokens)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from services.executor import context
from services.executor.agents.worker import WorkerAgent
from services.executor.tools import ToolRegistry
from shared.messages import Msg, assistant, user
from shared.model.openai import OpenAIChatModel
from shared.model.tokens import message_tokens, text_counter, text_tokens
from tests.executor.test_worker import run, step
from tests.model.fake_openai import Reply, Request, error, fake_openai, recording
from tests.model.test_openai import card


def words(request: Request) -> Reply | None:
    """A tokenizer endpoint that counts one token a word (llama-cpp-python's or llama.cpp's
    shape); None for any other path (the chat reply)."""
    if request.path == "/extras/tokenize/count":
        answer: dict[str, Any] = {"count": len(request.body["input"].split())}
    elif request.path == "/tokenize":
        answer = {"tokens": list(range(len(request.body["content"].split())))}
    else:
        return None
    return Reply(body=json.dumps(answer).encode(), headers={"Content-Type": "application/json"})


def local(base_url: str, tokenizer: str = "llama_cpp_python", **fields: Any) -> OpenAIChatModel:
    return OpenAIChatModel(card(base_url, tokenizer=tokenizer, **fields), backoff_seconds=0.01)


@pytest.mark.parametrize(
    ("tokenizer", "path"),
    [("llama_cpp_python", "/extras/tokenize/count"), ("llama_cpp", "/tokenize")],
)
async def test_the_endpoint_counts_each_text_once(tokenizer: str, path: str) -> None:
    async with fake_openai([], judge=words) as fake:
        m = local(fake.base_url, tokenizer)
        assert await m.count_tokens(["one two three", "四 五", "one two three"]) == [3, 2, 3]
        assert await m.count_tokens(["one two three", "six"]) == [3, 1]
        await m.aclose()
    assert [r.path for r in fake.requests] == [path] * 3


async def test_an_endpoint_that_does_not_count_leaves_the_estimate_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    async with fake_openai([error(404, "Not Found")] * 4) as fake:
        m = local(fake.base_url)
        for _ in range(2):
            count = await text_counter(m, [user("one two three")])
            assert count("one two three") == text_tokens("one two three")
        await m.aclose()
    assert caplog.text.count("did not count tokens") == 1


async def test_a_card_without_a_tokenizer_asks_nothing() -> None:
    async with fake_openai([], judge=words) as fake:
        m = local(fake.base_url, "estimate")
        count = await text_counter(m, [user("one two three")])
        await m.aclose()
    assert count is text_tokens and fake.requests == []


def thread(n: int) -> tuple[Msg, ...]:
    out: list[Msg] = []
    for i in range(n):
        out += [user(f"message {i} " + "lorem ipsum " * 60), assistant(f"answer {i}")]
    return tuple(out)


async def test_the_worker_fits_the_thread_by_the_models_own_count() -> None:
    request = step(said="the question")
    request = type(request)(**{**request.__dict__, "context": thread(60)})
    sent: dict[str, list[dict[str, Any]]] = {}
    for tokenizer in ("estimate", "llama_cpp_python"):
        async with fake_openai([recording("text.sse")], judge=words) as fake:
            m = local(fake.base_url, tokenizer, context_size=2048, output_size=200)
            agent = WorkerAgent(m, ToolRegistry(()), max_tool_rounds=2, tool_timeout_seconds=5)
            await run(agent, request)
            await m.aclose()
        [chat] = [r for r in fake.requests if r.path == "/v1/chat/completions"]
        sent[tokenizer] = chat.body["messages"]
    # Counted by the tokenizer (a token a word here), more of the thread fits the window.
    assert len(sent["llama_cpp_python"]) > len(sent["estimate"]) + 4
    kept = [user(m["content"]) for m in sent["llama_cpp_python"]]
    by_words = sum(message_tokens(m, lambda t: len(t.split())) for m in kept)
    budget = context.input_budget(local("http://x/v1", context_size=2048, output_size=200).card)
    assert by_words <= budget
