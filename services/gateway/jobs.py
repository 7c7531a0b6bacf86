"""Automation jobs at the HTTP edge: the JSON a caller sends (pydantic, camelCase) to the
scheduler's protobuf, and the scheduler's Job and JobRun back to JSON.

docs/protocols/agent/api-endpoints.md ("Automation jobs") is the prose version of this
module. The gateway checks the shape (types, unknown fields, enum values); the scheduler
checks the meaning (schedule, zone, prompt, tools, ranges), so each rule lives in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from agentmesh.scheduler.v1 import scheduler_service_pb2 as pb
from agentmesh.type.v1 import execution_profile_pb2
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from services.gateway.convert import profile_json, timestamp
from services.gateway.errors import ApiError, camel_field, invalid
from services.gateway.strict import RFC3339, field_path, instant
from shared.errors import InvalidArgument
from shared.profiles import parse_profile, profile_to_pb

_INT32_MAX = 2**31 - 1

M = TypeVar("M", bound=BaseModel)

SCHEDULE_TYPES: dict[str, pb.ScheduleType.ValueType] = {
    "once": pb.SCHEDULE_TYPE_ONCE,
    "daily": pb.SCHEDULE_TYPE_DAILY,
    "weekly": pb.SCHEDULE_TYPE_WEEKLY,
    "cron": pb.SCHEDULE_TYPE_CRON,
}
SCHEDULE_TYPE_NAMES = {v: k for k, v in SCHEDULE_TYPES.items()}
CATCH_UP_POLICIES: dict[str, pb.CatchUpPolicy.ValueType] = {
    "latest": pb.CATCH_UP_POLICY_LATEST,
    "skip": pb.CATCH_UP_POLICY_SKIP,
    "all": pb.CATCH_UP_POLICY_ALL,
}
CATCH_UP_NAMES = {v: k for k, v in CATCH_UP_POLICIES.items()}
STATUS_NAMES = {
    pb.JOB_STATUS_ACTIVE: "active",
    pb.JOB_STATUS_PAUSED: "paused",
    pb.JOB_STATUS_COMPLETED: "completed",
    pb.JOB_STATUS_FAILED: "failed",
}
RUN_STATE_NAMES = {
    pb.JOB_RUN_STATE_PENDING: "pending",
    pb.JOB_RUN_STATE_DISPATCHING: "dispatching",
    pb.JOB_RUN_STATE_SUCCEEDED: "succeeded",
    pb.JOB_RUN_STATE_FAILED: "failed",
    pb.JOB_RUN_STATE_MISSED: "missed",
}
TRIGGER_NAMES = {
    pb.JOB_RUN_TRIGGER_SCHEDULE: "schedule",
    pb.JOB_RUN_TRIGGER_MANUAL: "manual",
}

# The owner-chosen fields of a job (what PATCH merges onto; the rest is output only).
INPUT_FIELDS = (
    "title",
    "schedule",
    "timezone",
    "config",
    "executionProfile",
    "catchUpPolicy",
    "jitterSeconds",
)
# Camel-case keys of an execution profile and the field names of shared.profiles.
_PROFILE_KEYS = {
    "enableRouter": "enable_router",
    "toolPolicy": "tool_policy",
    "historyPolicy": "history_policy",
}
_PROFILE_JSON_KEYS = frozenset({"name", "executor", "memory", *_PROFILE_KEYS})
# Camel-case keys of a memory policy (shared.profiles.MemoryPolicy).
_MEMORY_KEYS = {
    "mode": "mode",
    "topK": "top_k",
    "minRelevance": "min_relevance",
    "maxTokens": "max_tokens",
    "conversation": "conversation",
}
_CAMEL = {snake: camel for camel, snake in _PROFILE_KEYS.items()}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=False)


class ScheduleIn(_Strict):
    type: Literal["once", "daily", "weekly", "cron"]
    run_at: Annotated[AwareDatetime, RFC3339] | None = None
    local_time: StrictStr | None = None
    weekday: StrictInt | None = Field(default=None, ge=0, le=_INT32_MAX)
    cron: StrictStr | None = None


class ConfigIn(_Strict):
    prompt: StrictStr
    tools: list[StrictStr] = []


class JobIn(_Strict):
    """A job as a caller writes it (POST, PUT, and a PATCH merged onto the stored job).

    Output-only fields a client read with GET may be sent back unchanged: they are ignored.
    """

    title: StrictStr
    schedule: ScheduleIn
    config: ConfigIn
    timezone: StrictStr | None = None
    execution_profile: dict[str, Any] | None = None
    catch_up_policy: Literal["latest", "skip", "all"] | None = None
    jitter_seconds: StrictInt | None = Field(default=None, ge=0, le=_INT32_MAX)
    # The version an update is based on (PUT and PATCH require it; POST ignores it).
    version: StrictInt | None = Field(default=None, ge=1)
    # Output only, ignored.
    id: Any = None
    status: Any = None
    default_job: Any = None
    next_run_time: Any = None
    next_slot_time: Any = None
    last_run_time: Any = None
    last_slot_time: Any = None
    create_time: Any = None
    update_time: Any = None


class RegisterIn(_Strict):
    """POST /api/v1/users."""

    timezone: StrictStr | None = Field(default=None, max_length=64)


_DESCRIPTIONS = {
    "missing": "is required",
    "extra_forbidden": "is not a known field",
    "timezone_aware": "needs a time zone offset (RFC 3339, e.g. 2025-01-02T10:00:00+08:00)",
}


def validate(model: type[M], data: Mapping[str, Any]) -> M:
    """`data` as `model`; 400 naming the first bad field (camelCase path) otherwise."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = field_path(tuple(first["loc"])) or "body"
        raise invalid(field, _DESCRIPTIONS.get(first["type"], first["msg"])) from None


