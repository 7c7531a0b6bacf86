"""sse.to_agui: every RunEvent payload maps to an AG-UI event the ag_ui models accept."""

from __future__ import annotations

from typing import Any

import pytest
from ag_ui._generated.models import Event
from agentmesh.type.v1 import content_pb2, message_pb2, run_event_pb2
from google.protobuf import struct_pb2
from pydantic import TypeAdapter

from services.gateway import sse

R = run_event_pb2
EVENT = TypeAdapter(Event)


def _value() -> struct_pb2.Value:
    v = struct_pb2.Value()
    v.struct_value.update({"k": [1, "two"]})
    return v


def _snapshot() -> R.MessagesSnapshot:
    text = content_pb2.ContentBlock(text=content_pb2.TextBlock(text="hi"))
    call = content_pb2.ContentBlock(
        tool_call=content_pb2.ToolCallBlock(id="tc1", name="memory_write", input='{"a":1}')
    )
    result = content_pb2.ContentBlock(
        tool_result=content_pb2.ToolResultBlock(id="tc1", name="memory_write", text="ok")
    )
    image = content_pb2.ContentBlock(
        data=content_pb2.DataBlock(mime_type="image/png", data=b"\x89PNG")
    )
    return R.MessagesSnapshot(
        messages=[
            message_pb2.Message(id="u1", role=message_pb2.ROLE_USER, content=[text, image]),
            message_pb2.Message(id="a1", role=message_pb2.ROLE_ASSISTANT, content=[call]),
            message_pb2.Message(id="t1", role=message_pb2.ROLE_ASSISTANT, content=[result]),
            message_pb2.Message(id="a2", role=message_pb2.ROLE_ASSISTANT, content=[text]),
            message_pb2.Message(id="s1", role=message_pb2.ROLE_SYSTEM, content=[text]),
        ]
    )


# One example of every payload of RunEvent.payload.
PAYLOADS: dict[str, Any] = {
    "run_started": R.RunStarted(),
    "run_finished": R.RunFinished(
        outcome=R.RUN_OUTCOME_SUCCESS, usage=message_pb2.Usage(input_tokens=3, output_tokens=4)
    ),
    "run_error": R.RunError(message="boom", code="MODEL_ERROR"),
    "step_started": R.StepStarted(step_name="router"),
    "step_finished": R.StepFinished(step_name="memory"),
    "text_message_start": R.TextMessageStart(message_id="m1", role=message_pb2.ROLE_ASSISTANT),
    "text_message_content": R.TextMessageContent(message_id="m1", delta="hi"),
    "text_message_end": R.TextMessageEnd(message_id="m1"),
    "tool_call_start": R.ToolCallStart(
        tool_call_id="tc1", tool_call_name="memory_write", parent_message_id="m1"
    ),
    "tool_call_args": R.ToolCallArgs(tool_call_id="tc1", delta="{}"),
    "tool_call_end": R.ToolCallEnd(tool_call_id="tc1"),
    "tool_call_result": R.ToolCallResult(message_id="tr1", tool_call_id="tc1", content="ok"),
    "reasoning_start": R.ReasoningStart(message_id="r1"),
    "reasoning_message_start": R.ReasoningMessageStart(message_id="r1"),
    "reasoning_message_content": R.ReasoningMessageContent(message_id="r1", delta="hmm"),
    "reasoning_message_end": R.ReasoningMessageEnd(message_id="r1"),
    "reasoning_end": R.ReasoningEnd(message_id="r1"),
    "messages_snapshot": _snapshot(),
    "custom": R.Custom(name="agentmesh.note", value=_value()),
}


def _event(**payload: Any) -> R.RunEvent:
    return R.RunEvent(
        thread_id="t1", run_id="r1", sequence=1, timestamp_ms=1_700_000_000_000, **payload
    )


