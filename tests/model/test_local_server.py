"""The provider against the real bundled server (llama-cpp-python 0.3.36 serving
SmolLM2-135M, services.launcher.LocalModelServer): what the conformance set records of it,
checked live. Marked realmodel: only `-m realmodel` runs it (make test-realmodel)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from services.launcher import LOCAL_CARD, MODEL_VENV, LocalModelServer, free_port, local_gguf
from shared.messages import (
    ToolCallBlock,
    ToolResultBlock,
    ToolResultState,
    assistant,
    user,
)
from shared.model.base import ModelError, ToolSpec
from shared.model.cards import CardError, load_card
from shared.model.factory import check_endpoints
from shared.model.merge import collect
from shared.model.openai import OpenAIChatModel
from shared.model.tokens import text_tokens
from shared.settings import Settings

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalModelServer]:
    try:
        local_gguf(MODEL_VENV)
    except RuntimeError as err:
        pytest.fail(f"{err}: the real-model tier needs the local model server", pytrace=False)
    log = tmp_path_factory.mktemp("model") / "model-server.log"
    s = LocalModelServer(free_port(), log_path=log)
    try:
        s.start(timeout=180)
    except RuntimeError:
        print(log.read_text()[-4000:])
        raise
    yield s
    s.stop()


@pytest.fixture
async def model(server: LocalModelServer) -> AsyncIterator[OpenAIChatModel]:
    card = load_card(LOCAL_CARD, overrides={"max_tokens": {"default": 8}})
    m = OpenAIChatModel(card.model_copy(update={"base_url": server.base_url}))
    yield m
    await m.aclose()


async def test_a_thread_after_tool_calls_is_answered(model: OpenAIChatModel) -> None:
    """content "" and arguments as a JSON object (issue 32: null content was an HTTP 500)."""
    history = [
        user("Note that I like tea."),
        assistant(
            [
                ToolCallBlock(id="c1", name="notes.add", input='{"text": "likes tea"}'),
                ToolResultBlock(
                    id="c1", name="notes.add", output="ok", state=ToolResultState.SUCCESS
                ),
                ToolCallBlock(id="c2", name="notes.add", input='{"text": "unterminated'),
                ToolResultBlock(
                    id="c2",
                    name="notes.add",
                    output="error: the arguments are not valid JSON",
                    state=ToolResultState.ERROR,
                ),
            ]
        ),
        user("What do I like?"),
    ]
    msg = await collect(model.stream(history, tools=[ToolSpec("notes.add")]))
    assert msg.finished_reason in ("stop", "length") and msg.text


async def test_null_content_is_refused_as_a_final_invalid_request(
    server: LocalModelServer, model: OpenAIChatModel
) -> None:
    body = model.request_body([user("hi")], [], None)
    body["messages"] = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    with pytest.raises(ModelError) as err:
        await model._open_with_retries(body)
    assert err.value.reason == "MODEL_INVALID_REQUEST" and "HTTP 500" in err.value.message


async def test_a_prompt_past_the_window_is_a_context_overflow(model: OpenAIChatModel) -> None:
    """The server answers 200 and drops the stream; the unstreamed ask hears the overflow."""
    with pytest.raises(ModelError) as err:
        await collect(model.stream([user("word " * 2500)]))
    assert err.value.reason == "MODEL_CONTEXT_OVERFLOW", err.value.message


async def test_the_server_counts_tokens_below_the_estimate_for_english(
    model: OpenAIChatModel,
) -> None:
    text = "The ferry leaves the harbour at ten past nine on weekdays and at half past ten."
    [count] = await model.count_tokens([text]) or [0]
    assert 0 < count < text_tokens(text)


async def test_the_card_is_checked_against_the_servers_model_list(
    server: LocalModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTMESH_MODEL_BASE_URL", server.base_url)
    monkeypatch.setenv("AGENTMESH_MODEL_CARD", LOCAL_CARD)
    settings = Settings(model_provider="openai")
    await check_endpoints(settings, [None])
    with pytest.raises(CardError, match=r"does not serve 'Qwen/Qwen2\.5-7B-Instruct'"):
        await check_endpoints(settings, ["qwen2.5-vllm"])
    listed = httpx.get(f"{server.base_url}/models", timeout=5).json()
    assert [m["id"] for m in listed["data"]] == [load_card(LOCAL_CARD).model]
