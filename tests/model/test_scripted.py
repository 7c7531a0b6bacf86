"""The offline scripted model: replies, routing, tool calls and memory extraction."""

from __future__ import annotations

import json
import time

import pytest

from shared.messages import (
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolResultState,
    assistant,
    system,
    user,
)
from shared.model.base import ChatResponse, ToolSpec
from shared.model.cards import load_card
from shared.model.merge import collect
from shared.model.scripted import (
    MEMORY_PROMPT,
    ROUTER_PROMPT,
    ScriptedModel,
    extract_facts,
    route,
)

MEMORY_TOOLS = (ToolSpec("memory_write"), ToolSpec("memory_forget"))


async def chunks(model: ScriptedModel, messages: list[Msg], **kw: object) -> list[ChatResponse]:
    # Keyword options of the test's choosing.
    return [c async for c in model.stream(messages, **kw)]  # type: ignore[arg-type]


async def reply(messages: list[Msg], **kw: object) -> Msg:
    # Keyword options of the test's choosing.
    return await collect(ScriptedModel().stream(messages, **kw))  # type: ignore[arg-type]


async def test_reply_streams_word_by_word_and_ends_with_usage() -> None:
    out = await chunks(ScriptedModel(), [user("hello there")])
    # The first block of these chunks is text.
    texts = [c.content[0].text for c in out[:-1]]  # type: ignore[union-attr]
    assert "".join(texts) == 'You said: "hello there". This is turn 1 of our conversation.'
    assert len(texts) > 5
    assert out[-1].is_last and out[-1].finished_reason == "stop"
    assert out[-1].usage is not None and out[-1].usage.output_tokens == len(texts)


async def test_same_conversation_gives_the_same_chunks() -> None:
    convo = [user('use the search tool with {"q": "tea"}', id="u1")]
    assert await chunks(ScriptedModel(), convo, tools=[ToolSpec("search")]) == await chunks(
        ScriptedModel(), convo, tools=[ToolSpec("search")]
    )


async def test_token_latency_is_simulated_per_token() -> None:
    start = time.perf_counter()
    out = await chunks(ScriptedModel(token_latency=0.01), [user("a b c")])
    assert time.perf_counter() - start >= 0.01 * (len(out) - 1)


async def test_the_first_token_waits_the_time_to_first_token_and_the_rest_the_time_per_token() -> (
    None
):
    model = ScriptedModel(token_latency=0.001, first_token_latency=0.2)
    start = time.perf_counter()
    stream = model.stream([user("a b c")])
    await anext(stream)
    assert time.perf_counter() - start >= 0.2
    # A call's option overrides the process's (the card's parameter).
    model = ScriptedModel(card=load_card("scripted"), first_token_latency=5)
    start = time.perf_counter()
    out = await chunks(model, [user("a b c")], options={"first_token_latency": 0.05})
    assert 0.05 <= time.perf_counter() - start < 5
    assert len(out) > 3


async def test_thinking_option_streams_reasoning_before_the_text() -> None:
    model = ScriptedModel(card=load_card("scripted"))
    msg = await collect(model.stream([user("hi")], options={"thinking": True}))
    assert isinstance(msg.content[0], ThinkingBlock) and isinstance(msg.content[1], TextBlock)


async def test_max_tokens_cuts_the_reply_with_finished_reason_length() -> None:
    model = ScriptedModel(card=load_card("scripted"))
    msg = await collect(model.stream([user("hello there friend")], options={"max_tokens": 3}))
    assert msg.text == 'You said: "hello '
    assert msg.finished_reason == "length"


async def test_unknown_option_is_refused_by_the_card() -> None:
    model = ScriptedModel(card=load_card("scripted"))
    with pytest.raises(ValueError, match=r"options\.temperature: not a parameter"):
        await chunks(model, [user("hi")], options={"temperature": 1})


async def test_tool_request_becomes_a_tool_call_split_mid_json() -> None:
    out = await chunks(
        ScriptedModel(), [user('please use the search tool with {"query": "green tea"}')]
    )
    fragments = [c.content[0] for c in out if c.content]
    assert all(isinstance(f, ToolCallBlock) for f in fragments)
    # The first fragment here is a tool call.
    assert fragments[0].name == "search" and fragments[0].input == ""  # type: ignore[union-attr]
    assert len(fragments) > 3
    assert out[-1].finished_reason == "tool_calls"
    msg = await reply([user('please use the search tool with {"query": "green tea"}')])
    [call] = msg.tool_calls
    assert call.arguments() == {"query": "green tea"}


async def test_several_tool_requests_in_english_and_chinese() -> None:
    msg = await reply([user('call the clock tool, then 调用weather工具 {"city": "上海"}')])
    assert [(c.name, c.arguments()) for c in msg.tool_calls] == [
        ("clock", {}),
        ("weather", {"city": "上海"}),
    ]
    assert len({c.id for c in msg.tool_calls}) == 2


