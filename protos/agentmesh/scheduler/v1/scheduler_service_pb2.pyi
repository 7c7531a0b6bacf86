import datetime

from agentmesh.type.v1 import execution_profile_pb2 as _execution_profile_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from agentmesh.type.v1 import webhook_event_pb2 as _webhook_event_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScheduleType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCHEDULE_TYPE_UNSPECIFIED: _ClassVar[ScheduleType]
    SCHEDULE_TYPE_ONCE: _ClassVar[ScheduleType]
    SCHEDULE_TYPE_DAILY: _ClassVar[ScheduleType]
    SCHEDULE_TYPE_WEEKLY: _ClassVar[ScheduleType]
    SCHEDULE_TYPE_CRON: _ClassVar[ScheduleType]

class JobStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATUS_UNSPECIFIED: _ClassVar[JobStatus]
    JOB_STATUS_ACTIVE: _ClassVar[JobStatus]
    JOB_STATUS_PAUSED: _ClassVar[JobStatus]
    JOB_STATUS_COMPLETED: _ClassVar[JobStatus]
    JOB_STATUS_FAILED: _ClassVar[JobStatus]

class CatchUpPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CATCH_UP_POLICY_UNSPECIFIED: _ClassVar[CatchUpPolicy]
    CATCH_UP_POLICY_LATEST: _ClassVar[CatchUpPolicy]
    CATCH_UP_POLICY_SKIP: _ClassVar[CatchUpPolicy]
    CATCH_UP_POLICY_ALL: _ClassVar[CatchUpPolicy]

class JobRunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_RUN_STATE_UNSPECIFIED: _ClassVar[JobRunState]
    JOB_RUN_STATE_PENDING: _ClassVar[JobRunState]
    JOB_RUN_STATE_DISPATCHING: _ClassVar[JobRunState]
    JOB_RUN_STATE_SUCCEEDED: _ClassVar[JobRunState]
    JOB_RUN_STATE_FAILED: _ClassVar[JobRunState]
    JOB_RUN_STATE_MISSED: _ClassVar[JobRunState]

class JobRunTrigger(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_RUN_TRIGGER_UNSPECIFIED: _ClassVar[JobRunTrigger]
    JOB_RUN_TRIGGER_SCHEDULE: _ClassVar[JobRunTrigger]
    JOB_RUN_TRIGGER_MANUAL: _ClassVar[JobRunTrigger]
SCHEDULE_TYPE_UNSPECIFIED: ScheduleType
SCHEDULE_TYPE_ONCE: ScheduleType
SCHEDULE_TYPE_DAILY: ScheduleType
SCHEDULE_TYPE_WEEKLY: ScheduleType
SCHEDULE_TYPE_CRON: ScheduleType
JOB_STATUS_UNSPECIFIED: JobStatus
JOB_STATUS_ACTIVE: JobStatus
JOB_STATUS_PAUSED: JobStatus
JOB_STATUS_COMPLETED: JobStatus
JOB_STATUS_FAILED: JobStatus
CATCH_UP_POLICY_UNSPECIFIED: CatchUpPolicy
CATCH_UP_POLICY_LATEST: CatchUpPolicy
CATCH_UP_POLICY_SKIP: CatchUpPolicy
CATCH_UP_POLICY_ALL: CatchUpPolicy
JOB_RUN_STATE_UNSPECIFIED: JobRunState
JOB_RUN_STATE_PENDING: JobRunState
JOB_RUN_STATE_DISPATCHING: JobRunState
JOB_RUN_STATE_SUCCEEDED: JobRunState
JOB_RUN_STATE_FAILED: JobRunState
JOB_RUN_STATE_MISSED: JobRunState
JOB_RUN_TRIGGER_UNSPECIFIED: JobRunTrigger
JOB_RUN_TRIGGER_SCHEDULE: JobRunTrigger
JOB_RUN_TRIGGER_MANUAL: JobRunTrigger

class Schedule(_message.Message):
    __slots__ = ("type", "run_at", "local_time", "weekday", "cron")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    LOCAL_TIME_FIELD_NUMBER: _ClassVar[int]
    WEEKDAY_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    type: ScheduleType
    run_at: _timestamp_pb2.Timestamp
    local_time: str
    weekday: int
    cron: str
    def __init__(self, type: _Optional[_Union[ScheduleType, str]] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., local_time: _Optional[str] = ..., weekday: _Optional[int] = ..., cron: _Optional[str] = ...) -> None: ...

class JobConfig(_message.Message):
    __slots__ = ("prompt", "tools")
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    prompt: str
    tools: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, prompt: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "title", "schedule", "timezone", "status", "config", "execution_profile", "next_run_time", "last_run_time", "version", "catch_up_policy", "jitter_seconds", "create_time", "update_time", "next_slot_time", "last_slot_time", "default_job")
    ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_PROFILE_FIELD_NUMBER: _ClassVar[int]
    NEXT_RUN_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_RUN_TIME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_POLICY_FIELD_NUMBER: _ClassVar[int]
    JITTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    NEXT_SLOT_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_SLOT_TIME_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_JOB_FIELD_NUMBER: _ClassVar[int]
    id: str
    title: str
    schedule: Schedule
    timezone: str
    status: JobStatus
    config: JobConfig
    execution_profile: _execution_profile_pb2.ExecutionProfile
    next_run_time: _timestamp_pb2.Timestamp
    last_run_time: _timestamp_pb2.Timestamp
    version: int
    catch_up_policy: CatchUpPolicy
    jitter_seconds: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    next_slot_time: _timestamp_pb2.Timestamp
    last_slot_time: _timestamp_pb2.Timestamp
    default_job: bool
    def __init__(self, id: _Optional[str] = ..., title: _Optional[str] = ..., schedule: _Optional[_Union[Schedule, _Mapping]] = ..., timezone: _Optional[str] = ..., status: _Optional[_Union[JobStatus, str]] = ..., config: _Optional[_Union[JobConfig, _Mapping]] = ..., execution_profile: _Optional[_Union[_execution_profile_pb2.ExecutionProfile, _Mapping]] = ..., next_run_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_run_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[int] = ..., catch_up_policy: _Optional[_Union[CatchUpPolicy, str]] = ..., jitter_seconds: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_slot_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_slot_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., default_job: _Optional[bool] = ...) -> None: ...

