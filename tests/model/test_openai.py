"""The OpenAI-compatible provider against a local fake server replaying recorded streams."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from services.launcher import free_port
from shared.messages import (
    DataBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolResultState,
    Usage,
    assistant,
    system,
    user,
)
from shared.model import openai
from shared.model.base import (
    ModelError,
    ModelRequestError,
    ModelUnavailable,
    OutputSchema,
    ToolSpec,
)
from shared.model.cards import ModelCard
from shared.model.merge import collect
from shared.model.openai import OpenAIChatModel, read_api_key, to_openai_messages
from tests.model.fake_openai import Reply, error, events, fake_openai, recording

SECRET = "sk-test-secret-value-1234567890"


def card(base_url: str, **fields: Any) -> ModelCard:
    values: dict[str, Any] = {
        "name": "fake",
        "provider": "openai",
        "model": "fake-model",
        "base_url": base_url,
        "context_size": 8000,
        "output_size": 1000,
        "output_types": ["text", "thinking", "tool_call"],
        "max_retries": 2,
        "timeout_seconds": 2,
        "connect_timeout_seconds": 1,
    }
    values.update(fields)
    return ModelCard.model_validate(values)


def model(base_url: str, **fields: Any) -> OpenAIChatModel:
    return OpenAIChatModel(card(base_url, **fields), api_key=SECRET, backoff_seconds=0.01)


async def test_streams_text_with_usage_from_the_final_chunk() -> None:
    async with fake_openai([recording("text.sse")]) as fake:
        m = model(fake.base_url)
        chunks = [c async for c in m.stream([user("hi")])]
        await m.aclose()
    texts = [b.text for c in chunks for b in c.content if isinstance(b, TextBlock)]
    assert texts == ["Hello", "! How", " can I help?"]
    assert chunks[-1].is_last and chunks[-1].finished_reason == "stop"
    assert chunks[-1].usage == Usage(19, 7)


async def test_streamed_calls_share_one_kept_connection() -> None:
    # A new connection per call was 1-2 ms of every run's time to first text (issue 18).
    async with fake_openai([recording("text.sse"), recording("text.sse")], keep_alive=True) as fake:
        m = model(fake.base_url)
        for _ in range(2):
            chunks = [c async for c in m.stream([user("hi")])]
            assert chunks[-1].is_last and chunks[-1].finished_reason == "stop"
        await m.aclose()
    assert len(fake.requests) == 2
    assert fake.connections == 1


async def test_a_stream_held_open_after_done_still_ends_at_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(openai, "DRAIN_SECONDS", 0.2)
    async with fake_openai([replace(recording("text.sse"), linger=5)]) as fake:
        m = model(fake.base_url)
        started = time.monotonic()
        chunks = [c async for c in m.stream([user("hi")])]
        took = time.monotonic() - started
        await m.aclose()
    assert chunks[-1].is_last and chunks[-1].usage == Usage(19, 7)
    assert took < 2


async def test_sends_stream_options_model_parameters_and_bearer_key() -> None:
    async with fake_openai([recording("text.sse")]) as fake:
        m = model(fake.base_url, parameters={"temperature": {"default": 0.2}})
        await collect(
            m.stream([system("be brief"), user("hi")], tools=[ToolSpec("search", "find")])
        )
        await m.aclose()
    [request] = fake.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {SECRET}"
    body = request.body
    assert (body["model"], body["stream"], body["stream_options"]) == (
        "fake-model",
        True,
        {"include_usage": True},
    )
    assert body["temperature"] == 0.2
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert body["tools"][0]["function"]["name"] == "search"


async def test_tool_calls_split_mid_json_merge_by_index() -> None:
    async with fake_openai([recording("tool_calls.sse", piece=3)]) as fake:
        m = model(fake.base_url)
        msg = await collect(
            m.stream([user("weather and time in Paris?")], tools=[ToolSpec("get_weather")])
        )
        await m.aclose()
    assert [(c.id, c.name, c.arguments()) for c in msg.tool_calls] == [
        ("call_wx1", "get_weather", {"city": "Paris"}),
        ("call_tm2", "get_time", {"tz": "Europe/Paris"}),
    ]
    assert (msg.finished_reason, msg.usage) == ("tool_calls", Usage(85, 41))


async def test_reasoning_content_streams_as_thinking() -> None:
    async with fake_openai([recording("reasoning.sse")]) as fake:
        m = model(fake.base_url)
        msg = await collect(m.stream([user("你好")]))
        await m.aclose()
    assert msg.content == (
        ThinkingBlock("The user greets me. Reply politely."),
        TextBlock("你好！有什么可以帮你？"),
    )


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
async def test_a_line_separator_the_model_wrote_unescaped_stays_in_its_text(separator: str) -> None:
    # JSON need not escape U+2028, U+2029 or U+0085 (llama.cpp's server and pydantic send
    # them as they are); only CR and LF end an SSE line.
    delta = {"choices": [{"index": 0, "delta": {"content": f"one{separator}two"}}]}
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    reply = events(*(json.dumps(p, ensure_ascii=False) for p in (delta, finish)))
    async with fake_openai([replace(reply, piece=5)]) as fake:
        m = model(fake.base_url)
        msg = await collect(m.stream([user("hi")]))
        await m.aclose()
    assert msg.text == f"one{separator}two" and msg.finished_reason == "stop"


async def test_429_then_success_is_retried() -> None:
    async with fake_openai([error(429, "slow down"), recording("text.sse")]) as fake:
        m = model(fake.base_url)
        msg = await collect(m.stream([user("hi")]))
        await m.aclose()
    assert msg.text == "Hello! How can I help?"
    assert len(fake.requests) == 2


async def test_retry_after_header_is_honoured() -> None:
    async with fake_openai(
        [error(429, "slow down", **{"Retry-After": "0.3"}), recording("text.sse")]
    ) as fake:
        m = model(fake.base_url)
        start = time.perf_counter()
        await collect(m.stream([user("hi")]))
        await m.aclose()
    assert time.perf_counter() - start >= 0.3


async def test_500s_beyond_the_retry_limit_fail_unavailable() -> None:
    async with fake_openai([error(500), error(502), error(503), recording("text.sse")]) as fake:
        m = model(fake.base_url, max_retries=2)
        with pytest.raises(ModelUnavailable, match=r"HTTP 503 .* \(after 3 attempts\)"):
            await collect(m.stream([user("hi")]))
        await m.aclose()
    assert len(fake.requests) == 3


async def test_client_error_is_not_retried() -> None:
    async with fake_openai(
        [error(401, "Incorrect API key provided"), recording("text.sse")]
    ) as fake:
        m = model(fake.base_url)
        with pytest.raises(
            ModelRequestError, match=r"refused the API key \(HTTP 401\): Incorrect API key provided"
        ):
            await collect(m.stream([user("hi")]))
        await m.aclose()
    assert len(fake.requests) == 1


async def test_closed_port_fails_fast_with_a_clear_error() -> None:
    m = model(f"http://127.0.0.1:{free_port()}/v1", max_retries=1)
    start = time.perf_counter()
    with pytest.raises(
        ModelUnavailable, match=r"cannot reach http://127\.0\.0\.1:\d+/v1/chat/completions"
    ):
        await collect(m.stream([user("hi")]))
    await m.aclose()
    assert time.perf_counter() - start < 2


async def test_silent_endpoint_times_out_instead_of_hanging() -> None:
    async with fake_openai([Reply(stall=30)]) as fake:
        m = model(fake.base_url, timeout_seconds=0.2, max_retries=0)
        with pytest.raises(ModelUnavailable, match="ReadTimeout"):
            await asyncio.wait_for(collect(m.stream([user("hi")])), 5)
        await m.aclose()


async def test_stream_broken_after_output_fails_without_retry() -> None:
    body = recording("text.sse").body
    async with fake_openai(
        [Reply(body=body, cut_after=len(body) // 2), recording("text.sse")]
    ) as fake:
        m = model(fake.base_url)
        got: list[Any] = []
        with pytest.raises(ModelError, match="stream broke"):
            async for chunk in m.stream([user("hi")]):
                got.append(chunk)
        await m.aclose()
    assert got and len(fake.requests) == 1


async def test_stream_that_ends_without_finishing_is_an_error() -> None:
    body = b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
    async with fake_openai([Reply(body=body)]) as fake:
        m = model(fake.base_url)
        with pytest.raises(ModelUnavailable, match="ended before the response finished"):
            await collect(m.stream([user("hi")]))
        await m.aclose()


async def test_the_api_key_never_appears_in_logs_or_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with fake_openai([error(500, "upstream"), error(401, "bad key")]) as fake:
        m = model(fake.base_url)
        with pytest.raises(ModelRequestError) as err:
            await collect(m.stream([user("hi")]))
        await m.aclose()
    assert SECRET not in str(err.value) and SECRET not in repr(m)
    assert SECRET not in caplog.text
    assert "retrying" in caplog.text


def test_api_key_from_the_environment_variable_the_card_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_KEY", SECRET)
    assert read_api_key(card("http://x/v1", api_key_env="FAKE_KEY")) == SECRET


def test_missing_api_key_variable_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAKE_KEY", raising=False)
    with pytest.raises(ModelRequestError, match="environment variable FAKE_KEY is not set"):
        read_api_key(card("http://x/v1", api_key_env="FAKE_KEY"))


def test_api_key_from_a_secret_file(tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_text(SECRET + "\n")
    assert read_api_key(card("http://x/v1", api_key_file=str(secret))) == SECRET


def test_assistant_tool_turns_become_assistant_then_tool_messages() -> None:
    msgs = to_openai_messages(
        [
            user([TextBlock("what is this?"), DataBlock("image/png", data=b"\x89PNG")]),
            assistant(
                [
                    ThinkingBlock("look it up"),
                    TextBlock("Checking."),
                    ToolCallBlock(id="c1", name="search", input='{"q":"png"}'),
                    ToolResultBlock(
                        id="c1", name="search", output="an image", state=ToolResultState.SUCCESS
                    ),
                    TextBlock("It is an image."),
                ]
            ),
        ]
    )
    assert msgs[0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw=="},
    }
    assert msgs[1] == {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "search", "arguments": '{"q":"png"}'},
            }
        ],
    }
    assert msgs[2] == {"role": "tool", "tool_call_id": "c1", "content": "an image"}
    assert msgs[3] == {"role": "assistant", "content": "It is an image."}


async def test_unknown_option_is_refused_before_any_request() -> None:
    async with fake_openai([recording("text.sse")]) as fake:
        m = model(fake.base_url)
        with pytest.raises(ValueError, match=r"options\.temprature: not a parameter"):
            await collect(m.stream([user("hi")], options={"temprature": 1}))
        await m.aclose()
    assert fake.requests == []


SCHEMA = OutputSchema("facts", {"type": "object", "properties": {"x": {"type": "string"}}})
BOUNDED = OutputSchema(
    "facts",
    SCHEMA.schema,
    {"type": "object", "properties": {"x": {"type": "string", "maxLength": 10}}},
)


@pytest.mark.parametrize(
    ("dialect", "expected"),
    [
        (
            "json_schema",
            {
                "type": "json_schema",
                "json_schema": {"name": "facts", "schema": dict(SCHEMA.schema), "strict": True},
            },
        ),
        ("json_object_schema", {"type": "json_object", "schema": dict(SCHEMA.schema)}),
    ],
)
async def test_an_output_schema_is_asked_for_the_way_the_card_says(
    dialect: str, expected: dict[str, Any]
) -> None:
    async with fake_openai([recording("text.sse")]) as fake:
        m = model(fake.base_url, structured_output=dialect)
        await collect(m.stream([user("hi")], output_schema=SCHEMA))
        await m.aclose()
    [request] = fake.requests
    assert request.body["response_format"] == expected
    assert "tools" not in request.body


@pytest.mark.parametrize(
    ("dialect", "sent"),
    [("json_schema", SCHEMA.schema), ("json_object_schema", BOUNDED.grammar_schema)],
)
async def test_a_grammar_server_is_given_the_bounded_schema_a_strict_endpoint_is_not(
    dialect: str, sent: dict[str, Any]
) -> None:
    """A strict json_schema endpoint refuses length keywords; llama.cpp's grammar takes them,
    and they make a small model's document close before the output limit."""
    async with fake_openai([recording("text.sse")]) as fake:
        m = model(fake.base_url, structured_output=dialect)
        await collect(m.stream([user("hi")], output_schema=BOUNDED))
        await m.aclose()
    [request] = fake.requests
    format_ = request.body["response_format"]
    assert format_.get("schema", format_.get("json_schema", {}).get("schema")) == dict(sent)


