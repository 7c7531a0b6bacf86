from agentmesh.type.v1 import approval_pb2 as _approval_pb2
from agentmesh.type.v1 import execution_profile_pb2 as _execution_profile_pb2
from agentmesh.type.v1 import message_pb2 as _message_pb2
from agentmesh.type.v1 import run_event_pb2 as _run_event_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ToolDenialReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_DENIAL_REASON_UNSPECIFIED: _ClassVar[ToolDenialReason]
    TOOL_DENIAL_REASON_NOT_DECLARED: _ClassVar[ToolDenialReason]
    TOOL_DENIAL_REASON_NOT_IN_PROFILE: _ClassVar[ToolDenialReason]
    TOOL_DENIAL_REASON_NOT_REGISTERED: _ClassVar[ToolDenialReason]
TOOL_DENIAL_REASON_UNSPECIFIED: ToolDenialReason
TOOL_DENIAL_REASON_NOT_DECLARED: ToolDenialReason
TOOL_DENIAL_REASON_NOT_IN_PROFILE: ToolDenialReason
TOOL_DENIAL_REASON_NOT_REGISTERED: ToolDenialReason

class ListToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[_message_pb2.RegisteredTool]
    def __init__(self, tools: _Optional[_Iterable[_Union[_message_pb2.RegisteredTool, _Mapping]]] = ...) -> None: ...

class ExecuteRequest(_message.Message):
    __slots__ = ("run_id", "thread_id", "executor", "profile", "context_messages", "input_message", "tools", "client_tools", "time_zone", "reply_message_id", "declared_tools", "batch_items", "tool_decisions", "sequence_horizon")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    INPUT_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TOOLS_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    REPLY_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    DECLARED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    BATCH_ITEMS_FIELD_NUMBER: _ClassVar[int]
    TOOL_DECISIONS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_HORIZON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    thread_id: str
    executor: _execution_profile_pb2.Executor
    profile: _execution_profile_pb2.ExecutionProfile
    context_messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    input_message: _message_pb2.Message
    tools: _containers.RepeatedCompositeFieldContainer[_message_pb2.ToolSpec]
    client_tools: _containers.RepeatedCompositeFieldContainer[_message_pb2.ToolSpec]
    time_zone: str
    reply_message_id: str
    declared_tools: _containers.RepeatedScalarFieldContainer[str]
    batch_items: bool
    tool_decisions: _containers.RepeatedCompositeFieldContainer[_approval_pb2.ToolDecision]
    sequence_horizon: int
    def __init__(self, run_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., executor: _Optional[_Union[_execution_profile_pb2.Executor, str]] = ..., profile: _Optional[_Union[_execution_profile_pb2.ExecutionProfile, _Mapping]] = ..., context_messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., input_message: _Optional[_Union[_message_pb2.Message, _Mapping]] = ..., tools: _Optional[_Iterable[_Union[_message_pb2.ToolSpec, _Mapping]]] = ..., client_tools: _Optional[_Iterable[_Union[_message_pb2.ToolSpec, _Mapping]]] = ..., time_zone: _Optional[str] = ..., reply_message_id: _Optional[str] = ..., declared_tools: _Optional[_Iterable[str]] = ..., batch_items: _Optional[bool] = ..., tool_decisions: _Optional[_Iterable[_Union[_approval_pb2.ToolDecision, _Mapping]]] = ..., sequence_horizon: _Optional[int] = ...) -> None: ...

class ExecuteResponse(_message.Message):
    __slots__ = ("event", "message", "result", "tool_denial", "items")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    TOOL_DENIAL_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    event: _run_event_pb2.RunEvent
    message: _message_pb2.Message
    result: StepResult
    tool_denial: ToolDenial
    items: _containers.RepeatedCompositeFieldContainer[ExecuteResponse]
    def __init__(self, event: _Optional[_Union[_run_event_pb2.RunEvent, _Mapping]] = ..., message: _Optional[_Union[_message_pb2.Message, _Mapping]] = ..., result: _Optional[_Union[StepResult, _Mapping]] = ..., tool_denial: _Optional[_Union[ToolDenial, _Mapping]] = ..., items: _Optional[_Iterable[_Union[ExecuteResponse, _Mapping]]] = ...) -> None: ...

class ToolDenial(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "arguments_sha256", "reason")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    arguments_sha256: str
    reason: ToolDenialReason
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., arguments_sha256: _Optional[str] = ..., reason: _Optional[_Union[ToolDenialReason, str]] = ...) -> None: ...

class StepResult(_message.Message):
    __slots__ = ("pending_tool_call_ids", "usage", "finished_reason", "approvals")
    PENDING_TOOL_CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    FINISHED_REASON_FIELD_NUMBER: _ClassVar[int]
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    pending_tool_call_ids: _containers.RepeatedScalarFieldContainer[str]
    usage: _message_pb2.Usage
    finished_reason: str
    approvals: _containers.RepeatedCompositeFieldContainer[_approval_pb2.ApprovalRequest]
    def __init__(self, pending_tool_call_ids: _Optional[_Iterable[str]] = ..., usage: _Optional[_Union[_message_pb2.Usage, _Mapping]] = ..., finished_reason: _Optional[str] = ..., approvals: _Optional[_Iterable[_Union[_approval_pb2.ApprovalRequest, _Mapping]]] = ...) -> None: ...
