"""The provider conformance set (tests/model/conformance/): each provider's streams, usage
chunks and error bodies as its documentation (or its source, or a recording of the bundled
server) shows them, replayed by the fake server, parsed the way a run relies on; and the
request the builder sends back after tool calls checked against each provider's rules by
a stub that refuses a breaking request the way that provider does.

Each transcript names its sources and says how faithful it is (verbatim, shape only, or
recorded here)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from shared.messages import (
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolResultState,
    Usage,
    assistant,
    user,
)
from shared.model.base import ModelError, ToolSpec
from shared.model.cards import load_card
from shared.model.merge import collect
from tests.model.fake_openai import Reply, Request, error, events, fake_openai, recording
from tests.model.test_openai import model

CONFORMANCE = Path(__file__).parent / "conformance"
RULES = json.loads((CONFORMANCE / "rules.json").read_text(encoding="utf-8"))["providers"]
TRANSCRIPTS = sorted(p.stem for p in CONFORMANCE.glob("*.json") if p.stem != "rules")
# OpenAI's rule for a function name, which the others follow.
FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def transcript(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFORMANCE / f"{name}.json").read_text(encoding="utf-8"))
    return data


def answer(spec: dict[str, Any]) -> Reply:
    """The fake's reply for a transcript's response (or probe) section."""
    if "raw" in spec:
        return Reply(
            status=spec["status"],
            body=spec["raw"].encode(),
            headers={"Content-Type": "text/event-stream"},
        )
    if "events" in spec:
        return events(*spec["events"], done=spec.get("done", True))
    body = json.dumps(spec["body"], ensure_ascii=False).encode()
    return Reply(status=spec["status"], body=body, headers={"Content-Type": "application/json"})


def test_every_transcript_names_its_sources_and_fidelity() -> None:
    assert len(TRANSCRIPTS) >= 15
    providers = {transcript(n)["provider"] for n in TRANSCRIPTS}
    assert {"openai", "vllm", "llama.cpp", "llama-cpp-python", "ollama", "dashscope"} <= providers
    for name in TRANSCRIPTS:
        data = transcript(name)
        assert data["sources"] and all(s.startswith("https://") for s in data["sources"]), name
        assert data["documented"] and data["fidelity"] and data["expect"], name


@pytest.mark.parametrize("name", TRANSCRIPTS)
async def test_a_providers_documented_answer_is_parsed_as_a_run_relies_on(name: str) -> None:
    data = transcript(name)
    expect = data["expect"]
    replies = [answer(data["response"])]
    if "probe" in data:
        replies.append(answer(data["probe"]))
    tools = [ToolSpec(call[1]) for call in expect.get("tool_calls", [])]
    async with fake_openai(replies) as fake:
        m = model(fake.base_url, max_retries=1)
        if "error" in expect:
            with pytest.raises(ModelError) as err:
                await collect(m.stream([user("hi")], tools=tools))
            assert err.value.reason == expect["error"], err.value.message
            assert len(fake.requests) == expect["requests"]
        else:
            msg = await collect(m.stream([user("hi")], tools=tools))
        await m.aclose()
    if "error" in expect:
        return
    text = "".join(b.text for b in msg.content if isinstance(b, TextBlock))
    thinking = "".join(b.thinking for b in msg.content if isinstance(b, ThinkingBlock))
    assert text == expect.get("text", "")
    assert thinking == expect.get("thinking", "")
    calls = [[c.id, c.name, c.arguments()] for c in msg.tool_calls]
    assert calls == expect.get("tool_calls", [])
    assert msg.finished_reason == expect["finished_reason"]
    if "usage" in expect:
        assert msg.usage == Usage(*expect["usage"])


# A thread after three tool calls: one with arguments, one the model wrote as broken JSON,
# one with none; each answered; then the next question.
HISTORY: list[Msg] = [
    user("What is the weather in Paris, and note it."),
    assistant(
        [
            ToolCallBlock(id="call_1", name="weather.get", input='{"city": "Paris"}'),
            ToolResultBlock(
                id="call_1", name="weather.get", output="18C", state=ToolResultState.SUCCESS
            ),
        ]
    ),
    assistant(
        [
            TextBlock("Noting it."),
            ToolCallBlock(id="call_2", name="notes.add", input='{"text": "18C'),
            ToolResultBlock(
                id="call_2",
                name="notes.add",
                output="error: the arguments are not valid JSON",
                state=ToolResultState.ERROR,
            ),
            ToolCallBlock(id="call_3", name="notes.list", input=""),
            ToolResultBlock(
                id="call_3", name="notes.list", output="[]", state=ToolResultState.SUCCESS
            ),
        ]
    ),
    assistant([TextBlock("It is 18C in Paris.")]),
    user("And tomorrow?"),
]
TOOLS = [ToolSpec("weather.get"), ToolSpec("notes.add"), ToolSpec("notes.list")]


def broken_rule(rules: dict[str, Any], request: Request) -> str:
    """Which of the provider's documented rules the request breaks ("" when none)."""
    kinds = {"string": str, "null": type(None)}
    allowed = tuple(kinds[k] for k in rules["assistant_content"])
    for i, message in enumerate(request.body.get("messages", [])):
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        if not isinstance(message.get("content"), allowed):
            return f"messages[{i}].content: must be {' or '.join(rules['assistant_content'])}"
        for call in message["tool_calls"]:
            arguments = call["function"]["arguments"]
            if not isinstance(arguments, str):
                return f"messages[{i}] tool call {call['id']}: arguments must be a JSON string"
            if rules["arguments"] == "json_object":
                try:
                    parsed = json.loads(arguments)
                except ValueError:
                    parsed = None
                if not isinstance(parsed, dict):
                    return f"messages[{i}] tool call {call['id']}: arguments must be a JSON object"
    for tool in request.body.get("tools", []):
        if not FUNCTION_NAME.match(tool["function"]["name"]):
            return f"tools: {tool['function']['name']!r} is not a function name"
    sent = sorted(set(request.body) & set(rules["unsupported_parameters"]))
    return f"{sent[0]}: not supported" if sent else ""


