"""The message layer: Msg with a list of content blocks (a closed discriminated union on
`type`), role factories, and the lossless mappings Msg <-> protobuf <-> JSON.

Blocks follow AgentScope 2.x's six: text, thinking, hint, data (any media by MIME type),
tool_call (raw JSON input string) and tool_result (text or text/data blocks). Tool calls
carry the pre-execution state, tool results the post-execution state (see
services.executor.toolcalls).

Role rules: a user message holds text and data blocks only, a system message text blocks
only, an assistant message any block (tool results travel in assistant messages too).

Metadata is a JSON object. The four keys the services interpret are typed on the wire
(`hidden_from_user`: bool, `origin`: chat|automation, `executor`: worker|memory,
`execution_profile_name`: str); every other key travels as one JSON string
(MessageMetadata.extra_json), so integers stay integers. A Msg keeps its metadata in
canonical form: `hidden_from_user` only when true, `execution_profile_name` only when
non-empty, tuples as lists — so Msg -> protobuf -> Msg is the identity.

The JSON history stores is the protobuf JSON of the message (google.protobuf.json_format):
`msg_to_json` / `msg_from_json`.

The AG-UI projection of a message (what clients see in MESSAGES_SNAPSHOT, /history and
the audit) belongs to the gateway, its only user (services.gateway.convert.agui_messages);
the id of a tool result there is `tool_result_message_id`, here, because the executor names
TOOL_CALL_RESULT events with it while the result is streamed.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from agentmesh.type.v1 import content_pb2, message_pb2
from google.protobuf import json_format

from shared import timestamps
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
from shared.errors import InvalidArgument


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


class ToolInputError(ValueError):
    """A tool call's input is not a JSON object; the message names the call and the fault."""

    def __init__(self, tool_call_id: str, name: str, reason: str) -> None:
        super().__init__(f"tool call {tool_call_id} ({name}): input {reason}")
        self.tool_call_id = tool_call_id
        self.name = name


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
        if not self.mime_type:
            raise ValueError("a data block needs a MIME type")
        if self.data is not None and not isinstance(self.data, bytes):
            object.__setattr__(self, "data", bytes(self.data))

    @property
    def media(self) -> str:
        """The top-level media type: image, audio, video, text, application, ..."""
        return self.mime_type.split("/", 1)[0].lower()


@dataclass(frozen=True)
class ToolCallBlock:
    id: str
    name: str
    # The raw JSON arguments as the model produced them; parsed once, by `arguments()`.
    input: str = ""
    state: ToolCallState = ToolCallState.PENDING
    type: Literal["tool_call"] = "tool_call"

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("a tool call needs an id")
        object.__setattr__(self, "state", ToolCallState(self.state))

    def arguments(self) -> dict[str, Any]:
        """The input parsed as a JSON object ("" counts as {}); ToolInputError otherwise."""
        if not self.input.strip():
            return {}
        try:
            value = json.loads(self.input)
        except json.JSONDecodeError as e:
            snippet = self.input[max(0, e.pos - 20) : e.pos + 20]
            raise ToolInputError(
                self.id, self.name, f"is not valid JSON: {e.msg} at char {e.pos} (near {snippet!r})"
            ) from None
        if not isinstance(value, dict):
            raise ToolInputError(
                self.id, self.name, f"must be a JSON object, not {type(value).__name__}"
            )
        return value


@dataclass(frozen=True)
class ToolResultBlock:
    id: str
    name: str
    output: str | tuple[TextBlock | DataBlock, ...] = ""
    state: ToolResultState = ToolResultState.RUNNING
    type: Literal["tool_result"] = "tool_result"

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("a tool result needs the id of its call")
        object.__setattr__(self, "state", ToolResultState(self.state))
        if not isinstance(self.output, str):
            output = tuple(self.output)
            for block in output:
                if not isinstance(block, TextBlock | DataBlock):
                    raise ValueError(f"a tool result holds text or data blocks, not {block!r}")
            object.__setattr__(self, "output", output)

    @property
    def text(self) -> str:
        """The output as text (text blocks joined)."""
        if isinstance(self.output, str):
            return self.output
        return "".join(b.text for b in self.output if isinstance(b, TextBlock))


