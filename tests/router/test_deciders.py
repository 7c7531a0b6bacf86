"""The model decider asks its model only when there is something to decide, and then
within bounds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from services.router.core import RouteInput
from services.router.deciders import MODEL_CONTEXT_MESSAGES, MODEL_MAX_TOKENS, ModelDecider
from shared.messages import Msg, TextBlock, Usage, user
from shared.model.base import ChatResponse, ModelError, ModelUnavailable, OutputSchema, ToolSpec
from shared.model.cards import load_card
from shared.profiles import CHAT_DEFAULT


class CountingModel:
    name = "counting"

    def __init__(
        self,
        answer: str = '{"tools": ["web_search"]}',
        *,
        fail: bool = False,
        stall: float = 0,
        error: Exception | None = None,
    ) -> None:
        self.card = load_card("smollm2-local")
        self.answer, self.fail, self.stall = answer, fail, stall
        self.error = error or ModelUnavailable("model counting: cannot reach it")
        self.usage: Usage | None = None  # what the endpoint reports (None: nothing)
        self.calls: list[tuple[list[Msg], Mapping[str, Any] | None]] = []

    async def stream(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec] = (),
        options: Mapping[str, Any] | None = None,
        output_schema: OutputSchema | None = None,
    ) -> AsyncIterator[ChatResponse]:
        self.calls.append((list(messages), options))
        if self.stall:
            await asyncio.sleep(self.stall)
        if self.fail:
            raise self.error
        yield ChatResponse(content=(TextBlock(self.answer),))
        yield ChatResponse(is_last=True, finished_reason="stop", usage=self.usage)


def request(text: str, tools: tuple[str, ...]) -> RouteInput:
    return RouteInput(profile=CHAT_DEFAULT, input_text=text, tools=tools)


async def test_one_tool_or_none_is_decided_without_the_model() -> None:
    model = CountingModel()
    decider = ModelDecider(model, timeout_seconds=1)
    assert (await decider.decide(request("hi", ()), [user("hi")])).tool_names == ()
    assert (await decider.decide(request("hi", ("memory_search",)), [user("hi")])).tool_names == (
        "memory_search",
    )
    named = await decider.decide(
        request("use web search", ("memory_search", "web_search")), [user("x")]
    )
    assert named.tool_names == ("web_search",)
    assert model.calls == []


async def test_a_real_choice_asks_the_model_with_a_bounded_call() -> None:
    model = CountingModel()
    conversation = [user(f"message {i}") for i in range(20)]
    route = await ModelDecider(model, timeout_seconds=1).decide(
        request("hi", ("memory_search", "web_search")), conversation
    )
    assert route.tool_names == ("web_search",)
    [(prompt, options)] = model.calls
    assert len(prompt) == 1 + MODEL_CONTEXT_MESSAGES and prompt[-1].text == "message 19"
    assert options == {"max_tokens": MODEL_MAX_TOKENS}


async def test_a_failing_or_late_model_falls_back_to_the_rule() -> None:
    tools = ("memory_search", "web_search")
    for model in (CountingModel(fail=True), CountingModel(stall=5)):
        route = await ModelDecider(model, timeout_seconds=0.2).decide(
            request("hi", tools), [user("hi")]
        )
        assert route.tool_names == tools and len(model.calls) == 1
        assert route.usage is None  # no answer: nothing known to count


async def test_a_model_error_of_a_kind_of_its_own_falls_back_to_the_rule_too() -> None:
    # A provider may raise ModelError itself, not one of its DomainError kinds: the fallback
    # logs its reason all the same (it used to fail the route with an AttributeError).
    tools = ("memory_search", "web_search")
    model = CountingModel(fail=True, error=ModelError("model counting: its own failure"))
    route = await ModelDecider(model, timeout_seconds=1).decide(request("hi", tools), [user("hi")])
    assert route.tool_names == tools and len(model.calls) == 1


async def test_the_models_answer_carries_the_calls_usage_reported_or_estimated() -> None:
    tools = ("memory_search", "web_search")
    estimating = CountingModel()
    estimated = await ModelDecider(estimating, timeout_seconds=1).decide(
        request("hi", tools), [user("hi")]
    )
    assert estimated.usage is not None and estimated.usage.estimated
    assert estimated.usage.input_tokens > 0 and estimated.usage.output_tokens > 0
    reporting = CountingModel()
    reporting.usage = Usage(40, 7)
    reported = await ModelDecider(reporting, timeout_seconds=1).decide(
        request("hi", tools), [user("hi")]
    )
    assert reported.usage == Usage(40, 7)
    # An answer that is no route still cost its tokens; the rule decides.
    prose = await ModelDecider(CountingModel("no idea"), timeout_seconds=1).decide(
        request("hi", tools), [user("hi")]
    )
    assert prose.tool_names == tools and prose.usage is not None
    # No choice: no model call, no usage.
    ruled = await ModelDecider(CountingModel(), timeout_seconds=1).decide(
        request("hi", ("memory_search",)), [user("hi")]
    )
    assert ruled.usage is None