def _assert_no_null(value: Any, path: str = "$") -> None:
    assert value is not None, f"null at {path}"
    if isinstance(value, dict):
        for k, v in value.items():
            _assert_no_null(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _assert_no_null(v, f"{path}[{i}]")


def test_every_payload_of_the_oneof_has_an_example() -> None:
    oneof = R.RunEvent.DESCRIPTOR.oneofs_by_name["payload"]
    assert {f.name for f in oneof.fields} == set(PAYLOADS)


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_payload_maps_to_a_valid_agui_event_without_null(name: str) -> None:
    out = sse.to_agui(_event(**{name: PAYLOADS[name]}))
    assert out is not None
    _assert_no_null(out)
    model = EVENT.validate_python(out)
    assert model.type.value == out["type"] == name.upper()
    assert out["timestamp"] == 1_700_000_000_000
    # The dict carries nothing the model does not know (no misspelt keys).
    assert model.model_extra == {}


@pytest.mark.parametrize("name", sorted(PAYLOADS))
@pytest.mark.parametrize("timestamp_ms", [1_700_000_000_000, 0])
def test_each_event_goes_out_as_its_ag_ui_model_serializes_it(name: str, timestamp_ms: int) -> None:
    # Built as its ag_ui.core model (a streamed piece as the same data, for speed): the keys,
    # their order and the values on the wire are the model's.
    event = _event(**{name: PAYLOADS[name]})
    event.timestamp_ms = timestamp_ms
    out = sse.to_agui(event)
    assert out is not None
    model = EVENT.validate_python(out)
    assert (
        sse.frame(out, 7) == b"id: 7\ndata: %s\n\n" % model.model_dump_json(by_alias=True).encode()
    )


def test_interrupt_outcome_names_each_pending_tool_call_as_an_interrupt() -> None:
    out = sse.to_agui(
        _event(
            run_finished=R.RunFinished(
                outcome=R.RUN_OUTCOME_INTERRUPT, pending_tool_call_ids=["a", "b"]
            )
        )
    )
    assert out is not None
    EVENT.validate_python(out)
    assert out["outcome"] == {
        "type": "interrupt",
        "interrupts": [
            {"id": "a", "reason": "tool_call", "toolCallId": "a"},
            {"id": "b", "reason": "tool_call", "toolCallId": "b"},
        ],
    }


def test_interrupt_without_pending_tool_calls_still_names_one_interrupt() -> None:
    out = sse.to_agui(_event(run_finished=R.RunFinished(outcome=R.RUN_OUTCOME_INTERRUPT)))
    assert out is not None
    EVENT.validate_python(out)
    assert len(out["outcome"]["interrupts"]) == 1


def test_cancelled_outcome() -> None:
    out = sse.to_agui(_event(run_finished=R.RunFinished(outcome=R.RUN_OUTCOME_CANCELLED)))
    assert out is not None and out["outcome"] == {"type": "cancelled"}
    EVENT.validate_python(out)


def test_success_outcome_lists_pending_tool_calls() -> None:
    out = sse.to_agui(
        _event(
            run_finished=R.RunFinished(outcome=R.RUN_OUTCOME_SUCCESS, pending_tool_call_ids=["tc9"])
        )
    )
    assert out is not None
    assert out["outcome"] == {"type": "success", "pendingToolCallIds": ["tc9"]}
    EVENT.validate_python(out)


@pytest.mark.parametrize(
    "payload",
    [
        {"text_message_content": R.TextMessageContent(message_id="m1", delta="")},
        {"reasoning_message_content": R.ReasoningMessageContent(message_id="r1", delta="")},
        {"tool_call_args": R.ToolCallArgs(tool_call_id="tc1", delta="")},
    ],
)
def test_empty_delta_is_not_sent(payload: dict[str, Any]) -> None:
    assert sse.to_agui(_event(**payload)) is None


def test_event_without_a_known_payload_is_not_sent() -> None:
    assert sse.to_agui(_event()) is None


def test_optional_fields_without_value_are_omitted() -> None:
    out = sse.to_agui(
        R.RunEvent(
            thread_id="t",
            run_id="r",
            tool_call_start=R.ToolCallStart(tool_call_id="x", tool_call_name="n"),
        )
    )
    assert out == {"type": "TOOL_CALL_START", "toolCallId": "x", "toolCallName": "n"}
    err = sse.to_agui(R.RunEvent(run_error=R.RunError(message="m")))
    assert err == {"type": "RUN_ERROR", "message": "m"}


def test_custom_event_without_value_sends_an_empty_object() -> None:
    out = sse.to_agui(_event(custom=R.Custom(name="x")))
    assert out is not None and out["value"] == {}


def test_frame_is_one_data_line_and_a_blank_line_with_lf_only() -> None:
    raw = sse.frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "a\r\nb\u2028c"})
    assert raw.startswith(b"data: ")
    assert raw.endswith(b"\n\n")
    assert raw.count(b"\n") == 2
    assert b"\r" not in raw


def test_usage_agentmesh_counted_itself_is_marked_estimated() -> None:
    usage = message_pb2.Usage(input_tokens=30, output_tokens=4, estimated=True)
    out = sse.to_agui(
        _event(run_finished=R.RunFinished(outcome=R.RUN_OUTCOME_SUCCESS, usage=usage))
    )
    assert out is not None
    EVENT.validate_python(out)
    assert out["usage"] == [
        {"inputTokens": 30, "outputTokens": 4, "totalTokens": 34, "estimated": True}
    ]
    reported = sse.to_agui(
        _event(
            run_finished=R.RunFinished(
                outcome=R.RUN_OUTCOME_SUCCESS, usage=message_pb2.Usage(input_tokens=3)
            )
        )
    )
    assert reported is not None and "estimated" not in reported["usage"][0]


def test_a_failed_run_that_called_a_model_reports_its_usage_on_run_error() -> None:
    usage = message_pb2.Usage(input_tokens=120, output_tokens=3, estimated=True)
    out = sse.to_agui(
        _event(run_error=R.RunError(message="m", code="MODEL_STREAM_BROKEN", usage=usage))
    )
    assert out is not None
    EVENT.validate_python(out)
    assert out["usage"] == [
        {"inputTokens": 120, "outputTokens": 3, "totalTokens": 123, "estimated": True}
    ]
