"""The JSON shapes of the gateway's HTTP API (docs/protocols/agent/api-endpoints.md) as
pydantic models: snake_case attributes, camelCase on the wire, unknown keys kept (a newer
gateway may add fields; an older client must not fail on them)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    def to_json(self) -> dict[str, Any]:
        """The object as the API spells it (camelCase, unset fields left out)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# ---- threads, history, runs ------------------------------------------------------------------


class Thread(ApiModel):
    id: str
    runtime_mode: str = ""
    message_count: int = 0
    create_time: datetime | None = None
    update_time: datetime | None = None


class ThreadPage(ApiModel):
    threads: list[Thread] = Field(default_factory=list)
    next_page_token: str | None = None


class ToolCallFunction(ApiModel):
    name: str
    arguments: str = ""


class ToolCall(ApiModel):
    id: str
    type: str = "function"
    function: ToolCallFunction


class MessageMetadata(ApiModel):
    hidden_from_user: bool = False
    origin: str | None = None
    executor: str | None = None
    execution_profile_name: str | None = None


class Message(ApiModel):
    """A stored message in the AG-UI message shape plus agentmesh's fields."""

    id: str
    role: str
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    error: str | None = None
    name: str | None = None
    thread_id: str | None = None
    run_id: str | None = None
    kind: str | None = None
    create_time: datetime | None = Field(default=None, alias="createdAt")
    finished_reason: str | None = None
    metadata: MessageMetadata = Field(default_factory=MessageMetadata)
    visibility_mask: int | None = None

    @property
    def text(self) -> str:
        """The message's text: the string content, or its text parts joined."""
        if isinstance(self.content, str):
            return self.content
        if isinstance(self.content, list):
            return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return ""


class MessagePage(ApiModel):
    messages: list[Message] = Field(default_factory=list)
    next_page_token: str | None = None


class HistoryPolicy(ApiModel):
    window: str


class ToolPolicy(ApiModel):
    mode: str = "intersection"
    allowlist: list[str] = Field(default_factory=list)


class ExecutionProfile(ApiModel):
    name: str | None = None
    enable_router: bool
    executor: str | None = None
    tool_policy: ToolPolicy | None = None
    history_policy: HistoryPolicy | None = None


class RunError(ApiModel):
    code: str = ""
    message: str = ""


class Usage(ApiModel):
    """A run's token counts; `estimated` when agentmesh counted them (the model reported none)."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    estimated: bool = False


class Run(ApiModel):
    """A run record (GET /api/v1/agent/runs/{run_id})."""

    id: str
    thread_id: str
    state: str = ""
    origin: str | None = None
    profile: ExecutionProfile | None = None
    create_time: datetime | None = None
    start_time: datetime | None = None
    finish_time: datetime | None = None
    error: RunError | None = None
    cancel_requested: bool = False
    rolled_back: bool = False
    # As RUN_FINISHED carries it (a one-item list); empty while none is recorded.
    usage: list[Usage] = Field(default_factory=list)


class CancelResult(ApiModel):
    run_id: str
    thread_id: str = ""
    state: str = ""
    cancelled: bool = False


class ToolDenial(ApiModel):
    owner_id: str
    run_id: str
    thread_id: str
    tool_call_id: str
    tool_name: str
    arguments_sha256: str
    reason: str | None = None
    origin: str | None = None
    executor: str | None = None
    execution_profile_name: str | None = None
    create_time: datetime | None = None


class AuditPage(ApiModel):
    messages: list[Message] = Field(default_factory=list)
    tool_denials: list[ToolDenial] = Field(default_factory=list)
    next_page_token: str | None = None


# ---- memories --------------------------------------------------------------------------------


class Memory(ApiModel):
    id: str
    content: str
    kind: str | None = None
    version: int = 0
    source_run_id: str | None = None
    source_message_ids: list[str] = Field(default_factory=list)
    create_time: datetime | None = None
    update_time: datetime | None = None
    # A search result's relevance (0..1, higher is better), when the gateway gives one.
    score: float | None = None


class MemoryPage(ApiModel):
    memories: list[Memory] = Field(default_factory=list)
    next_page_token: str | None = None


class MemoryChange(ApiModel):
    """One entry of the change record: `action` write, rewrite, update or forget; `actor` run
    (then `source_run_id`) or api."""

    action: str
    memory_id: str
    content: str = ""
    actor: str = ""
    kind: str | None = None
    previous_content: str | None = None
    source_run_id: str | None = None
    source_message_ids: list[str] = Field(default_factory=list)
    reason: str | None = None
    create_time: datetime | None = None


class MemoryChangePage(ApiModel):
    changes: list[MemoryChange] = Field(default_factory=list)
    next_page_token: str | None = None


# ---- automation ------------------------------------------------------------------------------


class Schedule(ApiModel):
    type: str
    run_at: str | None = None
    local_time: str | None = None
    weekday: int | None = None
    cron: str | None = None


class JobConfig(ApiModel):
    prompt: str
    tools: list[str] = Field(default_factory=list)


class Job(ApiModel):
    id: str
    title: str
    schedule: Schedule
    timezone: str = ""
    status: str = ""
    config: JobConfig
    execution_profile: ExecutionProfile | None = None
    catch_up_policy: str | None = None
    jitter_seconds: int = 0
    version: int = 0
    default_job: bool = False
    next_run_time: datetime | None = None
    next_slot_time: datetime | None = None
    last_slot_time: datetime | None = None
    last_run_time: datetime | None = None
    create_time: datetime | None = None
    update_time: datetime | None = None


class JobPage(ApiModel):
    jobs: list[Job] = Field(default_factory=list)
    next_page_token: str | None = None


class AttemptError(ApiModel):
    attempt: int
    error: str
    time: datetime | None = None


class JobRun(ApiModel):
    id: str
    job_id: str
    state: str
    trigger: str = ""
    attempt: int = 0
    errors: list[AttemptError] = Field(default_factory=list)
    run_id: str | None = None
    scheduled_slot: datetime | None = None
    dispatch_time: datetime | None = None
    next_attempt_time: datetime | None = None
    create_time: datetime | None = None
    finish_time: datetime | None = None


class JobRunPage(ApiModel):
    runs: list[JobRun] = Field(default_factory=list)
    next_page_token: str | None = None


class Registration(ApiModel):
    owner_id: str
    jobs: list[Job] = Field(default_factory=list)
