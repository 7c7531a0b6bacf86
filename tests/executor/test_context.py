"""The context budget: what of a thread a model call carries, from the model's card."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from services.executor import context
from services.executor.agents.worker import WorkerAgent
from services.executor.events import StepResult
from services.executor.tools import ToolRegistry
from shared.domain import MessageKind
from shared.messages import (
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolResultState,
    Usage,
    assistant,
    system,
    user,
)
from shared.model.base import ChatResponse, ModelContextOverflow, ToolSpec
from shared.model.cards import ModelCard
from shared.model.tokens import message_tokens, messages_tokens, text_tokens
from tests.executor.test_worker import run, step


def card(context_size: int = 2048, max_tokens: int | None = 200) -> ModelCard:
    parameters = {"max_tokens": {"default": max_tokens}} if max_tokens else {}
    return ModelCard.model_validate(
        {
            "name": "small",
            "provider": "openai",
            "model": "small",
            "base_url": "http://127.0.0.1:1/v1",
            "context_size": context_size,
            "output_size": 512,
            "parameters": parameters,
        }
    )


def said(n: int, words: int = 60) -> Msg:
    return user(f"message {n} " + "lorem ipsum " * words, id=f"u{n}")


def tool_round(n: int) -> list[Msg]:
    call = assistant(
        [ToolCallBlock(f"c{n}", "echo", '{"text":"x"}')], id=f"a{n}", kind=MessageKind.TOOL_CALL
    )
    result = assistant(
        [ToolResultBlock(f"c{n}", "echo", "echo: x " * 40, ToolResultState.SUCCESS)],
        id=f"r{n}",
        kind=MessageKind.TOOL_RESULT,
    )
    return [call, result]


def test_output_reserve_is_the_cards_max_tokens_default_else_its_output_size() -> None:
    assert context.output_reserve(card(max_tokens=200)) == 200
    assert context.output_reserve(card(max_tokens=None)) == 512
    assert context.input_budget(card(2048, 200)) == 1848


def test_a_thread_that_fits_goes_whole() -> None:
    history = [said(1), assistant("ok", id="a1"), said(2)]
    fitted = context.fit(history, [said(3)], (), 10_000)
    assert [m.id for m in fitted.messages] == ["u1", "a1", "u2", "u3"] and fitted.dropped == 0
    assert fitted.input_tokens == messages_tokens(fitted.messages)


def test_the_oldest_messages_go_first_and_what_is_sent_fits_the_budget() -> None:
    history = [said(i) for i in range(40)]
    budget = 600
    fitted = context.fit(history, [said(99)], (), budget)
    ids = [m.id for m in fitted.messages]
    assert ids[-1] == "u99" and 0 < fitted.dropped < 40
    kept = [int(i[1:]) for i in ids[:-1]]
    assert kept == list(range(40 - len(kept), 40))  # a newest-first suffix, in order
    assert messages_tokens(fitted.messages) <= budget


def test_system_prompt_and_the_step_input_are_always_kept() -> None:
    history = [system("You are terse."), *[said(i) for i in range(30)]]
    fitted = context.fit(history, [said(99)], (), 300)
    assert fitted.messages[0].text == "You are terse." and fitted.messages[-1].id == "u99"


def test_a_tool_call_is_never_split_from_its_result() -> None:
    history = [said(0), *tool_round(1), said(2), *tool_round(3), said(4)]
    for budget in range(50, messages_tokens(history) + 100, 7):
        fitted = context.fit(history, [said(9)], (), budget)
        ids = [m.id for m in fitted.messages]
        for n in (1, 3):
            assert (f"a{n}" in ids) == (f"r{n}" in ids), (budget, ids)
        assert ids[0] not in ("r1", "r3")


def test_offered_tools_count_against_the_budget() -> None:
    history = [said(i) for i in range(20)]
    tools = [ToolSpec("echo", "Echoes " * 50, {"type": "object", "properties": {}})]
    without = context.fit(history, [said(99)], (), 800)
    with_tools = context.fit(history, [said(99)], tools, 800)
    assert len(with_tools.messages) < len(without.messages)


def test_nothing_of_the_thread_fits_and_the_input_still_goes() -> None:
    fitted = context.fit([said(1), said(2)], [said(3)], (), 10)
    assert [m.id for m in fitted.messages] == ["u3"] and fitted.dropped == 2


def test_the_estimate_counts_non_ascii_higher_than_ascii() -> None:
    assert text_tokens("abc" * 10) == 10
    assert text_tokens("你好") == 4
    assert message_tokens(user("")) > 0


# ---- the worker ----------------------------------------------------------------------------


class SmallModel:
    """A model with a card that answers "ok"; refuses the first `overflows` calls as too long
    and reports usage only when `reports_usage`."""

    name = "small"

    def __init__(self, c: ModelCard, *, overflows: int = 0, reports_usage: bool = True) -> None:
        self.card = c
        self.overflows = overflows
        self.reports_usage = reports_usage
        self.seen: list[list[Msg]] = []

    async def stream(
        self, messages: Sequence[Msg], *, tools: Sequence[ToolSpec] = (), options: Any = None
    ) -> AsyncIterator[ChatResponse]:
        self.seen.append(list(messages))
        if self.overflows:
            self.overflows -= 1
            raise ModelContextOverflow("model small: the request does not fit its context window")
        yield ChatResponse(content=(TextBlock("ok"),))
        usage = Usage(17, 1) if self.reports_usage else None
        yield ChatResponse(is_last=True, finished_reason="stop", usage=usage)


def long_step(n: int = 60) -> Any:
    request = step(said="the question")
    history = []
    for i in range(n):
        history += [said(i), assistant(f"answer {i}", id=f"a{i}")]
    return type(request)(**{**request.__dict__, "context": tuple(history)})


async def test_the_worker_sends_what_fits_the_cards_window() -> None:
    model = SmallModel(card(2048, 200))
    items = await run(
        WorkerAgent(model, ToolRegistry(()), max_tool_rounds=2, tool_timeout_seconds=5), long_step()
    )
    [sent] = model.seen
    assert sent[-1].text == "the question" and len(sent) < 121
    assert messages_tokens(sent) <= context.input_budget(model.card)
    assert isinstance(items[-1], StepResult) and items[-1].finished_reason == "stop"


async def test_a_turn_the_endpoint_finds_too_long_is_tried_again_within_half_the_budget() -> None:
    model = SmallModel(card(2048, 200), overflows=1)
    items = await run(
        WorkerAgent(model, ToolRegistry(()), max_tool_rounds=2, tool_timeout_seconds=5), long_step()
    )
    first, second = model.seen
    assert (
        len(second) < len(first)
        and messages_tokens(second) <= context.input_budget(model.card) // 2
    )
    assert isinstance(items[-1], StepResult) and items[-1].finished_reason == "stop"


async def test_usage_is_estimated_when_the_endpoint_reports_none() -> None:
    reported = await run(
        WorkerAgent(
            SmallModel(card()), ToolRegistry(()), max_tool_rounds=2, tool_timeout_seconds=5
        ),
        step(),
    )
    assert reported[-1].usage == Usage(17, 1)
    model = SmallModel(card(), reports_usage=False)
    items = await run(
        WorkerAgent(model, ToolRegistry(()), max_tool_rounds=2, tool_timeout_seconds=5), step()
    )
    usage = items[-1].usage
    assert (
        usage.estimated
        and usage.input_tokens == messages_tokens(model.seen[0])
        and usage.output_tokens == 1
    )
    [reply] = [i for i in items if isinstance(i, Msg)]
    assert reply.usage == usage