async def test_malformed_json_request_is_passed_through_raw() -> None:
    msg = await reply([user("use the search tool with {query: tea")])
    assert msg.tool_calls[0].input == "{query: tea"


async def test_after_tool_results_it_summarises_instead_of_calling_again() -> None:
    ask = user('use the search tool with {"q": "tea"}')
    first = await reply([ask])
    [call] = first.tool_calls
    result = assistant(
        [ToolResultBlock(id=call.id, name="search", output="3 teas", state=ToolResultState.SUCCESS)]
    )
    second = await reply([ask, first, result])
    assert second.tool_calls == []
    assert second.text == "The search tool returned: 3 teas."


async def test_router_prompt_makes_the_reply_a_route_json() -> None:
    msg = await reply(
        [system(ROUTER_PROMPT), user("use the search tool for tea")],
        tools=[ToolSpec("search"), ToolSpec("clock")],
    )
    assert json.loads(msg.text) == {
        "executor": "worker",
        "tools": ["search"],
        "reason": "the user asks for search",
    }


def test_route_picks_memory_for_remember_and_forget_requests() -> None:
    assert route("please remember that I like tea").executor == "memory"
    assert route("忘记我喜欢绿茶").executor == "memory"
    assert route("what does the clock say", ["clock", "search"]).tools == ("clock",)


async def test_memory_prompt_with_memory_tools_writes_each_fact() -> None:
    msg = await reply(
        [system(MEMORY_PROMPT), user("I love green tea and my name is Lin"), assistant("ok")],
        tools=MEMORY_TOOLS,
    )
    assert [(c.name, c.arguments()) for c in msg.tool_calls] == [
        ("memory_write", {"content": "User likes green tea", "kind": "preference"}),
        ("memory_write", {"content": "User's name is Lin", "kind": "name"}),
    ]


async def test_memory_prompt_turns_forget_into_memory_forget_matching_the_written_content() -> None:
    msg = await reply([system(MEMORY_PROMPT), user("忘记我喜欢绿茶")], tools=MEMORY_TOOLS)
    assert [(c.name, c.arguments()) for c in msg.tool_calls] == [
        ("memory_forget", {"content_query": "用户喜欢绿茶"})
    ]


async def test_memory_prompt_without_facts_replies_without_tools() -> None:
    msg = await reply([system(MEMORY_PROMPT), user("what's the weather?")], tools=MEMORY_TOOLS)
    assert (msg.tool_calls, msg.text) == ([], "NO_MEMORIES: no durable facts found.")


async def test_memory_prompt_summarises_after_the_results() -> None:
    convo = [system(MEMORY_PROMPT), user("I love tea")]
    first = await reply(convo, tools=MEMORY_TOOLS)
    done = assistant(
        [
            ToolResultBlock(
                id=first.tool_calls[0].id,
                name="memory_write",
                output="ok",
                state=ToolResultState.SUCCESS,
            )
        ]
    )
    second = await reply([*convo, first, done], tools=MEMORY_TOOLS)
    assert second.text == "Saved 1 memory, forgot 0."


async def test_memory_facts_without_the_memory_prompt_are_just_a_reply() -> None:
    msg = await reply([user("I love green tea")], tools=MEMORY_TOOLS)
    assert msg.tool_calls == [] and msg.text.startswith("You said")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I love green tea", [("preference", "User likes green tea")]),
        ("I prefer window seats.", [("preference", "User likes window seats")]),
        ("I really enjoy hiking a lot!", [("preference", "User likes hiking")]),
        ("I hate cilantro", [("dislike", "User dislikes cilantro")]),
        ("I don't like mushrooms", [("dislike", "User dislikes mushrooms")]),
        ("My name is Lin Wei, by the way", [("name", "User's name is Lin Wei")]),
        ("I live in Shanghai", [("place", "User lives in Shanghai")]),
        ("forget that I love green tea", [("forget", "User likes green tea")]),
        ("Please forget my old address", [("forget", "my old address")]),
        ("我喜欢绿茶", [("preference", "用户喜欢绿茶")]),
        ("我不喜欢香菜", [("dislike", "用户不喜欢香菜")]),
        ("我讨厌下雨天。", [("dislike", "用户不喜欢下雨天")]),
        ("我叫林，我住在上海", [("name", "用户叫林"), ("place", "用户住在上海")]),
        ("忘记我喜欢绿茶", [("forget", "用户喜欢绿茶")]),
        (
            "I love tea and I live in Paris",
            [("preference", "User likes tea"), ("place", "User lives in Paris")],
        ),
        ("Do I like tea?", []),
        ("你喜欢什么？", []),
        ("I would like a coffee", []),
        ("The weather is nice", []),
    ],
)
def test_extract_facts(text: str, expected: list[tuple[str, str]]) -> None:
    assert [(f.kind, f.content) for f in extract_facts(text)] == expected
