"""Enum values from a newer peer are read as UNSPECIFIED, wherever they sit in a request."""

from __future__ import annotations

from agentmesh.history.v1 import history_service_pb2 as history_pb
from agentmesh.type.v1 import content_pb2, message_pb2

from shared.compat import unknown_enums_to_unspecified


def test_unknown_top_level_enum_becomes_unspecified() -> None:
    request = history_pb.ListHistoryRequest(thread_id="t")
    request.direction = 77
    assert unknown_enums_to_unspecified(request) == ["direction"]
    assert request.direction == history_pb.DIRECTION_UNSPECIFIED


def test_unknown_enums_deep_in_repeated_and_recursive_messages_are_reset() -> None:
    call = content_pb2.ContentBlock(tool_call=content_pb2.ToolCallBlock(id="c", name="x"))
    call.tool_call.state = 42
    nested = content_pb2.ContentBlock(
        tool_result=content_pb2.ToolResultBlock(id="c", blocks=content_pb2.ContentBlocks(blocks=[call]))
    )
    message = message_pb2.Message(id="m", role=message_pb2.ROLE_USER, content=[nested])
    message.kind = 9
    request = history_pb.AppendMessagesRequest(thread_id="t", messages=[message])

    reset = unknown_enums_to_unspecified(request)

    assert sorted(reset) == [
        "messages[0].content[0].tool_result.blocks.blocks[0].tool_call.state",
        "messages[0].kind",
    ]
    stored = request.messages[0]
    assert stored.kind == message_pb2.MESSAGE_KIND_UNSPECIFIED
    assert stored.content[0].tool_result.blocks.blocks[0].tool_call.state == 0
    assert stored.role == message_pb2.ROLE_USER


def test_known_values_are_left_alone() -> None:
    request = history_pb.ListHistoryRequest(thread_id="t", direction=history_pb.DIRECTION_BACKWARD)
    assert unknown_enums_to_unspecified(request) == []
    assert request.direction == history_pb.DIRECTION_BACKWARD