def refusal(rules: dict[str, Any], problem: str) -> Reply:
    """How the provider refuses a request it does not take (its documented answer when the
    set has one, else a plain 500 naming the rule)."""
    spec = rules.get("refusal")
    if isinstance(spec, str):
        return answer(transcript(spec)["response"])
    if isinstance(spec, dict):
        return answer(spec)
    return error(500, f"conformance stub: {problem}")


@pytest.mark.parametrize("provider", sorted(RULES))
async def test_the_request_after_tool_calls_is_one_each_provider_accepts(provider: str) -> None:
    rules = RULES[provider]
    broken: list[str] = []

    def judge(request: Request) -> Reply | None:
        problem = broken_rule(rules, request)
        if problem:
            broken.append(problem)
            return refusal(rules, problem)
        return None

    async with fake_openai([recording("text.sse")], judge=judge) as fake:
        m = model(fake.base_url, max_retries=0)
        msg = await collect(m.stream(HISTORY, tools=TOOLS))
        await m.aclose()
    assert broken == [] and msg.text == "Hello! How can I help?"
    [request] = fake.requests
    calls = [c for mm in request.body["messages"] for c in mm.get("tool_calls", [])]
    assert [c["function"]["name"] for c in calls] == ["weather__get", "notes__add", "notes__list"]


@pytest.mark.parametrize("provider", sorted(RULES))
def test_a_providers_cards_offer_no_parameter_it_does_not_take(provider: str) -> None:
    rules = RULES[provider]
    for card_name in rules["cards"]:
        offered = set(load_card(card_name).parameter_properties)
        assert not offered & set(rules["unsupported_parameters"]), card_name
