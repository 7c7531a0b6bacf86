"""Msg, blocks and role rules; the protobuf and JSON mappings on chosen examples."""

from __future__ import annotations

import json

import pytest
from agentmesh.type.v1 import message_pb2
from google.protobuf import struct_pb2

from shared.errors import InvalidArgument
from shared.messages import (
    DataBlock,
    Msg,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolInputError,
    ToolResultBlock,
    assistant,
    msg_from_json,
    msg_from_pb,
    msg_to_json,
    msg_to_pb,
    system,
    user,
)


def test_user_message_refuses_a_tool_call_block() -> None:
    with pytest.raises(ValueError, match="user message cannot hold a tool_call block"):
        user([ToolCallBlock(id="c1", name="search")])


def test_user_message_holds_text_and_data() -> None:
    msg = user([TextBlock("look"), DataBlock("image/png", data=b"\x89PNG")])
    assert len(msg.content) == 2


def test_system_message_refuses_a_data_block() -> None:
    with pytest.raises(ValueError, match="system message cannot hold a data block"):
        Msg(id="s", role=Role.SYSTEM, content=(DataBlock("image/png", url="http://x/a.png"),))


def test_data_block_needs_exactly_one_source() -> None:
    with pytest.raises(ValueError, match="either data or url"):
        DataBlock("image/png", data=b"x", url="http://x")


def test_tool_result_output_holds_only_text_and_data() -> None:
    with pytest.raises(ValueError, match="text or data blocks"):
        # Deliberately a block a tool result may not hold.
        ToolResultBlock(id="c1", name="t", output=(ThinkingBlock("no"),))  # type: ignore[arg-type]


def test_factories_set_role_and_wrap_text() -> None:
    msg = assistant("hi")
    assert msg.role == Role.ASSISTANT and msg.content == (TextBlock("hi"),)
    assert system("be brief").role == Role.SYSTEM


def test_metadata_integers_survive_protobuf_as_integers() -> None:
    msg = user(
        "x", metadata={"count": 3, "ratio": 0.5, "nested": {"ids": [1, 2]}, "origin": "chat"}
    )
    back = msg_from_pb(msg_to_pb(msg))
    assert back.metadata == msg.metadata
    assert type(back.metadata["count"]) is int


def test_metadata_is_canonical_false_hidden_flag_dropped() -> None:
    msg = user(
        "x", metadata={"hidden_from_user": False, "execution_profile_name": "", "tags": ("a",)}
    )
    assert msg.metadata == {"tags": ["a"]}


def test_metadata_rejects_values_json_cannot_hold() -> None:
    with pytest.raises(ValueError, match=r"metadata\.when: datetime is not a JSON value"):
        import datetime

        user("x", metadata={"when": datetime.datetime.now()})


def test_metadata_rejects_unknown_origin() -> None:
    with pytest.raises(ValueError, match=r"metadata\.origin: must be chat or automation"):
        user("x", metadata={"origin": "batch"})


def test_legacy_struct_extra_is_still_read() -> None:
    pb = msg_to_pb(user("x", id="m1"))
    extra = struct_pb2.Struct()
    extra.update({"source": "app"})
    pb.metadata.extra.CopyFrom(extra)
    assert msg_from_pb(pb).metadata == {"source": "app"}


def test_protobuf_without_role_is_invalid_argument_naming_the_field() -> None:
    pb = message_pb2.Message(id="m1")
    with pytest.raises(InvalidArgument) as err:
        msg_from_pb(pb, "request.message")
    assert err.value.violations[0][0] == "request.message.role"


def test_protobuf_with_an_empty_block_is_invalid_argument_naming_the_block() -> None:
    pb = msg_to_pb(user("x"))
    pb.content.add()
    with pytest.raises(InvalidArgument) as err:
        msg_from_pb(pb)
    assert err.value.violations[0][0] == "message.content[1]"


def test_protobuf_with_a_block_the_role_forbids_is_invalid_argument() -> None:
    pb = msg_to_pb(assistant([ThinkingBlock("hmm")]))
    pb.role = message_pb2.ROLE_USER
    with pytest.raises(InvalidArgument, match="user message cannot hold a thinking block"):
        msg_from_pb(pb)


def test_json_is_the_protobuf_json_with_base64_bytes() -> None:
    msg = user([DataBlock("audio/wav", data=b"\x00\x01")], id="m1")
    text = msg_to_json(msg)
    assert json.loads(text)["content"][0]["data"]["data"] == "AAE="
    assert msg_from_json(text) == msg


def test_malformed_json_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgument):
        msg_from_json('{"role": "ROLE_USER", "content": 5}')


def test_tool_call_arguments_parse_a_json_object() -> None:
    assert ToolCallBlock(id="c", name="t", input='{"q": 1}').arguments() == {"q": 1}
    assert ToolCallBlock(id="c", name="t", input="").arguments() == {}


def test_tool_call_arguments_name_the_call_and_position_on_invalid_json() -> None:
    with pytest.raises(
        ToolInputError, match=r"tool call c7 \(search\): input is not valid JSON: .* at char 8"
    ):
        ToolCallBlock(id="c7", name="search", input='{"q": 1 "r": 2}').arguments()


def test_tool_call_arguments_must_be_an_object() -> None:
    with pytest.raises(ToolInputError, match="must be a JSON object, not list"):
        ToolCallBlock(id="c", name="t", input="[1]").arguments()
