import datetime

from agentmesh.type.v1 import execution_profile_pb2 as _execution_profile_pb2
from agentmesh.type.v1 import message_pb2 as _message_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
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

class RunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATE_UNSPECIFIED: _ClassVar[RunState]
    RUN_STATE_QUEUED: _ClassVar[RunState]
    RUN_STATE_RUNNING: _ClassVar[RunState]
    RUN_STATE_SUCCEEDED: _ClassVar[RunState]
    RUN_STATE_FAILED: _ClassVar[RunState]
    RUN_STATE_CANCELLED: _ClassVar[RunState]
    RUN_STATE_INTERRUPTED: _ClassVar[RunState]

class Direction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DIRECTION_UNSPECIFIED: _ClassVar[Direction]
    DIRECTION_FORWARD: _ClassVar[Direction]
    DIRECTION_BACKWARD: _ClassVar[Direction]

class ToolDenialReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_DENIAL_REASON_UNSPECIFIED: _ClassVar[ToolDenialReason]
    TOOL_DENIAL_REASON_NOT_DECLARED: _ClassVar[ToolDenialReason]
    TOOL_DENIAL_REASON_NOT_IN_PROFILE: _ClassVar[ToolDenialReason]
    TOOL_DENIAL_REASON_NOT_REGISTERED: _ClassVar[ToolDenialReason]

class DeletionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELETION_KIND_UNSPECIFIED: _ClassVar[DeletionKind]
    DELETION_KIND_THREAD: _ClassVar[DeletionKind]
    DELETION_KIND_OWNER: _ClassVar[DeletionKind]
    DELETION_KIND_RETENTION: _ClassVar[DeletionKind]

class DeletionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELETION_STATE_UNSPECIFIED: _ClassVar[DeletionState]
    DELETION_STATE_RUNNING: _ClassVar[DeletionState]
    DELETION_STATE_SUCCEEDED: _ClassVar[DeletionState]
MULTITASK_STRATEGY_UNSPECIFIED: MultitaskStrategy
MULTITASK_STRATEGY_REJECT: MultitaskStrategy
MULTITASK_STRATEGY_ENQUEUE: MultitaskStrategy
MULTITASK_STRATEGY_INTERRUPT: MultitaskStrategy
MULTITASK_STRATEGY_ROLLBACK: MultitaskStrategy
RUN_STATE_UNSPECIFIED: RunState
RUN_STATE_QUEUED: RunState
RUN_STATE_RUNNING: RunState
RUN_STATE_SUCCEEDED: RunState
RUN_STATE_FAILED: RunState
RUN_STATE_CANCELLED: RunState
RUN_STATE_INTERRUPTED: RunState
DIRECTION_UNSPECIFIED: Direction
DIRECTION_FORWARD: Direction
DIRECTION_BACKWARD: Direction
TOOL_DENIAL_REASON_UNSPECIFIED: ToolDenialReason
TOOL_DENIAL_REASON_NOT_DECLARED: ToolDenialReason
TOOL_DENIAL_REASON_NOT_IN_PROFILE: ToolDenialReason
TOOL_DENIAL_REASON_NOT_REGISTERED: ToolDenialReason
DELETION_KIND_UNSPECIFIED: DeletionKind
DELETION_KIND_THREAD: DeletionKind
DELETION_KIND_OWNER: DeletionKind
DELETION_KIND_RETENTION: DeletionKind
DELETION_STATE_UNSPECIFIED: DeletionState
DELETION_STATE_RUNNING: DeletionState
DELETION_STATE_SUCCEEDED: DeletionState

