from agentmesh.type.v1 import approval_pb2 as _approval_pb2
from agentmesh.type.v1 import execution_profile_pb2 as _execution_profile_pb2
from agentmesh.type.v1 import message_pb2 as _message_pb2
from agentmesh.type.v1 import run_event_pb2 as _run_event_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MultitaskStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MULTITASK_STRATEGY_UNSPECIFIED: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_REJECT: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_ENQUEUE: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_INTERRUPT: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_ROLLBACK: _ClassVar[MultitaskStrategy]
MULTITASK_STRATEGY_UNSPECIFIED: MultitaskStrategy
MULTITASK_STRATEGY_REJECT: MultitaskStrategy
MULTITASK_STRATEGY_ENQUEUE: MultitaskStrategy
MULTITASK_STRATEGY_INTERRUPT: MultitaskStrategy
MULTITASK_STRATEGY_ROLLBACK: MultitaskStrategy

class ListToolsRequest(_message.Message):
    __slots__ = ("profile_name",)
    PROFILE_NAME_FIELD_NUMBER: _ClassVar[int]
    profile_name: str
    def __init__(self, profile_name: _Optional[str] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools", "profile_name", "effective_tool_names", "approval_tool_names")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_NAME_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_TOOL_NAMES_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_TOOL_NAMES_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[_message_pb2.RegisteredTool]
    profile_name: str
    effective_tool_names: _containers.RepeatedScalarFieldContainer[str]
    approval_tool_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tools: _Optional[_Iterable[_Union[_message_pb2.RegisteredTool, _Mapping]]] = ..., profile_name: _Optional[str] = ..., effective_tool_names: _Optional[_Iterable[str]] = ..., approval_tool_names: _Optional[_Iterable[str]] = ...) -> None: ...

class StartRunRequest(_message.Message):
    __slots__ = ("thread_id", "run_id", "messages", "tools", "context", "state", "forwarded_props", "origin", "profile_name", "profile", "time_zone", "parent_run_id", "declared_tools", "multitask_strategy", "batch_events", "tool_decisions")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FORWARDED_PROPS_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    PROFILE_NAME_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DECLARED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    MULTITASK_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    BATCH_EVENTS_FIELD_NUMBER: _ClassVar[int]
    TOOL_DECISIONS_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    run_id: str
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    tools: _containers.RepeatedCompositeFieldContainer[_message_pb2.ToolSpec]
    context: _containers.RepeatedCompositeFieldContainer[_message_pb2.ContextItem]
    state: _struct_pb2.Value
    forwarded_props: _struct_pb2.Value
    origin: _message_pb2.RuntimeMode
    profile_name: str
    profile: _execution_profile_pb2.ExecutionProfile
    time_zone: str
    parent_run_id: str
    declared_tools: _containers.RepeatedScalarFieldContainer[str]
    multitask_strategy: MultitaskStrategy
    batch_events: bool
    tool_decisions: _containers.RepeatedCompositeFieldContainer[_approval_pb2.ToolDecision]
    def __init__(self, thread_id: _Optional[str] = ..., run_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[_message_pb2.ToolSpec, _Mapping]]] = ..., context: _Optional[_Iterable[_Union[_message_pb2.ContextItem, _Mapping]]] = ..., state: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., forwarded_props: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., origin: _Optional[_Union[_message_pb2.RuntimeMode, str]] = ..., profile_name: _Optional[str] = ..., profile: _Optional[_Union[_execution_profile_pb2.ExecutionProfile, _Mapping]] = ..., time_zone: _Optional[str] = ..., parent_run_id: _Optional[str] = ..., declared_tools: _Optional[_Iterable[str]] = ..., multitask_strategy: _Optional[_Union[MultitaskStrategy, str]] = ..., batch_events: _Optional[bool] = ..., tool_decisions: _Optional[_Iterable[_Union[_approval_pb2.ToolDecision, _Mapping]]] = ...) -> None: ...

class StartRunResponse(_message.Message):
    __slots__ = ("event", "events")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    event: _run_event_pb2.RunEvent
    events: _containers.RepeatedCompositeFieldContainer[_run_event_pb2.RunEvent]
    def __init__(self, event: _Optional[_Union[_run_event_pb2.RunEvent, _Mapping]] = ..., events: _Optional[_Iterable[_Union[_run_event_pb2.RunEvent, _Mapping]]] = ...) -> None: ...

class StreamRunRequest(_message.Message):
    __slots__ = ("run_id", "after_sequence")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_sequence: int
    def __init__(self, run_id: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class StreamRunResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: _run_event_pb2.RunEvent
    def __init__(self, event: _Optional[_Union[_run_event_pb2.RunEvent, _Mapping]] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class CancelRunResponse(_message.Message):
    __slots__ = ("cancelled", "state", "thread_id")
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    cancelled: bool
    state: str
    thread_id: str
    def __init__(self, cancelled: _Optional[bool] = ..., state: _Optional[str] = ..., thread_id: _Optional[str] = ...) -> None: ...

class DeleteRunEventsRequest(_message.Message):
    __slots__ = ("run_ids",)
    RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    run_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteRunEventsResponse(_message.Message):
    __slots__ = ("deleted_count",)
    DELETED_COUNT_FIELD_NUMBER: _ClassVar[int]
    deleted_count: int
    def __init__(self, deleted_count: _Optional[int] = ...) -> None: ...

class DeleteOwnerDataRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteOwnerDataResponse(_message.Message):
    __slots__ = ("deleted_counts",)
    class DeletedCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    DELETED_COUNTS_FIELD_NUMBER: _ClassVar[int]
    deleted_counts: _containers.ScalarMap[str, int]
    def __init__(self, deleted_counts: _Optional[_Mapping[str, int]] = ...) -> None: ...