def _profile_pb(data: dict[str, Any]) -> execution_profile_pb2.ExecutionProfile:
    """The profile by the one set of profile rules (shared.profiles), fields named in camelCase.

    Only the camelCase spelling is a field of the JSON: `enable_router` beside `enableRouter`
    would otherwise be a second name for one field (and both at once, one of them ignored)."""
    for key in data:
        if key not in _PROFILE_JSON_KEYS:
            hint = f" (the JSON name is {_CAMEL[key]})" if key in _CAMEL else ""
            raise invalid(f"executionProfile.{key}", f"is not a known field{hint}")
    snake = {_PROFILE_KEYS.get(k, k): v for k, v in data.items()}
    memory = snake.get("memory")
    if isinstance(memory, dict):
        for key in memory:
            if key not in _MEMORY_KEYS:
                raise invalid(f"executionProfile.memory.{key}", "is not a known field")
        snake["memory"] = {_MEMORY_KEYS[k]: v for k, v in memory.items()}
    try:
        profile = parse_profile(snake, field="execution_profile")
    except InvalidArgument as err:
        field, description = err.violations[0] if err.violations else ("", err.message)
        raise invalid(camel_field(field) or "executionProfile", description) from None
    return profile_to_pb(profile)


def job_pb(job: JobIn, *, job_id: str = "", version: int = 0) -> pb.Job:
    out = pb.Job(
        id=job_id,
        title=job.title,
        timezone=job.timezone or "",
        config=pb.JobConfig(prompt=job.config.prompt, tools=job.config.tools),
        catch_up_policy=CATCH_UP_POLICIES.get(
            job.catch_up_policy or "", pb.CATCH_UP_POLICY_UNSPECIFIED
        ),
        jitter_seconds=job.jitter_seconds or 0,
        version=version,
    )
    s = job.schedule
    out.schedule.type = SCHEDULE_TYPES[s.type]
    out.schedule.local_time = s.local_time or ""
    out.schedule.weekday = s.weekday or 0
    out.schedule.cron = s.cron or ""
    if s.run_at is not None:
        out.schedule.run_at.CopyFrom(instant("schedule.runAt", s.run_at))
    if job.execution_profile is not None:
        out.execution_profile.CopyFrom(_profile_pb(job.execution_profile))
    return out