Block = TextBlock | ThinkingBlock | HintBlock | DataBlock | ToolCallBlock | ToolResultBlock

_ROLE_BLOCKS: dict[Role, tuple[type, ...]] = {
    Role.USER: (TextBlock, DataBlock),
    Role.SYSTEM: (TextBlock,),
    Role.ASSISTANT: (
        TextBlock,
        ThinkingBlock,
        HintBlock,
        DataBlock,
        ToolCallBlock,
        ToolResultBlock,
    ),
}


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    # Counted by agentmesh (shared.model.tokens) because the endpoint reported none; a sum
    # with any estimated part is estimated.
    estimated: bool = False

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.estimated or other.estimated,
        )


# ---- metadata -----------------------------------------------------------------------

_TYPED_KEYS = ("hidden_from_user", "origin", "executor", "execution_profile_name")


def _json_value(value: Any, path: str) -> Any:
    """`value` as plain JSON (tuples become lists); ValueError naming the path otherwise."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value} is not a JSON number")
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{path}: key {k!r} is not a string")
            out[k] = _json_value(v, f"{path}.{k}")
        return out
    raise ValueError(f"{path}: {type(value).__name__} is not a JSON value")


def canonical_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical form of message metadata (see the module docstring)."""
    meta: dict[str, Any] = _json_value(metadata, "metadata")
    hidden = meta.pop("hidden_from_user", False)
    if not isinstance(hidden, bool):
        raise ValueError("metadata.hidden_from_user: must be a boolean")
    if hidden:
        meta["hidden_from_user"] = True
    for key, enum in (("origin", RuntimeMode), ("executor", ExecutorKind)):
        if meta.get(key) is not None:
            try:
                meta[key] = enum(meta[key]).value
            except ValueError:
                choices = " or ".join(e.value for e in enum)
                raise ValueError(f"metadata.{key}: must be {choices}") from None
        else:
            meta.pop(key, None)
    profile = meta.pop("execution_profile_name", "")
    if not isinstance(profile, str):
        raise ValueError("metadata.execution_profile_name: must be a string")
    if profile:
        meta["execution_profile_name"] = profile
    return meta


