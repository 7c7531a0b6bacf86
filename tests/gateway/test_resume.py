"""Resuming a stream: frame ids, what a resumed stream re-opens, the run options."""

from __future__ import annotations

from typing import Any

import pytest
from ag_ui.core.events import Event
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as opb
from pydantic import TypeAdapter

from services.gateway import sse
from services.gateway.errors import ApiError
from services.gateway.resume import Replay
from services.gateway.run_input import cancel_on_disconnect, multitask_strategy
from tests.gateway.sse_client import parse_sequenced

EVENT = TypeAdapter(Event)


def test_a_run_event_frame_carries_its_sequence_as_id() -> None:
    raw = sse.frame({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}, 7)
    assert raw == b'id: 7\ndata: {"type":"RUN_STARTED","threadId":"t","runId":"r"}\n\n'
    assert parse_sequenced(raw) == [(7, {"type": "RUN_STARTED", "threadId": "t", "runId": "r"})]


def _events() -> list[dict[str, Any]]:
    return [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "STEP_STARTED", "stepName": "router"},
        {"type": "STEP_FINISHED", "stepName": "router"},
        {"type": "STEP_STARTED", "stepName": "worker"},
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hel"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "lo"},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '{"a"'},
    ]


def test_a_resume_mid_message_reopens_the_step_message_and_tool_call_with_what_was_streamed() -> (
    None
):
    replay = Replay()
    for event in _events():
        replay.observe(event)
    prefix = replay.prefix("t", "r")
    assert prefix == [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "STEP_STARTED", "stepName": "worker"},
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hello"},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '{"a"'},
    ]
    for event in prefix:
        EVENT.validate_python(event)


def test_closed_spans_are_not_reopened() -> None:
    replay = Replay()
    for event in [
        *_events(),
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
    ]:
        replay.observe(event)
    assert [e["type"] for e in replay.prefix("t", "r")] == ["RUN_STARTED", "STEP_STARTED"]


def test_the_terminal_event_is_noted() -> None:
    replay = Replay()
    replay.observe({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})
    replay.observe(
        {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "success"}}
    )
    assert replay.terminal is not None


def test_run_options_default_to_enqueue_without_cancel_on_disconnect() -> None:
    assert multitask_strategy(None) == opb.MULTITASK_STRATEGY_ENQUEUE
    assert cancel_on_disconnect({"agentmesh": {}}) is False
    props = {"agentmesh": {"multitaskStrategy": "rollback", "cancelOnDisconnect": True}}
    assert multitask_strategy(props) == opb.MULTITASK_STRATEGY_ROLLBACK
    assert cancel_on_disconnect(props) is True


@pytest.mark.parametrize(
    ("props", "field"),
    [
        (
            {"agentmesh": {"multitaskStrategy": "later"}},
            "forwardedProps.agentmesh.multitaskStrategy",
        ),
        (
            {"agentmesh": {"cancelOnDisconnect": "yes"}},
            "forwardedProps.agentmesh.cancelOnDisconnect",
        ),
    ],
)
def test_bad_run_options_are_400_naming_the_field(props: dict[str, Any], field: str) -> None:
    with pytest.raises(ApiError) as info:
        multitask_strategy(props)
        cancel_on_disconnect(props)
    assert info.value.status == 400 and info.value.violations[0][0] == field
