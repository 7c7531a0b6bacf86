from agentmesh.type.v1 import execution_profile_pb2 as _execution_profile_pb2
from agentmesh.type.v1 import message_pb2 as _message_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RouteRequest(_message.Message):
    __slots__ = ("run_id", "profile", "context_messages", "input_message", "tools")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    INPUT_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    profile: _execution_profile_pb2.ExecutionProfile
    context_messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    input_message: _message_pb2.Message
    tools: _containers.RepeatedCompositeFieldContainer[_message_pb2.ToolSpec]
    def __init__(self, run_id: _Optional[str] = ..., profile: _Optional[_Union[_execution_profile_pb2.ExecutionProfile, _Mapping]] = ..., context_messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., input_message: _Optional[_Union[_message_pb2.Message, _Mapping]] = ..., tools: _Optional[_Iterable[_Union[_message_pb2.ToolSpec, _Mapping]]] = ...) -> None: ...

class RouteResponse(_message.Message):
    __slots__ = ("executor", "tool_names", "reason", "usage")
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAMES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    executor: _execution_profile_pb2.Executor
    tool_names: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    usage: _message_pb2.Usage
    def __init__(self, executor: _Optional[_Union[_execution_profile_pb2.Executor, str]] = ..., tool_names: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., usage: _Optional[_Union[_message_pb2.Usage, _Mapping]] = ...) -> None: ...
