"""The message layer: Msg with a list of content blocks (a closed discriminated union on
`type`), role factories, and the mapping to and from protobuf.

Blocks follow AgentScope 2.x's six: text, thinking, hint, data (any media by MIME type),
tool_call (raw JSON input string) and tool_result (text or blocks). Tool calls carry the
pre-execution state, tool results the post-execution state.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from agentmesh.type.v1 import content_pb2, message_pb2
from google.protobuf import json_format

from shared.domain import (
    EXECUTOR_FROM_PB,
    EXECUTOR_TO_PB,
    MESSAGE_KIND_FROM_PB,
    MESSAGE_KIND_TO_PB,
    RUNTIME_MODE_FROM_PB,
    RUNTIME_MODE_TO_PB,
    ExecutorKind,
    MessageKind,
    RuntimeMode,
)


class ToolCallState(StrEnum):
    PENDING = "pending"
    ASKING = "asking"
    ALLOWED = "allowed"
    SUBMITTED = "submitted"
    FINISHED = "finished"


class ToolResultState(StrEnum):
    RUNNING = "running"
    SUCCESS = "success"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    DENIED = "denied"


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"


@dataclass(frozen=True)
class TextBlock:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True)
class ThinkingBlock:
    thinking: str
    type: Literal["thinking"] = "thinking"


@dataclass(frozen=True)
class HintBlock:
    hint: str
    type: Literal["hint"] = "hint"


@dataclass(frozen=True)
class DataBlock:
    """Media by MIME type: inline bytes or a URL (exactly one)."""

    mime_type: str
    data: bytes | None = None
    url: str | None = None
    name: str = ""
    type: Literal["data"] = "data"

    def __post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise ValueError("a data block holds either data or url")


@dataclass(frozen=True)
class ToolCallBlock:
    id: str
    name: str
    input: str = ""
    state: ToolCallState = ToolCallState.PENDING
    type: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True)
class ToolResultBlock:
    id: str
    name: str
    output: str | tuple[Block, ...] = ""
    state: ToolResultState = ToolResultState.RUNNING
    type: Literal["tool_result"] = "tool_result"


Block = TextBlock | ThinkingBlock | HintBlock | DataBlock | ToolCallBlock | ToolResultBlock

_ROLE_BLOCKS: dict[Role, tuple[type, ...]] = {
    Role.USER: (TextBlock, DataBlock),
    Role.SYSTEM: (TextBlock,),
    Role.ASSISTANT: (TextBlock, ThinkingBlock, HintBlock, DataBlock, ToolCallBlock, ToolResultBlock),
}


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens)


@dataclass(frozen=True)
class Msg:
    id: str
    role: Role
    content: tuple[Block, ...]
    name: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    usage: Usage | None = None
    finished_reason: str = ""
    # Where the message lives (set by the history service).
    thread_id: str = ""
    run_id: str = ""
    kind: MessageKind | None = None
    visibility_mask: int = 0
    position: int = 0

    def __post_init__(self) -> None:
        allowed = _ROLE_BLOCKS[self.role]
        for block in self.content:
            if not isinstance(block, allowed):
                raise ValueError(f"a {self.role.value} message cannot hold a {block.type} block")
        if self.created_at.tzinfo is None:
            raise ValueError("created_at must be timezone-aware")

    @property
    def text(self) -> str:
        """The concatenated text blocks."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    def blocks(self, kind: type[Block]) -> list[Any]:
        return [b for b in self.content if isinstance(b, kind)]


def _new_id() -> str:
    return uuid.uuid4().hex


def _content(content: str | Sequence[Block]) -> tuple[Block, ...]:
    return (TextBlock(content),) if isinstance(content, str) else tuple(content)


def user(content: str | Sequence[Block], *, id: str | None = None, name: str = "user", **kw: Any) -> Msg:
    return Msg(id=id or _new_id(), role=Role.USER, content=_content(content), name=name, **kw)


def assistant(content: str | Sequence[Block], *, id: str | None = None, name: str = "assistant", **kw: Any) -> Msg:
    return Msg(id=id or _new_id(), role=Role.ASSISTANT, content=_content(content), name=name, **kw)


def system(content: str, *, id: str | None = None, name: str = "system", **kw: Any) -> Msg:
    return Msg(id=id or _new_id(), role=Role.SYSTEM, content=_content(content), name=name, **kw)


# ---- protobuf mapping -------------------------------------------------------------

_ROLE_TO_PB = {Role.USER: message_pb2.ROLE_USER, Role.ASSISTANT: message_pb2.ROLE_ASSISTANT, Role.SYSTEM: message_pb2.ROLE_SYSTEM}
_ROLE_FROM_PB = {v: k for k, v in _ROLE_TO_PB.items()}
_CALL_STATE_TO_PB = {s: getattr(content_pb2, f"TOOL_CALL_STATE_{s.name}") for s in ToolCallState}
_CALL_STATE_FROM_PB = {v: k for k, v in _CALL_STATE_TO_PB.items()}
_RESULT_STATE_TO_PB = {s: getattr(content_pb2, f"TOOL_RESULT_STATE_{s.name}") for s in ToolResultState}
_RESULT_STATE_FROM_PB = {v: k for k, v in _RESULT_STATE_TO_PB.items()}


