import datetime

from agentmesh.type.v1 import content_pb2 as _content_pb2
from agentmesh.type.v1 import execution_profile_pb2 as _execution_profile_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_USER: _ClassVar[Role]
    ROLE_ASSISTANT: _ClassVar[Role]
    ROLE_SYSTEM: _ClassVar[Role]

class RuntimeMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUNTIME_MODE_UNSPECIFIED: _ClassVar[RuntimeMode]
    RUNTIME_MODE_CHAT: _ClassVar[RuntimeMode]
    RUNTIME_MODE_AUTOMATION: _ClassVar[RuntimeMode]

class MessageKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_KIND_UNSPECIFIED: _ClassVar[MessageKind]
    MESSAGE_KIND_USER_MESSAGE: _ClassVar[MessageKind]
    MESSAGE_KIND_AGENT_REPLY: _ClassVar[MessageKind]
    MESSAGE_KIND_TOOL_CALL: _ClassVar[MessageKind]
    MESSAGE_KIND_TOOL_RESULT: _ClassVar[MessageKind]
    MESSAGE_KIND_MEMORY_RECALL: _ClassVar[MessageKind]
    MESSAGE_KIND_ROUTE: _ClassVar[MessageKind]
ROLE_UNSPECIFIED: Role
ROLE_USER: Role
ROLE_ASSISTANT: Role
ROLE_SYSTEM: Role
RUNTIME_MODE_UNSPECIFIED: RuntimeMode
RUNTIME_MODE_CHAT: RuntimeMode
RUNTIME_MODE_AUTOMATION: RuntimeMode
MESSAGE_KIND_UNSPECIFIED: MessageKind
MESSAGE_KIND_USER_MESSAGE: MessageKind
MESSAGE_KIND_AGENT_REPLY: MessageKind
MESSAGE_KIND_TOOL_CALL: MessageKind
MESSAGE_KIND_TOOL_RESULT: MessageKind
MESSAGE_KIND_MEMORY_RECALL: MessageKind
MESSAGE_KIND_ROUTE: MessageKind

class Usage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "estimated")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    estimated: bool
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., estimated: _Optional[bool] = ...) -> None: ...

class MessageMetadata(_message.Message):
    __slots__ = ("hidden_from_user", "origin", "executor", "execution_profile_name", "extra", "extra_json")
    HIDDEN_FROM_USER_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_PROFILE_NAME_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    hidden_from_user: bool
    origin: RuntimeMode
    executor: _execution_profile_pb2.Executor
    execution_profile_name: str
    extra: _struct_pb2.Struct
    extra_json: str
    def __init__(self, hidden_from_user: _Optional[bool] = ..., origin: _Optional[_Union[RuntimeMode, str]] = ..., executor: _Optional[_Union[_execution_profile_pb2.Executor, str]] = ..., execution_profile_name: _Optional[str] = ..., extra: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., extra_json: _Optional[str] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("id", "role", "name", "content", "metadata", "created_at", "usage", "finished_reason", "thread_id", "run_id", "kind", "visibility_mask", "position", "owner_sequence")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    FINISHED_REASON_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_MASK_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    OWNER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    id: str
    role: Role
    name: str
    content: _containers.RepeatedCompositeFieldContainer[_content_pb2.ContentBlock]
    metadata: MessageMetadata
    created_at: _timestamp_pb2.Timestamp
    usage: Usage
    finished_reason: str
    thread_id: str
    run_id: str
    kind: MessageKind
    visibility_mask: int
    position: int
    owner_sequence: int
    def __init__(self, id: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., name: _Optional[str] = ..., content: _Optional[_Iterable[_Union[_content_pb2.ContentBlock, _Mapping]]] = ..., metadata: _Optional[_Union[MessageMetadata, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., finished_reason: _Optional[str] = ..., thread_id: _Optional[str] = ..., run_id: _Optional[str] = ..., kind: _Optional[_Union[MessageKind, str]] = ..., visibility_mask: _Optional[int] = ..., position: _Optional[int] = ..., owner_sequence: _Optional[int] = ...) -> None: ...

class ToolSpec(_message.Message):
    __slots__ = ("name", "description", "parameters_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json: _Optional[str] = ...) -> None: ...

class RegisteredTool(_message.Message):
    __slots__ = ("spec", "source", "requires_approval")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    REQUIRES_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    spec: ToolSpec
    source: str
    requires_approval: bool
    def __init__(self, spec: _Optional[_Union[ToolSpec, _Mapping]] = ..., source: _Optional[str] = ..., requires_approval: _Optional[bool] = ...) -> None: ...

class ContextItem(_message.Message):
    __slots__ = ("description", "value")
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    description: str
    value: str
    def __init__(self, description: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