class JobRunError(_message.Message):
    __slots__ = ("attempt", "error", "time")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    error: str
    time: _timestamp_pb2.Timestamp
    def __init__(self, attempt: _Optional[int] = ..., error: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class JobRun(_message.Message):
    __slots__ = ("id", "job_id", "scheduled_slot", "state", "attempt", "orchestrator_run_id", "dispatch_time", "errors", "trigger", "lease_owner", "lease_expire_time", "next_attempt_time", "create_time", "finish_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_SLOT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ORCHESTRATOR_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_TIME_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    job_id: str
    scheduled_slot: _timestamp_pb2.Timestamp
    state: JobRunState
    attempt: int
    orchestrator_run_id: str
    dispatch_time: _timestamp_pb2.Timestamp
    errors: _containers.RepeatedCompositeFieldContainer[JobRunError]
    trigger: JobRunTrigger
    lease_owner: str
    lease_expire_time: _timestamp_pb2.Timestamp
    next_attempt_time: _timestamp_pb2.Timestamp
    create_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., job_id: _Optional[str] = ..., scheduled_slot: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state: _Optional[_Union[JobRunState, str]] = ..., attempt: _Optional[int] = ..., orchestrator_run_id: _Optional[str] = ..., dispatch_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., errors: _Optional[_Iterable[_Union[JobRunError, _Mapping]]] = ..., trigger: _Optional[_Union[JobRunTrigger, str]] = ..., lease_owner: _Optional[str] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_attempt_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateJobRequest(_message.Message):
    __slots__ = ("job", "request_id")
    JOB_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    job: Job
    request_id: str
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateJobRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class UpdateJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class DeleteJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class DeleteJobResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PauseJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class PauseJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class ResumeJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ResumeJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class TriggerJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class TriggerJobResponse(_message.Message):
    __slots__ = ("job_run",)
    JOB_RUN_FIELD_NUMBER: _ClassVar[int]
    job_run: JobRun
    def __init__(self, job_run: _Optional[_Union[JobRun, _Mapping]] = ...) -> None: ...

class ListJobRunsRequest(_message.Message):
    __slots__ = ("job_id", "page_size", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    page_size: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobRunsResponse(_message.Message):
    __slots__ = ("job_runs", "next_page_token")
    JOB_RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_runs: _containers.RepeatedCompositeFieldContainer[JobRun]
    next_page_token: str
    def __init__(self, job_runs: _Optional[_Iterable[_Union[JobRun, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class EnsureDefaultJobsRequest(_message.Message):
    __slots__ = ("timezone",)
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    timezone: str
    def __init__(self, timezone: _Optional[str] = ...) -> None: ...

class EnsureDefaultJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ...) -> None: ...

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
