"""Memory service protobuf <-> domain."""

from __future__ import annotations

from datetime import datetime

from agentmesh.memory.v1 import memory_service_pb2 as pb
from google.protobuf import timestamp_pb2

from services.memory import conversation
from services.memory.core import Change, Memory, Watermark
from shared import timestamps
from shared.errors import InvalidArgument


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(value)
    return ts


def datetime_from(ts: timestamp_pb2.Timestamp, field: str) -> datetime:
    return timestamps.from_pb(ts, field)


def memory_to_pb(memory: Memory) -> pb.Memory:
    return pb.Memory(
        id=memory.id,
        content=memory.content,
        kind=memory.kind,
        source_run_id=memory.source_run_id,
        source_message_ids=list(memory.source_message_ids),
        create_time=timestamp(memory.create_time),
        update_time=timestamp(memory.update_time),
        version=memory.version,
        score=memory.score,
    )


def watermark_to_pb(watermark: Watermark) -> pb.Watermark:
    out = pb.Watermark(name=watermark.name, position=watermark.position)
    if watermark.time is not None:
        out.time.CopyFrom(timestamp(watermark.time))
    if watermark.update_time is not None:
        out.update_time.CopyFrom(timestamp(watermark.update_time))
    return out


def change_to_pb(change: Change) -> pb.MemoryChange:
    out = pb.MemoryChange(
        action=change.action,
        memory_id=change.memory_id,
        content=change.content,
        kind=change.kind,
        previous_content=change.previous_content,
        actor=change.actor,
        source_run_id=change.source_run_id,
        source_message_ids=list(change.source_message_ids),
        reason=change.reason,
    )
    if change.create_time is not None:
        out.create_time.CopyFrom(timestamp(change.create_time))
    return out


def conversation_message_from_pb(
    message: pb.ConversationMessage, field: str
) -> conversation.Message:
    if not message.HasField("create_time"):
        raise InvalidArgument(f"{field}.create_time", "is required")
    return conversation.validate_message(
        field,
        message.message_id,
        message.thread_id,
        message.role,
        message.text,
        datetime_from(message.create_time, f"{field}.create_time"),
    )


def conversation_hit_to_pb(message: conversation.Message) -> pb.ConversationHit:
    return pb.ConversationHit(
        message=pb.ConversationMessage(
            message_id=message.id,
            thread_id=message.thread_id,
            role=message.role,
            text=message.text,
            create_time=timestamp(message.create_time),
        ),
        score=message.score,
    )