async def test_an_output_schema_for_a_card_that_cannot_take_one_is_refused_unsent() -> None:
    async with fake_openai([recording("text.sse")]) as fake:
        m = model(fake.base_url)
        with pytest.raises(ModelRequestError, match="structured_output is none"):
            await collect(m.stream([user("hi")], output_schema=SCHEMA))
        await m.aclose()
    assert fake.requests == []


def test_an_assistant_turn_of_tool_calls_alone_has_empty_string_content() -> None:
    # llama-cpp-python's server refuses "content": null with an HTTP 500 (issue 32).
    [call, _] = to_openai_messages(
        [
            assistant(
                [
                    ToolCallBlock(id="c1", name="notes.add", input='{"text":"x"}'),
                    ToolResultBlock(
                        id="c1", name="notes.add", output="ok", state=ToolResultState.SUCCESS
                    ),
                ]
            )
        ]
    )
    assert call["content"] == ""
    assert call["tool_calls"][0]["function"] == {"name": "notes__add", "arguments": '{"text":"x"}'}


@pytest.mark.parametrize(
    ("raw", "sent"),
    [
        ("", "{}"),
        ("  ", "{}"),
        ('{"city": "Paris"}', '{"city": "Paris"}'),
        ('{"city": "Par', '{"invalid_arguments": "{\\"city\\": \\"Par"}'),
        ("[1, 2]", '{"invalid_arguments": "[1, 2]"}'),
        ("北京", '{"invalid_arguments": "北京"}'),
    ],
)
def test_tool_call_arguments_go_back_as_a_json_object(raw: str, sent: str) -> None:
    # Chat templates (llama.cpp's, vLLM's, Ollama's) parse the arguments as a JSON object.
    [msg] = to_openai_messages([assistant([ToolCallBlock(id="c1", name="f", input=raw)])])
    arguments = msg["tool_calls"][0]["function"]["arguments"]
    assert arguments == sent
    assert isinstance(json.loads(arguments), dict)
