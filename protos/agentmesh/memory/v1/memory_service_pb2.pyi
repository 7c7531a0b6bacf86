import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from agentmesh.type.v1 import webhook_event_pb2 as _webhook_event_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Memory(_message.Message):
    __slots__ = ("id", "content", "kind", "source_run_id", "source_message_ids", "create_time", "update_time", "version", "score")
    ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SOURCE_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    id: str
    content: str
    kind: str
    source_run_id: str
    source_message_ids: _containers.RepeatedScalarFieldContainer[str]
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    version: int
    score: float
    def __init__(self, id: _Optional[str] = ..., content: _Optional[str] = ..., kind: _Optional[str] = ..., source_run_id: _Optional[str] = ..., source_message_ids: _Optional[_Iterable[str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[int] = ..., score: _Optional[float] = ...) -> None: ...

class WriteMemoryRequest(_message.Message):
    __slots__ = ("content", "kind", "source_run_id", "source_message_ids", "actor")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SOURCE_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    content: str
    kind: str
    source_run_id: str
    source_message_ids: _containers.RepeatedScalarFieldContainer[str]
    actor: str
    def __init__(self, content: _Optional[str] = ..., kind: _Optional[str] = ..., source_run_id: _Optional[str] = ..., source_message_ids: _Optional[_Iterable[str]] = ..., actor: _Optional[str] = ...) -> None: ...

class WriteMemoryResponse(_message.Message):
    __slots__ = ("memory", "created")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    created: bool
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class ForgetMemoryRequest(_message.Message):
    __slots__ = ("id", "content_query", "reason", "source_run_id", "source_message_ids", "actor")
    ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_QUERY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SOURCE_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    id: str
    content_query: str
    reason: str
    source_run_id: str
    source_message_ids: _containers.RepeatedScalarFieldContainer[str]
    actor: str
    def __init__(self, id: _Optional[str] = ..., content_query: _Optional[str] = ..., reason: _Optional[str] = ..., source_run_id: _Optional[str] = ..., source_message_ids: _Optional[_Iterable[str]] = ..., actor: _Optional[str] = ...) -> None: ...

class ForgetMemoryResponse(_message.Message):
    __slots__ = ("forgotten_ids", "memories")
    FORGOTTEN_IDS_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    forgotten_ids: _containers.RepeatedScalarFieldContainer[str]
    memories: _containers.RepeatedCompositeFieldContainer[Memory]
    def __init__(self, forgotten_ids: _Optional[_Iterable[str]] = ..., memories: _Optional[_Iterable[_Union[Memory, _Mapping]]] = ...) -> None: ...

class SearchMemoriesRequest(_message.Message):
    __slots__ = ("query", "page_size")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    query: str
    page_size: int
    def __init__(self, query: _Optional[str] = ..., page_size: _Optional[int] = ...) -> None: ...

class SearchMemoriesResponse(_message.Message):
    __slots__ = ("memories",)
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[Memory]
    def __init__(self, memories: _Optional[_Iterable[_Union[Memory, _Mapping]]] = ...) -> None: ...

class ListMemoriesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListMemoriesResponse(_message.Message):
    __slots__ = ("memories", "next_page_token")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[Memory]
    next_page_token: str
    def __init__(self, memories: _Optional[_Iterable[_Union[Memory, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetMemoryRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetMemoryResponse(_message.Message):
    __slots__ = ("memory",)
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ...) -> None: ...

class UpdateMemoryRequest(_message.Message):
    __slots__ = ("id", "content", "kind", "expected_version", "actor")
    ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    id: str
    content: str
    kind: str
    expected_version: int
    actor: str
    def __init__(self, id: _Optional[str] = ..., content: _Optional[str] = ..., kind: _Optional[str] = ..., expected_version: _Optional[int] = ..., actor: _Optional[str] = ...) -> None: ...

class UpdateMemoryResponse(_message.Message):
    __slots__ = ("memory",)
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ...) -> None: ...

class MemoryChange(_message.Message):
    __slots__ = ("action", "memory_id", "content", "kind", "previous_content", "actor", "source_run_id", "source_message_ids", "reason", "create_time")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_CONTENT_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    SOURCE_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    action: str
    memory_id: str
    content: str
    kind: str
    previous_content: str
    actor: str
    source_run_id: str
    source_message_ids: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, action: _Optional[str] = ..., memory_id: _Optional[str] = ..., content: _Optional[str] = ..., kind: _Optional[str] = ..., previous_content: _Optional[str] = ..., actor: _Optional[str] = ..., source_run_id: _Optional[str] = ..., source_message_ids: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListMemoryChangesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListMemoryChangesResponse(_message.Message):
    __slots__ = ("changes", "next_page_token")
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[MemoryChange]
    next_page_token: str
    def __init__(self, changes: _Optional[_Iterable[_Union[MemoryChange, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Watermark(_message.Message):
    __slots__ = ("name", "position", "time", "update_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    position: str
    time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., position: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetWatermarkRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetWatermarkResponse(_message.Message):
    __slots__ = ("watermark",)
    WATERMARK_FIELD_NUMBER: _ClassVar[int]
    watermark: Watermark
    def __init__(self, watermark: _Optional[_Union[Watermark, _Mapping]] = ...) -> None: ...

class AdvanceWatermarkRequest(_message.Message):
    __slots__ = ("name", "expected_position", "position", "time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_POSITION_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    expected_position: str
    position: str
    time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., expected_position: _Optional[str] = ..., position: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class AdvanceWatermarkResponse(_message.Message):
    __slots__ = ("watermark",)
    WATERMARK_FIELD_NUMBER: _ClassVar[int]
    watermark: Watermark
    def __init__(self, watermark: _Optional[_Union[Watermark, _Mapping]] = ...) -> None: ...

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

class ListWebhookEventsRequest(_message.Message):
    __slots__ = ("page_size",)
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    def __init__(self, page_size: _Optional[int] = ...) -> None: ...

class ListWebhookEventsResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_webhook_event_pb2.WebhookEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[_webhook_event_pb2.WebhookEvent, _Mapping]]] = ...) -> None: ...

class AcknowledgeWebhookEventsRequest(_message.Message):
    __slots__ = ("event_ids",)
    EVENT_IDS_FIELD_NUMBER: _ClassVar[int]
    event_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, event_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class AcknowledgeWebhookEventsResponse(_message.Message):
    __slots__ = ("acknowledged_count",)
    ACKNOWLEDGED_COUNT_FIELD_NUMBER: _ClassVar[int]
    acknowledged_count: int
    def __init__(self, acknowledged_count: _Optional[int] = ...) -> None: ...
