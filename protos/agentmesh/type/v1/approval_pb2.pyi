import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ToolDecisionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_DECISION_KIND_UNSPECIFIED: _ClassVar[ToolDecisionKind]
    TOOL_DECISION_KIND_APPROVE: _ClassVar[ToolDecisionKind]
    TOOL_DECISION_KIND_EDIT: _ClassVar[ToolDecisionKind]
    TOOL_DECISION_KIND_DENY: _ClassVar[ToolDecisionKind]
    TOOL_DECISION_KIND_EXPIRE: _ClassVar[ToolDecisionKind]
    TOOL_DECISION_KIND_UNANSWERED: _ClassVar[ToolDecisionKind]
TOOL_DECISION_KIND_UNSPECIFIED: ToolDecisionKind
TOOL_DECISION_KIND_APPROVE: ToolDecisionKind
TOOL_DECISION_KIND_EDIT: ToolDecisionKind
TOOL_DECISION_KIND_DENY: ToolDecisionKind
TOOL_DECISION_KIND_EXPIRE: ToolDecisionKind
TOOL_DECISION_KIND_UNANSWERED: ToolDecisionKind

class ApprovalRequest(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "arguments", "expire_time")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    arguments: str
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., arguments: _Optional[str] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ToolDecision(_message.Message):
    __slots__ = ("tool_call_id", "kind", "arguments", "decided_by")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    kind: ToolDecisionKind
    arguments: str
    decided_by: str
    def __init__(self, tool_call_id: _Optional[str] = ..., kind: _Optional[_Union[ToolDecisionKind, str]] = ..., arguments: _Optional[str] = ..., decided_by: _Optional[str] = ...) -> None: ...
