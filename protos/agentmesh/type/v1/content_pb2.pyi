from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ToolCallState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CALL_STATE_UNSPECIFIED: _ClassVar[ToolCallState]
    TOOL_CALL_STATE_PENDING: _ClassVar[ToolCallState]
    TOOL_CALL_STATE_ASKING: _ClassVar[ToolCallState]
    TOOL_CALL_STATE_ALLOWED: _ClassVar[ToolCallState]
    TOOL_CALL_STATE_SUBMITTED: _ClassVar[ToolCallState]
    TOOL_CALL_STATE_FINISHED: _ClassVar[ToolCallState]

class ToolResultState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_RESULT_STATE_UNSPECIFIED: _ClassVar[ToolResultState]
    TOOL_RESULT_STATE_RUNNING: _ClassVar[ToolResultState]
    TOOL_RESULT_STATE_SUCCESS: _ClassVar[ToolResultState]
    TOOL_RESULT_STATE_ERROR: _ClassVar[ToolResultState]
    TOOL_RESULT_STATE_INTERRUPTED: _ClassVar[ToolResultState]
    TOOL_RESULT_STATE_DENIED: _ClassVar[ToolResultState]
TOOL_CALL_STATE_UNSPECIFIED: ToolCallState
TOOL_CALL_STATE_PENDING: ToolCallState
TOOL_CALL_STATE_ASKING: ToolCallState
TOOL_CALL_STATE_ALLOWED: ToolCallState
TOOL_CALL_STATE_SUBMITTED: ToolCallState
TOOL_CALL_STATE_FINISHED: ToolCallState
TOOL_RESULT_STATE_UNSPECIFIED: ToolResultState
TOOL_RESULT_STATE_RUNNING: ToolResultState
TOOL_RESULT_STATE_SUCCESS: ToolResultState
TOOL_RESULT_STATE_ERROR: ToolResultState
TOOL_RESULT_STATE_INTERRUPTED: ToolResultState
TOOL_RESULT_STATE_DENIED: ToolResultState

class TextBlock(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class ThinkingBlock(_message.Message):
    __slots__ = ("thinking",)
    THINKING_FIELD_NUMBER: _ClassVar[int]
    thinking: str
    def __init__(self, thinking: _Optional[str] = ...) -> None: ...

class HintBlock(_message.Message):
    __slots__ = ("hint",)
    HINT_FIELD_NUMBER: _ClassVar[int]
    hint: str
    def __init__(self, hint: _Optional[str] = ...) -> None: ...

class DataBlock(_message.Message):
    __slots__ = ("mime_type", "data", "url", "name")
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    mime_type: str
    data: bytes
    url: str
    name: str
    def __init__(self, mime_type: _Optional[str] = ..., data: _Optional[bytes] = ..., url: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ToolCallBlock(_message.Message):
    __slots__ = ("id", "name", "input", "state")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    input: str
    state: ToolCallState
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., input: _Optional[str] = ..., state: _Optional[_Union[ToolCallState, str]] = ...) -> None: ...

class ContentBlocks(_message.Message):
    __slots__ = ("blocks",)
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    blocks: _containers.RepeatedCompositeFieldContainer[ContentBlock]
    def __init__(self, blocks: _Optional[_Iterable[_Union[ContentBlock, _Mapping]]] = ...) -> None: ...

class ToolResultBlock(_message.Message):
    __slots__ = ("id", "name", "text", "blocks", "state")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    text: str
    blocks: ContentBlocks
    state: ToolResultState
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., text: _Optional[str] = ..., blocks: _Optional[_Union[ContentBlocks, _Mapping]] = ..., state: _Optional[_Union[ToolResultState, str]] = ...) -> None: ...

class ContentBlock(_message.Message):
    __slots__ = ("text", "thinking", "hint", "data", "tool_call", "tool_result")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    text: TextBlock
    thinking: ThinkingBlock
    hint: HintBlock
    data: DataBlock
    tool_call: ToolCallBlock
    tool_result: ToolResultBlock
    def __init__(self, text: _Optional[_Union[TextBlock, _Mapping]] = ..., thinking: _Optional[_Union[ThinkingBlock, _Mapping]] = ..., hint: _Optional[_Union[HintBlock, _Mapping]] = ..., data: _Optional[_Union[DataBlock, _Mapping]] = ..., tool_call: _Optional[_Union[ToolCallBlock, _Mapping]] = ..., tool_result: _Optional[_Union[ToolResultBlock, _Mapping]] = ...) -> None: ...