def merge_patch(current: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """JSON Merge Patch (RFC 7396) one level deep: a key in `patch` replaces the current
    value whole (schedule, config and executionProfile included); null resets it."""
    merged = {k: v for k, v in current.items() if k in INPUT_FIELDS}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def _ts(message: Any, field: str) -> str | None:
    return timestamp(getattr(message, field)) if message.HasField(field) else None


def schedule_json(s: pb.Schedule) -> dict[str, Any]:
    out: dict[str, Any] = {"type": SCHEDULE_TYPE_NAMES.get(s.type, "unspecified")}
    if s.HasField("run_at"):
        out["runAt"] = timestamp(s.run_at)
    if s.local_time:
        out["localTime"] = s.local_time
    if s.weekday:
        out["weekday"] = s.weekday
    if s.cron:
        out["cron"] = s.cron
    return out


def job_json(j: pb.Job) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": j.id,
        "title": j.title,
        "schedule": schedule_json(j.schedule),
        "timezone": j.timezone,
        "status": STATUS_NAMES.get(j.status, "unspecified"),
        "config": {"prompt": j.config.prompt, "tools": list(j.config.tools)},
        "executionProfile": profile_json(j.execution_profile),
        "catchUpPolicy": CATCH_UP_NAMES.get(j.catch_up_policy, "latest"),
        "jitterSeconds": j.jitter_seconds,
        "version": j.version,
        "defaultJob": j.default_job,
    }
    for key, field in (
        ("nextRunTime", "next_run_time"),
        ("nextSlotTime", "next_slot_time"),
        ("lastRunTime", "last_run_time"),
        ("lastSlotTime", "last_slot_time"),
        ("createTime", "create_time"),
        ("updateTime", "update_time"),
    ):
        value = _ts(j, field)
        if value is not None:
            out[key] = value
    return out


def _run_error_json(e: pb.JobRunError) -> dict[str, Any]:
    out: dict[str, Any] = {"attempt": e.attempt, "error": e.error}
    if e.HasField("time"):
        out["time"] = timestamp(e.time)
    return out


def job_run_json(r: pb.JobRun) -> dict[str, Any]:
    """One run of a job. The replica holding its lease is internal and not shown."""
    out: dict[str, Any] = {
        "id": r.id,
        "jobId": r.job_id,
        "state": RUN_STATE_NAMES.get(r.state, "unspecified"),
        "trigger": TRIGGER_NAMES.get(r.trigger, "schedule"),
        "attempt": r.attempt,
        "errors": [_run_error_json(e) for e in r.errors],
    }
    if r.orchestrator_run_id:
        out["runId"] = r.orchestrator_run_id
    for key, field in (
        ("scheduledSlot", "scheduled_slot"),
        ("dispatchTime", "dispatch_time"),
        ("nextAttemptTime", "next_attempt_time"),
        ("createTime", "create_time"),
        ("finishTime", "finish_time"),
    ):
        value = _ts(r, field)
        if value is not None:
            out[key] = value
    return out


def api_field(name: str) -> str:
    """A scheduler field name as the HTTP caller wrote it: job.jitter_seconds -> jitterSeconds,
    job.schedule.run_at -> schedule.runAt, request_id -> the Idempotency-Key header."""
    if name == "request_id":
        return "Idempotency-Key"
    if name in ("job_id", "job.id"):
        return "jobId"
    if name.startswith("job."):
        return camel_field(name[len("job.") :])
    return name


def renamed(err: ApiError) -> ApiError:
    """`err` (a scheduler error) with its field names as the caller wrote them."""
    if not err.violations:
        return err
    message = err.message
    violations = []
    for field, description in err.violations:
        name = api_field(field)
        if message.startswith(f"{field}:"):
            message = f"{name}:{message[len(field) + 1 :]}"
        violations.append((name, description))
    return ApiError(err.status, err.code, message, violations=violations, headers=err.headers)
