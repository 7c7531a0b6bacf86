"""The one AG-UI projection of a stored message (services.gateway.convert.agui_messages),
which MESSAGES_SNAPSHOT, /history and the audit all use: strict AG-UI messages, no JSON null,
tool results named as their TOOL_CALL_RESULT events were."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ag_ui.core import Message
from hypothesis import given, settings
from pydantic import TypeAdapter

from services.gateway.convert import agui_messages, message_json, stored_messages_within
from shared.domain import MessageKind
from shared.messages import (
    DataBlock,
    HintBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolResultState,
    Usage,
    assistant,
    msg_to_pb,
    system,
    tool_result_message_id,
    user,
)
from tests.shared.test_messages_properties import messages

AGUI_MESSAGE: TypeAdapter[Any] = TypeAdapter(Message)


def _nulls(value: Any, path: str = "") -> list[str]:
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _nulls(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _nulls(v, f"{path}[{i}]")]
    return []


def _project(msg: Msg) -> list[dict[str, Any]]:
    # Through JSON, as a client receives it.
    return json.loads(json.dumps(agui_messages(msg_to_pb(msg))))


@settings(max_examples=150, deadline=None)
@given(messages())
def test_every_projected_message_is_a_strict_agui_message_without_nulls(msg: Msg) -> None:
    for item in _project(msg):
        assert _nulls(item) == []
        AGUI_MESSAGE.validate_python(item)


@settings(max_examples=150, deadline=None)
@given(messages())
def test_tool_results_carry_the_ids_of_their_tool_call_result_events(msg: Msg) -> None:
    projected = _project(msg)
    if msg.tool_results:
        assert [m["id"] for m in projected] == [
            tool_result_message_id(msg.id, i) for i in range(len(msg.tool_results))
        ]
        assert [m["toolCallId"] for m in projected] == [r.id for r in msg.tool_results]
    else:
        assert [m["id"] for m in projected] == [msg.id]


@pytest.mark.parametrize(
    ("state", "error"),
    [
        (ToolResultState.SUCCESS, None),
        (ToolResultState.ERROR, "error: boom"),
        (ToolResultState.DENIED, "error: boom"),
        (ToolResultState.INTERRUPTED, "error: boom"),
    ],
)
def test_a_tool_message_has_an_error_exactly_when_its_call_did_not_succeed(
    state: ToolResultState, error: str | None
) -> None:
    msg = assistant([ToolResultBlock("c1", "memory_write", "error: boom", state)], id="m1")
    [tool] = _project(msg)
    assert tool.get("error") == error
    assert tool["content"] == "error: boom"


def test_a_message_with_several_results_is_one_tool_message_each_named_by_position() -> None:
    msg = assistant(
        [
            ToolResultBlock("c1", "memory_search", "tea", ToolResultState.SUCCESS),
            ToolResultBlock("c2", "memory_search", "coffee", ToolResultState.SUCCESS),
        ],
        id="m1",
    )
    assert [(m["id"], m["toolCallId"]) for m in _project(msg)] == [
        ("m1/result/0", "c1"),
        ("m1/result/1", "c2"),
    ]


def test_thinking_and_hints_are_left_out_and_tool_calls_keep_their_arguments() -> None:
    msg = assistant(
        [
            ThinkingBlock("plan"),
            HintBlock("internal"),
            TextBlock("calling"),
            ToolCallBlock(id="c1", name="memory_search", input='{"query":"tea"}'),
        ],
        id="a1",
    )
    assert _project(msg) == [
        {
            "id": "a1",
            "role": "assistant",
            "name": "assistant",
            "content": "calling",
            "toolCalls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "memory_search", "arguments": '{"query":"tea"}'},
                }
            ],
        }
    ]


def test_a_user_message_with_media_becomes_typed_parts() -> None:
    msg = user(
        [
            TextBlock("see"),
            DataBlock("image/png", url="https://x/a.png"),
            DataBlock("application/pdf", data=b"%PDF", name="a.pdf"),
        ],
        id="u1",
    )
    [m] = _project(msg)
    assert [p["type"] for p in m["content"]] == ["text", "image", "document"]
    assert m["content"][1]["source"] == {
        "type": "url",
        "value": "https://x/a.png",
        "mimeType": "image/png",
    }
    AGUI_MESSAGE.validate_python(m)


def test_history_and_audit_json_is_the_projection_plus_the_agentmesh_fields() -> None:
    msg = assistant(
        [ToolResultBlock("c1", "memory_search", "tea", ToolResultState.SUCCESS)], id="m1"
    )
    pb = msg_to_pb(msg)
    [plain] = agui_messages(pb)
    [history] = message_json(pb)
    [audit] = message_json(pb, audit=True)
    assert {k: history[k] for k in plain} == plain
    assert {k: audit[k] for k in plain} == plain
    assert "visibilityMask" in audit and "visibilityMask" not in history


def _results(mid: str, n: int) -> Msg:
    blocks = [ToolResultBlock(f"c{i}", "t", "ok", ToolResultState.SUCCESS) for i in range(n)]
    return assistant(blocks, id=mid)


def test_a_page_fits_when_its_listed_messages_are_within_the_page_size() -> None:
    page = [msg_to_pb(m) for m in (user("a", id="u1"), _results("m1", 2))]
    assert stored_messages_within(page, 3) is None


def test_a_page_is_cut_after_the_stored_messages_that_fit() -> None:
    page = [msg_to_pb(m) for m in (user("a", id="u1"), _results("m1", 2), user("b", id="u2"))]
    assert stored_messages_within(page, 2) == 1
    assert stored_messages_within(page, 3) == 2


def test_a_stored_message_is_never_split_even_when_it_alone_is_over_the_page_size() -> None:
    assert stored_messages_within([msg_to_pb(_results("m1", 3))], 2) == 1


def test_a_route_message_shows_in_the_audit_with_its_decision_and_usage() -> None:
    route = system(
        "Route: lookup. the model's decision",
        kind=MessageKind.ROUTE,
        metadata={"route": {"tools": ["lookup"], "reason": "the model's decision"}},
        usage=Usage(29, 11, estimated=True),
    )
    [shown] = message_json(msg_to_pb(route), audit=True)
    assert shown["kind"] == "route" and shown["role"] == "system"
    assert shown["metadata"]["route"] == {
        "tools": ["lookup"],
        "reason": "the model's decision",
        "usage": [{"inputTokens": 29, "outputTokens": 11, "totalTokens": 40, "estimated": True}],
    }
