"""Namespaced tool names (`<server>.<tool>`) through an OpenAI-compatible endpoint, which
accepts no dot in a function name: sent as `<server>__<tool>`, mapped back in the answer."""

from __future__ import annotations

from shared.messages import ToolCallBlock, ToolResultBlock, assistant, user
from shared.model.base import ToolSpec
from shared.model.merge import collect
from shared.model.openai import OpenAIChatModel
from tests.model.fake_openai import events, fake_openai
from tests.model.test_openai import SECRET, card


def call_chunk(name: str) -> dict[str, object]:
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": name, "arguments": "{}"},
    }
    return {
        "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]
    }


async def test_namespaced_names_go_out_without_dots_and_come_back_namespaced() -> None:
    history = [
        user("note it"),
        assistant([ToolCallBlock("c0", "notes.add_note", "{}")]),
        assistant([ToolResultBlock("c0", "notes.add_note", "saved")]),
        user("and list them"),
    ]
    async with fake_openai([events(call_chunk("notes__list_notes"))]) as fake:
        m = OpenAIChatModel(card(fake.base_url), api_key=SECRET, backoff_seconds=0.01)
        msg = await collect(
            m.stream(history, tools=[ToolSpec("notes.list_notes"), ToolSpec("memory_search")])
        )
        await m.aclose()
    [request] = fake.requests
    sent = [t["function"]["name"] for t in request.body["tools"]]
    assert sent == ["notes__list_notes", "memory_search"]
    [earlier] = [m for m in request.body["messages"] if m.get("tool_calls")]
    assert earlier["tool_calls"][0]["function"]["name"] == "notes__add_note"
    assert [c.name for c in msg.tool_calls] == ["notes.list_notes"]
