"""shared.wire frames stored encodings exactly as protobuf encodes a repeated field."""

from __future__ import annotations

import pytest
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from agentmesh.type.v1 import run_event_pb2

from shared import wire


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16383, 16384, 300_000])
def test_framed_items_parse_back_to_the_same_messages(size: int) -> None:
    events = [
        run_event_pb2.RunEvent(
            sequence=i + 1,
            text_message_content=run_event_pb2.TextMessageContent(message_id="m", delta="x" * size),
        )
        for i in range(3)
    ]
    encoded = [e.SerializeToString() for e in events]
    framed = wire.repeated(pb.StartRunResponse.EVENTS_FIELD_NUMBER, encoded)
    assert framed == pb.StartRunResponse(events=events).SerializeToString()
    assert list(pb.StartRunResponse.FromString(framed).events) == events


def test_varint_matches_the_protobuf_encoding() -> None:
    for n in (0, 1, 127, 128, 300, 2**21, 2**35):
        encoded = pb.StreamRunRequest(after_sequence=n).SerializeToString()
        assert (encoded[1:] if n else b"") == (wire.varint(n) if n else b"")