class Thread(_message.Message):
    __slots__ = ("id", "runtime_mode", "create_time", "update_time", "message_count", "shown_message_count")
    ID_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_MODE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    SHOWN_MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    id: str
    runtime_mode: _message_pb2.RuntimeMode
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    message_count: int
    shown_message_count: int
    def __init__(self, id: _Optional[str] = ..., runtime_mode: _Optional[_Union[_message_pb2.RuntimeMode, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., message_count: _Optional[int] = ..., shown_message_count: _Optional[int] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("id", "thread_id", "state", "profile", "origin", "create_time", "start_time", "finish_time", "error_code", "error_message", "cancel_requested", "rolled_back", "lease_expire_time", "ahead_run_ids", "owner_id", "usage")
    ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    ROLLED_BACK_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    AHEAD_RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    id: str
    thread_id: str
    state: RunState
    profile: _execution_profile_pb2.ExecutionProfile
    origin: _message_pb2.RuntimeMode
    create_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    error_code: str
    error_message: str
    cancel_requested: bool
    rolled_back: bool
    lease_expire_time: _timestamp_pb2.Timestamp
    ahead_run_ids: _containers.RepeatedScalarFieldContainer[str]
    owner_id: str
    usage: _message_pb2.Usage
    def __init__(self, id: _Optional[str] = ..., thread_id: _Optional[str] = ..., state: _Optional[_Union[RunState, str]] = ..., profile: _Optional[_Union[_execution_profile_pb2.ExecutionProfile, _Mapping]] = ..., origin: _Optional[_Union[_message_pb2.RuntimeMode, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., cancel_requested: _Optional[bool] = ..., rolled_back: _Optional[bool] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ahead_run_ids: _Optional[_Iterable[str]] = ..., owner_id: _Optional[str] = ..., usage: _Optional[_Union[_message_pb2.Usage, _Mapping]] = ...) -> None: ...

class ContextOptions(_message.Message):
    __slots__ = ("window", "time_zone", "max_chars")
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    MAX_CHARS_FIELD_NUMBER: _ClassVar[int]
    window: str
    time_zone: str
    max_chars: int
    def __init__(self, window: _Optional[str] = ..., time_zone: _Optional[str] = ..., max_chars: _Optional[int] = ...) -> None: ...

class BeginRunRequest(_message.Message):
    __slots__ = ("thread_id", "runtime_mode", "run_id", "profile", "input_messages", "context", "multitask_strategy", "lease_holder", "lease_seconds")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_MODE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    INPUT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    MULTITASK_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    LEASE_HOLDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    runtime_mode: _message_pb2.RuntimeMode
    run_id: str
    profile: _execution_profile_pb2.ExecutionProfile
    input_messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    context: ContextOptions
    multitask_strategy: MultitaskStrategy
    lease_holder: str
    lease_seconds: float
    def __init__(self, thread_id: _Optional[str] = ..., runtime_mode: _Optional[_Union[_message_pb2.RuntimeMode, str]] = ..., run_id: _Optional[str] = ..., profile: _Optional[_Union[_execution_profile_pb2.ExecutionProfile, _Mapping]] = ..., input_messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., context: _Optional[_Union[ContextOptions, _Mapping]] = ..., multitask_strategy: _Optional[_Union[MultitaskStrategy, str]] = ..., lease_holder: _Optional[str] = ..., lease_seconds: _Optional[float] = ...) -> None: ...

class BeginRunResponse(_message.Message):
    __slots__ = ("thread", "run", "context_messages")
    THREAD_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    thread: Thread
    run: Run
    context_messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    def __init__(self, thread: _Optional[_Union[Thread, _Mapping]] = ..., run: _Optional[_Union[Run, _Mapping]] = ..., context_messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ...) -> None: ...

class FinishRunRequest(_message.Message):
    __slots__ = ("run_id", "state", "output_messages", "error_code", "error_message", "tool_denials")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_DENIALS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    state: RunState
    output_messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    error_code: str
    error_message: str
    tool_denials: _containers.RepeatedCompositeFieldContainer[ToolDenial]
    def __init__(self, run_id: _Optional[str] = ..., state: _Optional[_Union[RunState, str]] = ..., output_messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., tool_denials: _Optional[_Iterable[_Union[ToolDenial, _Mapping]]] = ...) -> None: ...

class ToolDenial(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "arguments_sha256", "reason", "owner_id", "run_id", "thread_id", "origin", "executor", "execution_profile_name", "create_time")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_PROFILE_NAME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    arguments_sha256: str
    reason: ToolDenialReason
    owner_id: str
    run_id: str
    thread_id: str
    origin: _message_pb2.RuntimeMode
    executor: _execution_profile_pb2.Executor
    execution_profile_name: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., arguments_sha256: _Optional[str] = ..., reason: _Optional[_Union[ToolDenialReason, str]] = ..., owner_id: _Optional[str] = ..., run_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., origin: _Optional[_Union[_message_pb2.RuntimeMode, str]] = ..., executor: _Optional[_Union[_execution_profile_pb2.Executor, str]] = ..., execution_profile_name: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class FinishRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class AppendMessagesRequest(_message.Message):
    __slots__ = ("thread_id", "messages", "runtime_mode")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_MODE_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    runtime_mode: _message_pb2.RuntimeMode
    def __init__(self, thread_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., runtime_mode: _Optional[_Union[_message_pb2.RuntimeMode, str]] = ...) -> None: ...

class AppendMessagesResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    def __init__(self, messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ...) -> None: ...

class ListHistoryRequest(_message.Message):
    __slots__ = ("thread_id", "page_size", "page_token", "direction")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    page_size: int
    page_token: str
    direction: Direction
    def __init__(self, thread_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., direction: _Optional[_Union[Direction, str]] = ...) -> None: ...

class ListHistoryResponse(_message.Message):
    __slots__ = ("messages", "next_page_token")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class LoadContextRequest(_message.Message):
    __slots__ = ("thread_id", "context", "page_size", "page_token", "across_threads")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACROSS_THREADS_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    context: ContextOptions
    page_size: int
    page_token: str
    across_threads: bool
    def __init__(self, thread_id: _Optional[str] = ..., context: _Optional[_Union[ContextOptions, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., across_threads: _Optional[bool] = ...) -> None: ...

class LoadContextResponse(_message.Message):
    __slots__ = ("messages", "next_page_token", "sequence_horizon")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_HORIZON_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    next_page_token: str
    sequence_horizon: int
    def __init__(self, messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., sequence_horizon: _Optional[int] = ...) -> None: ...

class ListThreadsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListThreadsResponse(_message.Message):
    __slots__ = ("threads", "next_page_token")
    THREADS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    threads: _containers.RepeatedCompositeFieldContainer[Thread]
    next_page_token: str
    def __init__(self, threads: _Optional[_Iterable[_Union[Thread, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetThreadRequest(_message.Message):
    __slots__ = ("thread_id",)
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    def __init__(self, thread_id: _Optional[str] = ...) -> None: ...

class GetThreadResponse(_message.Message):
    __slots__ = ("thread",)
    THREAD_FIELD_NUMBER: _ClassVar[int]
    thread: Thread
    def __init__(self, thread: _Optional[_Union[Thread, _Mapping]] = ...) -> None: ...

class RenewRunLeaseRequest(_message.Message):
    __slots__ = ("run_id", "lease_holder", "lease_seconds")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_HOLDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    lease_holder: str
    lease_seconds: float
    def __init__(self, run_id: _Optional[str] = ..., lease_holder: _Optional[str] = ..., lease_seconds: _Optional[float] = ...) -> None: ...

class RenewRunLeaseResponse(_message.Message):
    __slots__ = ("run", "held")
    RUN_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    run: Run
    held: bool
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ..., held: _Optional[bool] = ...) -> None: ...

class RequestRunCancellationRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class RequestRunCancellationResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class ExpireRunLeasesRequest(_message.Message):
    __slots__ = ("page_size",)
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    def __init__(self, page_size: _Optional[int] = ...) -> None: ...

class ExpireRunLeasesResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class AuditFilter(_message.Message):
    __slots__ = ("origin", "executor", "execution_profile_name", "thread_id", "start_time", "end_time")
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_PROFILE_NAME_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    origin: _message_pb2.RuntimeMode
    executor: _execution_profile_pb2.Executor
    execution_profile_name: str
    thread_id: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    def __init__(self, origin: _Optional[_Union[_message_pb2.RuntimeMode, str]] = ..., executor: _Optional[_Union[_execution_profile_pb2.Executor, str]] = ..., execution_profile_name: _Optional[str] = ..., thread_id: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListAuditRequest(_message.Message):
    __slots__ = ("owner_id", "filter", "page_size", "page_token")
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    owner_id: str
    filter: AuditFilter
    page_size: int
    page_token: str
    def __init__(self, owner_id: _Optional[str] = ..., filter: _Optional[_Union[AuditFilter, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAuditResponse(_message.Message):
    __slots__ = ("messages", "next_page_token", "tool_denials")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOOL_DENIALS_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    next_page_token: str
    tool_denials: _containers.RepeatedCompositeFieldContainer[ToolDenial]
    def __init__(self, messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., tool_denials: _Optional[_Iterable[_Union[ToolDenial, _Mapping]]] = ...) -> None: ...

class DeletionStep(_message.Message):
    __slots__ = ("service", "done", "attempts", "last_error", "update_time", "deleted_counts")
    class DeletedCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    DELETED_COUNTS_FIELD_NUMBER: _ClassVar[int]
    service: str
    done: bool
    attempts: int
    last_error: str
    update_time: _timestamp_pb2.Timestamp
    deleted_counts: _containers.ScalarMap[str, int]
    def __init__(self, service: _Optional[str] = ..., done: _Optional[bool] = ..., attempts: _Optional[int] = ..., last_error: _Optional[str] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deleted_counts: _Optional[_Mapping[str, int]] = ...) -> None: ...

class Deletion(_message.Message):
    __slots__ = ("id", "owner_id", "kind", "thread_id", "state", "steps", "create_time", "finish_time", "requested_by")
    ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    id: str
    owner_id: str
    kind: DeletionKind
    thread_id: str
    state: DeletionState
    steps: _containers.RepeatedCompositeFieldContainer[DeletionStep]
    create_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    requested_by: str
    def __init__(self, id: _Optional[str] = ..., owner_id: _Optional[str] = ..., kind: _Optional[_Union[DeletionKind, str]] = ..., thread_id: _Optional[str] = ..., state: _Optional[_Union[DeletionState, str]] = ..., steps: _Optional[_Iterable[_Union[DeletionStep, _Mapping]]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., requested_by: _Optional[str] = ...) -> None: ...

class DeleteThreadRequest(_message.Message):
    __slots__ = ("thread_id",)
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    def __init__(self, thread_id: _Optional[str] = ...) -> None: ...

class DeleteThreadResponse(_message.Message):
    __slots__ = ("deletion", "run_ids")
    DELETION_FIELD_NUMBER: _ClassVar[int]
    RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    deletion: Deletion
    run_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, deletion: _Optional[_Union[Deletion, _Mapping]] = ..., run_ids: _Optional[_Iterable[str]] = ...) -> None: ...

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

class StartOwnerDeletionRequest(_message.Message):
    __slots__ = ("requested_by",)
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    requested_by: str
    def __init__(self, requested_by: _Optional[str] = ...) -> None: ...

class StartOwnerDeletionResponse(_message.Message):
    __slots__ = ("deletion", "created")
    DELETION_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    deletion: Deletion
    created: bool
    def __init__(self, deletion: _Optional[_Union[Deletion, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class RecordDeletionStepRequest(_message.Message):
    __slots__ = ("deletion_id", "service", "done", "error", "deleted_counts")
    class DeletedCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    DELETION_ID_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DELETED_COUNTS_FIELD_NUMBER: _ClassVar[int]
    deletion_id: str
    service: str
    done: bool
    error: str
    deleted_counts: _containers.ScalarMap[str, int]
    def __init__(self, deletion_id: _Optional[str] = ..., service: _Optional[str] = ..., done: _Optional[bool] = ..., error: _Optional[str] = ..., deleted_counts: _Optional[_Mapping[str, int]] = ...) -> None: ...

class RecordDeletionStepResponse(_message.Message):
    __slots__ = ("deletion",)
    DELETION_FIELD_NUMBER: _ClassVar[int]
    deletion: Deletion
    def __init__(self, deletion: _Optional[_Union[Deletion, _Mapping]] = ...) -> None: ...

class GetDeletionRequest(_message.Message):
    __slots__ = ("deletion_id",)
    DELETION_ID_FIELD_NUMBER: _ClassVar[int]
    deletion_id: str
    def __init__(self, deletion_id: _Optional[str] = ...) -> None: ...

class GetDeletionResponse(_message.Message):
    __slots__ = ("deletion",)
    DELETION_FIELD_NUMBER: _ClassVar[int]
    deletion: Deletion
    def __init__(self, deletion: _Optional[_Union[Deletion, _Mapping]] = ...) -> None: ...

class ListUnfinishedDeletionsRequest(_message.Message):
    __slots__ = ("page_size",)
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    def __init__(self, page_size: _Optional[int] = ...) -> None: ...

class ListUnfinishedDeletionsResponse(_message.Message):
    __slots__ = ("deletions",)
    DELETIONS_FIELD_NUMBER: _ClassVar[int]
    deletions: _containers.RepeatedCompositeFieldContainer[Deletion]
    def __init__(self, deletions: _Optional[_Iterable[_Union[Deletion, _Mapping]]] = ...) -> None: ...

class ListDeletionsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDeletionsResponse(_message.Message):
    __slots__ = ("deletions", "next_page_token")
    DELETIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    deletions: _containers.RepeatedCompositeFieldContainer[Deletion]
    next_page_token: str
    def __init__(self, deletions: _Optional[_Iterable[_Union[Deletion, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetOwnerUsageRequest(_message.Message):
    __slots__ = ("from_day", "to_day")
    FROM_DAY_FIELD_NUMBER: _ClassVar[int]
    TO_DAY_FIELD_NUMBER: _ClassVar[int]
    from_day: str
    to_day: str
    def __init__(self, from_day: _Optional[str] = ..., to_day: _Optional[str] = ...) -> None: ...

class OwnerUsageDay(_message.Message):
    __slots__ = ("day", "runs", "failed_runs", "automation_runs", "input_tokens", "output_tokens", "duration_ms", "tokens_estimated")
    DAY_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    FAILED_RUNS_FIELD_NUMBER: _ClassVar[int]
    AUTOMATION_RUNS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    day: str
    runs: int
    failed_runs: int
    automation_runs: int
    input_tokens: int
    output_tokens: int
    duration_ms: int
    tokens_estimated: bool
    def __init__(self, day: _Optional[str] = ..., runs: _Optional[int] = ..., failed_runs: _Optional[int] = ..., automation_runs: _Optional[int] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., duration_ms: _Optional[int] = ..., tokens_estimated: _Optional[bool] = ...) -> None: ...

class GetOwnerUsageResponse(_message.Message):
    __slots__ = ("days",)
    DAYS_FIELD_NUMBER: _ClassVar[int]
    days: _containers.RepeatedCompositeFieldContainer[OwnerUsageDay]
    def __init__(self, days: _Optional[_Iterable[_Union[OwnerUsageDay, _Mapping]]] = ...) -> None: ...
