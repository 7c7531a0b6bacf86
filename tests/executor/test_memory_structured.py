"""Structured memory extraction (a card's memory_extraction: structured): the memory agent
asks for one JSON document instead of offering tools, runs its memories and forgets as the
memory tool calls they stand for, and moves the watermark only past what it used."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from services.executor.agents.base import StepRequest
from services.executor.agents.memory import MemoryAgent
from services.executor.events import StepResult, ToolCallStart, ToolDenied, TurnUsage
from services.executor.memory_tools import (
    EXTRACTION_SCHEMA,
    GRAMMAR_EXTRACTION_SCHEMA,
    MAX_EXTRACTED_CHARS,
    MAX_EXTRACTED_ITEMS,
    parse_extraction,
)
from services.executor.tools import ToolContext, ToolRegistry
from shared.errors import FailedPrecondition
from shared.messages import Msg, TextBlock, ToolCallState, Usage, user
from shared.model.base import ChatResponse, OutputSchema, ToolSpec
from shared.model.cards import load_card
from shared.model.scripted import MEMORY_EXTRACTION, ScriptedModel
from tests.executor.test_memory_output import Marks, memory_step

STRUCTURED = load_card("scripted-structured")


class Tool:
    def __init__(self, name: str, argument: str, answer: str = "done") -> None:
        self.name = name
        self.argument = argument
        self.answer = answer
        self.description = name
        self.parameters: Mapping[str, Any] = {"type": "object", "properties": {}}
        self.got: list[str] = []

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        self.got.append(str(arguments[self.argument]))
        return self.answer


class Answers:
    """A model that answers `text` (in pieces) and records what it was asked."""

    name = "answers"

    def __init__(self, text: str, finished_reason: str = "stop") -> None:
        self.card = STRUCTURED
        self.text = text
        self.finished_reason = finished_reason
        self.asked: list[tuple[list[str], OutputSchema | None]] = []
        self.messages: list[list[Msg]] = []
        self.options: list[dict[str, Any]] = []

    async def stream(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec] = (),
        options: Mapping[str, Any] | None = None,
        output_schema: OutputSchema | None = None,
    ) -> AsyncIterator[ChatResponse]:
        self.asked.append(([t.name for t in tools], output_schema))
        self.messages.append(list(messages))
        self.options.append(dict(options or {}))
        for i in range(0, len(self.text), 7):
            yield ChatResponse(content=(TextBlock(self.text[i : i + 7]),))
        yield ChatResponse(is_last=True, finished_reason=self.finished_reason, usage=Usage(9, 4))


def step(*said: str, declared: tuple[str, ...] = ("memory_write", "memory_forget")) -> StepRequest:
    context = tuple(
        user(text, id=f"m{i}", thread_id="chat-1", position=i + 1) for i, text in enumerate(said)
    )
    return replace(memory_step(), context=context, tools=declared)


async def run(model: Any, request: StepRequest) -> tuple[Marks, Tool, Tool, list[Any]]:
    marks = Marks()
    write = Tool("memory_write", "content")
    # What MemoryForget answers when it removed one memory (its count makes the summary's).
    forget = Tool("memory_forget", "content_query", "forgot 1 memory; mem-1: User dislikes rain")
    agent = MemoryAgent(
        model, ToolRegistry((write, forget)), marks, max_tool_rounds=2, tool_timeout_seconds=5
    )
    items = [item async for item in agent.run(request)]
    return marks, write, forget, items


async def test_the_scripted_model_s_document_is_saved_through_the_memory_tools() -> None:
    model = ScriptedModel(card=STRUCTURED)
    marks, write, forget, items = await run(
        model, step("I love green tea and my name is Lin", "forget that I hate rain")
    )
    assert write.got == ["User likes green tea", "User's name is Lin"]
    assert forget.got == ["User dislikes rain"]
    assert marks.advanced == 1 and isinstance(items[-1], StepResult)
    # The calls are streamed and stored as tool calls, as if the model had made them.
    starts = [e.name for e in items if isinstance(e, ToolCallStart)]
    assert starts == ["memory_forget", "memory_write", "memory_write"]
    [turn] = [m for m in items if isinstance(m, Msg) and m.tool_calls]
    assert [c.name for c in turn.tool_calls] == starts
    assert all(c.state is ToolCallState.FINISHED for c in turn.tool_calls)
    results = [m for m in items if isinstance(m, Msg) and m.tool_results]
    assert [r.state.value for m in results for r in m.tool_results] == ["success"] * 3
    assert "Saved 2 memories, forgot 1." in "".join(m.text for m in items if isinstance(m, Msg))


async def test_no_tools_are_offered_and_the_schema_is_asked_for() -> None:
    model = Answers('{"memories": [], "forget": []}')
    marks, write, forget, _ = await run(model, step("What time is it?"))
    [(offered, schema)] = model.asked
    assert offered == [] and schema is not None and schema.name == MEMORY_EXTRACTION
    assert schema.schema == EXTRACTION_SCHEMA
    assert schema.grammar_schema == GRAMMAR_EXTRACTION_SCHEMA
    # An empty document is an answer: nothing to save, those messages are processed.
    assert marks.advanced == 1 and write.got == [] and forget.got == []


@pytest.mark.parametrize(
    ("answer", "finished", "why"),
    [
        ("Sure! Green tea is lovely.", "stop", "not the JSON document asked for (not JSON)"),
        ('{"memories": [{"content": "User likes', "length", "cut at the output limit"),
        ('{"memories": [{"content": "x", "kind": "fact"}]}', "stop", "forget: missing"),
        ('{"memories": "green tea", "forget": []}', "stop", "memories: list_type"),
    ],
    ids=["prose", "cut-short", "missing-list", "wrong-shape"],
)
async def test_an_answer_that_is_not_the_document_fails_and_leaves_the_watermark(
    answer: str, finished: str, why: str
) -> None:
    marks = Marks()
    write = Tool("memory_write", "content")
    agent = MemoryAgent(
        Answers(answer, finished),
        ToolRegistry((write,)),
        marks,
        max_tool_rounds=2,
        tool_timeout_seconds=5,
    )
    with pytest.raises(FailedPrecondition) as err:
        [item async for item in agent.run(step("I love green tea"))]
    assert marks.advanced == 0 and write.got == []
    assert err.value.reason == "MEMORY_OUTPUT_UNUSABLE"
    assert why in err.value.message and "watermark did not move" in err.value.message
    assert "green tea" not in err.value.message  # never the model's output itself


async def test_memories_none_of_which_could_be_saved_fail_the_step() -> None:
    # The job declared only memory_forget: every write is refused by the tool policy.
    model = Answers(
        '{"memories": [{"content": "User likes tea", "kind": "preference"}], "forget": []}'
    )
    request = step("I love tea", declared=("memory_forget",))
    marks = Marks()
    write, forget = Tool("memory_write", "content"), Tool("memory_forget", "content_query")
    agent = MemoryAgent(
        model, ToolRegistry((write, forget)), marks, max_tool_rounds=2, tool_timeout_seconds=5
    )
    items: list[Any] = []
    with pytest.raises(FailedPrecondition, match="none of the memories it gave could be saved"):
        async for item in agent.run(request):
            items.append(item)
    assert marks.advanced == 0 and write.got == []
    # The refusal is audited as any refused tool call is.
    assert [(i.tool_name, i.reason) for i in items if isinstance(i, ToolDenied)] == [
        ("memory_write", "not_declared")
    ]


def test_the_document_s_calls_forget_before_they_save() -> None:
    # A raw newline inside a string (llama-cpp-python's grammar lets one through) is text.
    document = parse_extraction(
        json.dumps(
            {
                "memories": [{"content": "User likes tea", "kind": "preference"}],
                "forget": [{"memory": "User likes coffee", "user_request": "forget  my coffee"}],
            }
        ).replace("User likes tea", "User likes\ntea")
    )
    calls, unasked = document.calls(["I like tea now. Please FORGET my coffee!"])
    assert [name for name, _ in calls] == ["memory_forget", "memory_write"] and unasked == 0
    assert json.loads(calls[1][1])["content"] == "User likes\ntea"


async def test_a_forget_no_message_of_the_user_asks_for_is_never_run() -> None:
    # What small models do: fill "forget" though nobody asked; a forget destroys memories.
    document = {
        "memories": [{"content": "The user likes green", "kind": "preference"}],
        "forget": [
            {"memory": "green", "user_request": "the user forgot that"},
            {"memory": "green", "user_request": ""},
        ],
    }
    marks, write, forget, items = await run(
        Answers(json.dumps(document)), step("My favourite colour is green.")
    )
    assert write.got == ["The user likes green"] and forget.got == []
    assert marks.advanced == 1
    summary = "".join(m.text for m in items if isinstance(m, Msg))
    assert "Saved 1 memory, forgot 0. Ignored 2 forget request(s)" in summary


async def test_the_turn_says_its_input_as_it_starts_so_a_cut_turn_still_counts() -> None:
    """Before the model call, the step reports the turn's counted input (TurnUsage): a cancel
    or a broken stream that cuts the turn leaves the orchestrator that to record."""
    _, _, _, items = await run(ScriptedModel(card=STRUCTURED), step("I love green tea"))
    first = items[0]
    assert isinstance(first, TurnUsage)
    assert first.usage.input_tokens > 0 and first.usage.output_tokens == 0
    assert first.usage.estimated


def test_the_grammar_schema_bounds_every_free_string_and_list_and_nothing_else() -> None:
    """What a grammar-constrained server is given: the strict schema's document with each
    memory, forget and list bounded, so a rambling small model still closes it."""
    grammar = GRAMMAR_EXTRACTION_SCHEMA["properties"]
    memory = grammar["memories"]["items"]["properties"]
    forget = grammar["forget"]["items"]["properties"]
    assert grammar["memories"]["maxItems"] == grammar["forget"]["maxItems"] == MAX_EXTRACTED_ITEMS
    assert memory["content"]["maxLength"] == MAX_EXTRACTED_CHARS
    assert forget["memory"]["maxLength"] == forget["user_request"]["maxLength"]
    assert "maxLength" not in memory["kind"]  # an enum is bounded already
    # The strict schema is untouched (OpenAI's strict mode refuses length keywords).
    assert "maxLength" not in str(EXTRACTION_SCHEMA) and "maxItems" not in str(EXTRACTION_SCHEMA)
    # A document at the bounds is still one the parser takes.
    at_bounds = {
        "memories": [{"content": "x" * MAX_EXTRACTED_CHARS, "kind": "fact"}] * MAX_EXTRACTED_ITEMS,
        "forget": [],
    }
    assert len(parse_extraction(json.dumps(at_bounds)).memories) == MAX_EXTRACTED_ITEMS