def block_to_pb(block: Block) -> content_pb2.ContentBlock:
    match block:
        case TextBlock(text=text):
            return content_pb2.ContentBlock(text=content_pb2.TextBlock(text=text))
        case ThinkingBlock(thinking=thinking):
            return content_pb2.ContentBlock(thinking=content_pb2.ThinkingBlock(thinking=thinking))
        case HintBlock(hint=hint):
            return content_pb2.ContentBlock(hint=content_pb2.HintBlock(hint=hint))
        case DataBlock():
            data = content_pb2.DataBlock(mime_type=block.mime_type, name=block.name)
            if block.data is not None:
                data.data = block.data
            else:
                data.url = block.url or ""
            return content_pb2.ContentBlock(data=data)
        case ToolCallBlock():
            return content_pb2.ContentBlock(
                tool_call=content_pb2.ToolCallBlock(
                    id=block.id, name=block.name, input=block.input, state=_CALL_STATE_TO_PB[block.state]
                )
            )
        case ToolResultBlock():
            result = content_pb2.ToolResultBlock(
                id=block.id, name=block.name, state=_RESULT_STATE_TO_PB[block.state]
            )
            if isinstance(block.output, str):
                result.text = block.output
            else:
                result.blocks.blocks.extend(block_to_pb(b) for b in block.output)
            return content_pb2.ContentBlock(tool_result=result)
    raise TypeError(f"not a content block: {block!r}")


def block_from_pb(pb: content_pb2.ContentBlock) -> Block:
    which = pb.WhichOneof("block")
    if which == "text":
        return TextBlock(pb.text.text)
    if which == "thinking":
        return ThinkingBlock(pb.thinking.thinking)
    if which == "hint":
        return HintBlock(pb.hint.hint)
    if which == "data":
        d = pb.data
        if d.WhichOneof("source") == "data":
            return DataBlock(mime_type=d.mime_type, data=d.data, name=d.name)
        return DataBlock(mime_type=d.mime_type, url=d.url, name=d.name)
    if which == "tool_call":
        c = pb.tool_call
        return ToolCallBlock(
            id=c.id, name=c.name, input=c.input, state=_CALL_STATE_FROM_PB.get(c.state, ToolCallState.PENDING)
        )
    if which == "tool_result":
        r = pb.tool_result
        output: str | tuple[Block, ...]
        if r.WhichOneof("output") == "blocks":
            output = tuple(block_from_pb(b) for b in r.blocks.blocks)
        else:
            output = r.text
        return ToolResultBlock(
            id=r.id, name=r.name, output=output, state=_RESULT_STATE_FROM_PB.get(r.state, ToolResultState.RUNNING)
        )
    raise ValueError("empty content block")


def msg_to_pb(msg: Msg) -> message_pb2.Message:
    pb = message_pb2.Message(
        id=msg.id,
        role=_ROLE_TO_PB[msg.role],
        name=msg.name,
        content=[block_to_pb(b) for b in msg.content],
        finished_reason=msg.finished_reason,
        thread_id=msg.thread_id,
        run_id=msg.run_id,
        visibility_mask=msg.visibility_mask,
        position=msg.position,
    )
    pb.created_at.FromDatetime(msg.created_at)
    if msg.kind is not None:
        pb.kind = MESSAGE_KIND_TO_PB[msg.kind]
    if msg.usage is not None:
        pb.usage.input_tokens = msg.usage.input_tokens
        pb.usage.output_tokens = msg.usage.output_tokens
    meta = dict(msg.metadata)
    md = pb.metadata
    md.hidden_from_user = bool(meta.pop("hidden_from_user", False))
    if (origin := meta.pop("origin", None)) is not None:
        md.origin = RUNTIME_MODE_TO_PB[RuntimeMode(origin)]
    if (executor := meta.pop("executor", None)) is not None:
        md.executor = EXECUTOR_TO_PB[ExecutorKind(executor)]
    md.execution_profile_name = str(meta.pop("execution_profile_name", ""))
    if meta:
        md.extra.update(meta)
    return pb


def msg_from_pb(pb: message_pb2.Message) -> Msg:
    meta: dict[str, Any] = {}
    md = pb.metadata
    if md.ListFields():
        meta["hidden_from_user"] = md.hidden_from_user
        if md.origin in RUNTIME_MODE_FROM_PB:
            meta["origin"] = RUNTIME_MODE_FROM_PB[md.origin].value  # type: ignore[index]
        if md.executor in EXECUTOR_FROM_PB:
            meta["executor"] = EXECUTOR_FROM_PB[md.executor].value  # type: ignore[index]
        if md.execution_profile_name:
            meta["execution_profile_name"] = md.execution_profile_name
        if md.HasField("extra"):
            meta.update(json_format.MessageToDict(md.extra))
    created = pb.created_at.ToDatetime(tzinfo=UTC) if pb.HasField("created_at") else datetime.now(UTC)
    return Msg(
        id=pb.id,
        role=_ROLE_FROM_PB.get(pb.role, Role.USER),
        content=tuple(block_from_pb(b) for b in pb.content),
        name=pb.name,
        metadata=meta,
        created_at=created,
        usage=Usage(pb.usage.input_tokens, pb.usage.output_tokens) if pb.HasField("usage") else None,
        finished_reason=pb.finished_reason,
        thread_id=pb.thread_id,
        run_id=pb.run_id,
        kind=MESSAGE_KIND_FROM_PB.get(pb.kind),
        visibility_mask=pb.visibility_mask,
        position=pb.position,
    )


