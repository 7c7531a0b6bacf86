"""Property tests: arbitrary messages round-trip through protobuf and JSON, which carry
everything. (Their AG-UI projection is tested in tests/gateway/test_agui_projection.py.)"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain import ExecutorKind, MessageKind, RuntimeMode
from shared.messages import (
    DataBlock,
    HintBlock,
    Msg,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolCallState,
    ToolResultBlock,
    ToolResultState,
    Usage,
    msg_from_dict,
    msg_from_json,
    msg_from_pb,
    msg_to_dict,
    msg_to_json,
    msg_to_pb,
)

text = st.text(st.characters(codec="utf-8"), max_size=12)
ident = st.text("abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8)
json_scalar = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)
extra = st.dictionaries(
    text.filter(
        lambda k: k not in ("hidden_from_user", "origin", "executor", "execution_profile_name")
    ),
    json_value,
    max_size=3,
)


@st.composite
def metadata(draw: st.DrawFn) -> dict[str, object]:
    meta: dict[str, object] = draw(extra)
    if draw(st.booleans()):
        meta["hidden_from_user"] = True
    if draw(st.booleans()):
        meta["origin"] = draw(st.sampled_from(RuntimeMode)).value
    if draw(st.booleans()):
        meta["executor"] = draw(st.sampled_from(ExecutorKind)).value
    if draw(st.booleans()):
        meta["execution_profile_name"] = draw(ident)
    return meta


mime = st.sampled_from(
    ["image/png", "audio/wav", "audio/mpeg", "video/mp4", "application/pdf", "text/csv"]
)
data_block = st.builds(
    lambda m, inline, payload, url, name: (
        DataBlock(m, data=payload, name=name) if inline else DataBlock(m, url=url, name=name)
    ),
    mime,
    st.booleans(),
    st.binary(max_size=16),
    st.from_regex(r"https://[a-z]{1,8}\.example/[a-z0-9]{0,8}", fullmatch=True),
    st.sampled_from(["", "a.bin", "照片.png"]),
)
text_block = st.builds(TextBlock, text)
tool_call = st.builds(ToolCallBlock, ident, ident, text, st.sampled_from(ToolCallState))
tool_result = st.builds(
    ToolResultBlock,
    ident,
    ident,
    text | st.lists(text_block | data_block, max_size=3).map(tuple),
    st.sampled_from(ToolResultState),
)
any_block = (
    text_block
    | st.builds(ThinkingBlock, text)
    | st.builds(HintBlock, text)
    | data_block
    | tool_call
    | tool_result
)
role_content = {
    Role.USER: st.lists(text_block | data_block, max_size=4),
    Role.SYSTEM: st.lists(text_block, max_size=3),
    Role.ASSISTANT: st.lists(any_block, max_size=6),
}
zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=8)), timezone(timedelta(hours=-5, minutes=-30))]
)


@st.composite
def messages(draw: st.DrawFn) -> Msg:
    role = draw(st.sampled_from(Role))
    return Msg(
        id=draw(ident),
        role=role,
        content=tuple(draw(role_content[role])),
        name=draw(st.sampled_from(["", "user", "assistant", "林"])),
        metadata=draw(metadata()),
        created_at=draw(
            st.datetimes(
                min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=zones
            )
        ),
        usage=draw(st.none() | st.builds(Usage, st.integers(0, 2**62), st.integers(0, 2**62))),
        finished_reason=draw(st.sampled_from(["", "stop", "tool_calls", "length"])),
        thread_id=draw(st.sampled_from(["", "t1"])),
        run_id=draw(st.sampled_from(["", "r1"])),
        kind=draw(st.none() | st.sampled_from(MessageKind)),
        visibility_mask=draw(st.integers(0, 2**32 - 1)),
        position=draw(st.integers(0, 2**62)),
    )


@settings(max_examples=100, deadline=None)
@given(messages())
def test_protobuf_round_trip_is_lossless(msg: Msg) -> None:
    pb = msg_to_pb(msg)
    assert msg_from_pb(type(pb).FromString(pb.SerializeToString())) == msg


@settings(max_examples=100, deadline=None)
@given(messages())
def test_json_round_trip_is_lossless(msg: Msg) -> None:
    assert msg_from_json(msg_to_json(msg)) == msg
    assert msg_from_dict(json.loads(json.dumps(msg_to_dict(msg)))) == msg
