from agentmesh.type.v1 import approval_pb2 as _approval_pb2
from agentmesh.type.v1 import message_pb2 as _message_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_OUTCOME_UNSPECIFIED: _ClassVar[RunOutcome]
    RUN_OUTCOME_SUCCESS: _ClassVar[RunOutcome]
    RUN_OUTCOME_INTERRUPT: _ClassVar[RunOutcome]
    RUN_OUTCOME_CANCELLED: _ClassVar[RunOutcome]
RUN_OUTCOME_UNSPECIFIED: RunOutcome
RUN_OUTCOME_SUCCESS: RunOutcome
RUN_OUTCOME_INTERRUPT: RunOutcome
RUN_OUTCOME_CANCELLED: RunOutcome

class RunStarted(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RunFinished(_message.Message):
    __slots__ = ("outcome", "pending_tool_call_ids", "usage", "approvals")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PENDING_TOOL_CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    outcome: RunOutcome
    pending_tool_call_ids: _containers.RepeatedScalarFieldContainer[str]
    usage: _message_pb2.Usage
    approvals: _containers.RepeatedCompositeFieldContainer[_approval_pb2.ApprovalRequest]
    def __init__(self, outcome: _Optional[_Union[RunOutcome, str]] = ..., pending_tool_call_ids: _Optional[_Iterable[str]] = ..., usage: _Optional[_Union[_message_pb2.Usage, _Mapping]] = ..., approvals: _Optional[_Iterable[_Union[_approval_pb2.ApprovalRequest, _Mapping]]] = ...) -> None: ...

class RunError(_message.Message):
    __slots__ = ("message", "code")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    message: str
    code: str
    def __init__(self, message: _Optional[str] = ..., code: _Optional[str] = ...) -> None: ...

class StepStarted(_message.Message):
    __slots__ = ("step_name",)
    STEP_NAME_FIELD_NUMBER: _ClassVar[int]
    step_name: str
    def __init__(self, step_name: _Optional[str] = ...) -> None: ...

class StepFinished(_message.Message):
    __slots__ = ("step_name",)
    STEP_NAME_FIELD_NUMBER: _ClassVar[int]
    step_name: str
    def __init__(self, step_name: _Optional[str] = ...) -> None: ...

class TextMessageStart(_message.Message):
    __slots__ = ("message_id", "role")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    role: _message_pb2.Role
    def __init__(self, message_id: _Optional[str] = ..., role: _Optional[_Union[_message_pb2.Role, str]] = ...) -> None: ...

class TextMessageContent(_message.Message):
    __slots__ = ("message_id", "delta")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    delta: str
    def __init__(self, message_id: _Optional[str] = ..., delta: _Optional[str] = ...) -> None: ...

class TextMessageEnd(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class ToolCallStart(_message.Message):
    __slots__ = ("tool_call_id", "tool_call_name", "parent_message_id")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_NAME_FIELD_NUMBER: _ClassVar[int]
    PARENT_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_call_name: str
    parent_message_id: str
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_call_name: _Optional[str] = ..., parent_message_id: _Optional[str] = ...) -> None: ...

class ToolCallArgs(_message.Message):
    __slots__ = ("tool_call_id", "delta")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    delta: str
    def __init__(self, tool_call_id: _Optional[str] = ..., delta: _Optional[str] = ...) -> None: ...

class ToolCallEnd(_message.Message):
    __slots__ = ("tool_call_id",)
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    def __init__(self, tool_call_id: _Optional[str] = ...) -> None: ...

class ToolCallResult(_message.Message):
    __slots__ = ("message_id", "tool_call_id", "content")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    tool_call_id: str
    content: str
    def __init__(self, message_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class ReasoningStart(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class ReasoningMessageStart(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class ReasoningMessageContent(_message.Message):
    __slots__ = ("message_id", "delta")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    delta: str
    def __init__(self, message_id: _Optional[str] = ..., delta: _Optional[str] = ...) -> None: ...

class ReasoningMessageEnd(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class ReasoningEnd(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class MessagesSnapshot(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    def __init__(self, messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ...) -> None: ...

class Custom(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: _struct_pb2.Value
    def __init__(self, name: _Optional[str] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("run_id", "thread_id", "sequence", "timestamp_ms", "run_started", "run_finished", "run_error", "step_started", "step_finished", "text_message_start", "text_message_content", "text_message_end", "tool_call_start", "tool_call_args", "tool_call_end", "tool_call_result", "reasoning_start", "reasoning_message_start", "reasoning_message_content", "reasoning_message_end", "reasoning_end", "messages_snapshot", "custom")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    RUN_STARTED_FIELD_NUMBER: _ClassVar[int]
    RUN_FINISHED_FIELD_NUMBER: _ClassVar[int]
    RUN_ERROR_FIELD_NUMBER: _ClassVar[int]
    STEP_STARTED_FIELD_NUMBER: _ClassVar[int]
    STEP_FINISHED_FIELD_NUMBER: _ClassVar[int]
    TEXT_MESSAGE_START_FIELD_NUMBER: _ClassVar[int]
    TEXT_MESSAGE_CONTENT_FIELD_NUMBER: _ClassVar[int]
    TEXT_MESSAGE_END_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_START_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ARGS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_END_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_RESULT_FIELD_NUMBER: _ClassVar[int]
    REASONING_START_FIELD_NUMBER: _ClassVar[int]
    REASONING_MESSAGE_START_FIELD_NUMBER: _ClassVar[int]
    REASONING_MESSAGE_CONTENT_FIELD_NUMBER: _ClassVar[int]
    REASONING_MESSAGE_END_FIELD_NUMBER: _ClassVar[int]
    REASONING_END_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    thread_id: str
    sequence: int
    timestamp_ms: int
    run_started: RunStarted
    run_finished: RunFinished
    run_error: RunError
    step_started: StepStarted
    step_finished: StepFinished
    text_message_start: TextMessageStart
    text_message_content: TextMessageContent
    text_message_end: TextMessageEnd
    tool_call_start: ToolCallStart
    tool_call_args: ToolCallArgs
    tool_call_end: ToolCallEnd
    tool_call_result: ToolCallResult
    reasoning_start: ReasoningStart
    reasoning_message_start: ReasoningMessageStart
    reasoning_message_content: ReasoningMessageContent
    reasoning_message_end: ReasoningMessageEnd
    reasoning_end: ReasoningEnd
    messages_snapshot: MessagesSnapshot
    custom: Custom
    def __init__(self, run_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., sequence: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., run_started: _Optional[_Union[RunStarted, _Mapping]] = ..., run_finished: _Optional[_Union[RunFinished, _Mapping]] = ..., run_error: _Optional[_Union[RunError, _Mapping]] = ..., step_started: _Optional[_Union[StepStarted, _Mapping]] = ..., step_finished: _Optional[_Union[StepFinished, _Mapping]] = ..., text_message_start: _Optional[_Union[TextMessageStart, _Mapping]] = ..., text_message_content: _Optional[_Union[TextMessageContent, _Mapping]] = ..., text_message_end: _Optional[_Union[TextMessageEnd, _Mapping]] = ..., tool_call_start: _Optional[_Union[ToolCallStart, _Mapping]] = ..., tool_call_args: _Optional[_Union[ToolCallArgs, _Mapping]] = ..., tool_call_end: _Optional[_Union[ToolCallEnd, _Mapping]] = ..., tool_call_result: _Optional[_Union[ToolCallResult, _Mapping]] = ..., reasoning_start: _Optional[_Union[ReasoningStart, _Mapping]] = ..., reasoning_message_start: _Optional[_Union[ReasoningMessageStart, _Mapping]] = ..., reasoning_message_content: _Optional[_Union[ReasoningMessageContent, _Mapping]] = ..., reasoning_message_end: _Optional[_Union[ReasoningMessageEnd, _Mapping]] = ..., reasoning_end: _Optional[_Union[ReasoningEnd, _Mapping]] = ..., messages_snapshot: _Optional[_Union[MessagesSnapshot, _Mapping]] = ..., custom: _Optional[_Union[Custom, _Mapping]] = ...) -> None: ...