# ---- the message --------------------------------------------------------------------


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
    # The owner's commit sequence (history; 0: none).
    sequence: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "role", Role(self.role))
        object.__setattr__(self, "content", tuple(self.content))
        if self.kind is not None:
            object.__setattr__(self, "kind", MessageKind(self.kind))
        allowed = _ROLE_BLOCKS[self.role]
        for block in self.content:
            if not isinstance(block, allowed):
                kind = getattr(block, "type", type(block).__name__)
                raise ValueError(f"a {self.role.value} message cannot hold a {kind} block")
        if self.created_at.tzinfo is None:
            raise ValueError("created_at must be timezone-aware")
        object.__setattr__(self, "metadata", canonical_metadata(self.metadata))

    @property
    def text(self) -> str:
        """The concatenated text blocks."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    def blocks(self, kind: type[Block]) -> list[Any]:
        return [b for b in self.content if isinstance(b, kind)]

    @property
    def tool_calls(self) -> list[ToolCallBlock]:
        return [b for b in self.content if isinstance(b, ToolCallBlock)]

    @property
    def tool_results(self) -> list[ToolResultBlock]:
        return [b for b in self.content if isinstance(b, ToolResultBlock)]


def new_id() -> str:
    return uuid.uuid4().hex


def _content(content: str | Sequence[Block]) -> tuple[Block, ...]:
    return (TextBlock(content),) if isinstance(content, str) else tuple(content)


def user(
    content: str | Sequence[Block], *, id: str | None = None, name: str = "user", **kw: Any
) -> Msg:
    return Msg(id=id or new_id(), role=Role.USER, content=_content(content), name=name, **kw)


def assistant(
    content: str | Sequence[Block], *, id: str | None = None, name: str = "assistant", **kw: Any
) -> Msg:
    return Msg(id=id or new_id(), role=Role.ASSISTANT, content=_content(content), name=name, **kw)


def system(content: str, *, id: str | None = None, name: str = "system", **kw: Any) -> Msg:
    return Msg(id=id or new_id(), role=Role.SYSTEM, content=_content(content), name=name, **kw)


# ---- protobuf mapping -----------------------------------------------------------------

_ROLE_TO_PB = {
    Role.USER: message_pb2.ROLE_USER,
    Role.ASSISTANT: message_pb2.ROLE_ASSISTANT,
    Role.SYSTEM: message_pb2.ROLE_SYSTEM,
}
_ROLE_FROM_PB = {v: k for k, v in _ROLE_TO_PB.items()}
_CALL_STATE_TO_PB = {s: getattr(content_pb2, f"TOOL_CALL_STATE_{s.name}") for s in ToolCallState}
_CALL_STATE_FROM_PB = {v: k for k, v in _CALL_STATE_TO_PB.items()}
_RESULT_STATE_TO_PB = {
    s: getattr(content_pb2, f"TOOL_RESULT_STATE_{s.name}") for s in ToolResultState
}
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
                    id=block.id,
                    name=block.name,
                    input=block.input,
                    state=_CALL_STATE_TO_PB[block.state],
                )
            )
        case ToolResultBlock():
            result = content_pb2.ToolResultBlock(
                id=block.id, name=block.name, state=_RESULT_STATE_TO_PB[block.state]
            )
            if isinstance(block.output, str):
                result.text = block.output
            else:
                result.blocks.SetInParent()  # an empty block list is still "blocks", not text
                result.blocks.blocks.extend(block_to_pb(b) for b in block.output)
            return content_pb2.ContentBlock(tool_result=result)
    raise TypeError(f"not a content block: {block!r}")


def block_from_pb(pb: content_pb2.ContentBlock) -> Block:
    """The block of `pb`; ValueError when it is empty or breaks a block rule."""
    which = pb.WhichOneof("block")
    if which == "text":
        return TextBlock(pb.text.text)
    if which == "thinking":
        return ThinkingBlock(pb.thinking.thinking)
    if which == "hint":
        return HintBlock(pb.hint.hint)
    if which == "data":
        d = pb.data
        source = d.WhichOneof("source")
        if source == "data":
            return DataBlock(mime_type=d.mime_type, data=d.data, name=d.name)
        if source == "url":
            return DataBlock(mime_type=d.mime_type, url=d.url, name=d.name)
        raise ValueError("a data block holds either data or url")
    if which == "tool_call":
        c = pb.tool_call
        return ToolCallBlock(
            id=c.id,
            name=c.name,
            input=c.input,
            state=_CALL_STATE_FROM_PB.get(c.state, ToolCallState.PENDING),
        )
    if which == "tool_result":
        r = pb.tool_result
        output: str | tuple[Any, ...]
        if r.WhichOneof("output") == "blocks":
            output = tuple(block_from_pb(b) for b in r.blocks.blocks)
        else:
            output = r.text
        return ToolResultBlock(
            id=r.id,
            name=r.name,
            output=output,
            state=_RESULT_STATE_FROM_PB.get(r.state, ToolResultState.RUNNING),
        )
    raise ValueError("empty content block")


def usage_to_pb(usage: Usage) -> message_pb2.Usage:
    return message_pb2.Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        estimated=usage.estimated,
    )


def usage_from_pb(pb: message_pb2.Usage) -> Usage:
    return Usage(pb.input_tokens, pb.output_tokens, pb.estimated)


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
        owner_sequence=msg.sequence,
    )
    pb.created_at.FromDatetime(msg.created_at)
    if msg.kind is not None:
        pb.kind = MESSAGE_KIND_TO_PB[msg.kind]
    if msg.usage is not None:
        pb.usage.CopyFrom(usage_to_pb(msg.usage))
    meta = dict(msg.metadata)  # canonical already (Msg.__post_init__)
    if meta:
        md = pb.metadata
        md.hidden_from_user = bool(meta.pop("hidden_from_user", False))
        if (origin := meta.pop("origin", None)) is not None:
            md.origin = RUNTIME_MODE_TO_PB[RuntimeMode(origin)]
        if (executor := meta.pop("executor", None)) is not None:
            md.executor = EXECUTOR_TO_PB[ExecutorKind(executor)]
        md.execution_profile_name = meta.pop("execution_profile_name", "")
        if meta:
            md.extra_json = json.dumps(
                meta, ensure_ascii=False, allow_nan=False, separators=(",", ":")
            )
        pb.metadata.SetInParent()
    return pb


def _metadata_from_pb(md: message_pb2.MessageMetadata) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if md.HasField("extra"):  # records written before extra_json
        meta.update(json_format.MessageToDict(md.extra))
    if md.extra_json:
        try:
            extra = json.loads(md.extra_json)
        except json.JSONDecodeError as e:
            raise ValueError(f"metadata.extra_json: not JSON ({e.msg})") from None
        if not isinstance(extra, dict):
            raise ValueError("metadata.extra_json: must be a JSON object")
        meta.update(extra)
    if md.hidden_from_user:
        meta["hidden_from_user"] = True
    if md.origin in RUNTIME_MODE_FROM_PB:
        meta["origin"] = RUNTIME_MODE_FROM_PB[md.origin].value
    if md.executor in EXECUTOR_FROM_PB:
        meta["executor"] = EXECUTOR_FROM_PB[md.executor].value
    if md.execution_profile_name:
        meta["execution_profile_name"] = md.execution_profile_name
    return meta


def msg_from_pb(pb: message_pb2.Message, field: str = "message") -> Msg:
    """The Msg of `pb`; InvalidArgument naming `field` (and the part) when it is not valid."""
    if pb.role not in _ROLE_FROM_PB:
        raise InvalidArgument(f"{field}.role", "must be user, assistant or system")
    content = []
    for i, b in enumerate(pb.content):
        try:
            content.append(block_from_pb(b))
        except ValueError as e:
            raise InvalidArgument(f"{field}.content[{i}]", str(e)) from None
    created = (
        timestamps.from_pb(pb.created_at, f"{field}.created_at")
        if pb.HasField("created_at")
        else datetime.now(UTC)
    )
    try:
        return Msg(
            id=pb.id,
            role=_ROLE_FROM_PB[pb.role],
            content=tuple(content),
            name=pb.name,
            metadata=_metadata_from_pb(pb.metadata),
            created_at=created,
            usage=usage_from_pb(pb.usage) if pb.HasField("usage") else None,
            finished_reason=pb.finished_reason,
            thread_id=pb.thread_id,
            run_id=pb.run_id,
            kind=MESSAGE_KIND_FROM_PB.get(pb.kind),
            visibility_mask=pb.visibility_mask,
            position=pb.position,
            sequence=pb.owner_sequence,
        )
    except ValueError as e:
        raise InvalidArgument(field, str(e)) from None


# ---- JSON (what history stores) ---------------------------------------------------------


def msg_to_dict(msg: Msg) -> dict[str, Any]:
    """The protobuf JSON of the message as a dict (camelCase keys, bytes as base64)."""
    return json_format.MessageToDict(msg_to_pb(msg))


def msg_from_dict(data: Mapping[str, Any], field: str = "message") -> Msg:
    try:
        pb = json_format.ParseDict(dict(data), message_pb2.Message(), ignore_unknown_fields=True)
    except json_format.ParseError as e:
        raise InvalidArgument(field, str(e)) from None
    return msg_from_pb(pb, field)


def msg_to_json(msg: Msg) -> str:
    return json_format.MessageToJson(msg_to_pb(msg), indent=None, ensure_ascii=False)


def msg_from_json(text: str | bytes, field: str = "message") -> Msg:
    try:
        pb = json_format.Parse(text, message_pb2.Message(), ignore_unknown_fields=True)
    except json_format.ParseError as e:
        raise InvalidArgument(field, str(e)) from None
    return msg_from_pb(pb, field)


# ---- AG-UI ids ----------------------------------------------------------------------------


def tool_result_message_id(msg_id: str, index: int) -> str:
    """The AG-UI id of the `index`-th tool result of message `msg_id`: the TOOL_CALL_RESULT's
    messageId on the stream (the executor) and the tool message's id in MESSAGES_SNAPSHOT,
    /history and the audit (the gateway's projection, services.gateway.convert), so a client
    merging the stream with what is stored sees each result once."""
    return f"{msg_id}/result/{index}"
