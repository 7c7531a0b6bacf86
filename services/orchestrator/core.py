"""Pure rules of a run: input validation, profile resolution, the step plan, the tools a run
offers, message metadata, event numbering, open spans, and what a user may see of an error.
No I/O."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from shared.domain import ExecutorKind, MessageKind, RuntimeMode
from shared.errors import (
    Aborted,
    AlreadyExists,
    DeadlineExceeded,
    DomainError,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from shared.messages import Msg, Role, ToolResultBlock
from shared.model.base import ToolSpec
from shared.profiles import CHAT_DEFAULT, ExecutionProfile, ProfileRegistry
from shared.tools import REGISTERED_TOOLS, effective_tools

MAX_ID_CHARS = 128
ROUTER_STEP = "router"


class MultitaskStrategy(StrEnum):
    """A new run on a thread with an active run (history decides; see its proto)."""

    REJECT = "reject"
    ENQUEUE = "enqueue"
    INTERRUPT = "interrupt"
    ROLLBACK = "rollback"


@dataclass(frozen=True)
class RunPolicy:
    """Timing of runs: the lease on the history record, how often it is renewed (which also
    bounds how long a cancel recorded by another replica takes to stop the run), how often a
    queued run asks for its turn, and how often expired leases are swept."""

    lease_seconds: float = 15.0
    queue_poll_seconds: float = 0.25

    @property
    def renew_seconds(self) -> float:
        return min(1.0, self.lease_seconds / 3)

    @property
    def sweep_seconds(self) -> float:
        return max(0.5, min(self.lease_seconds / 3, 5.0))

    @property
    def cancel_wait_seconds(self) -> float:
        """How long CancelRun waits for a run held by another replica to end."""
        return 2 * self.renew_seconds + 2.0


LEASE_EXPIRED = "LEASE_EXPIRED"
LEASE_EXPIRED_MESSAGE = (
    "the orchestrator running this run stopped (crashed or lost contact); the run failed. "
    "What it stored is in the thread's history"
)
QUEUED_EVENT = "agentmesh.run_queued"


@dataclass(frozen=True)
class RunPlan:
    """Everything a run needs, validated and resolved before it starts."""

    owner: str
    thread_id: str
    run_id: str
    origin: RuntimeMode
    profile: ExecutionProfile
    # The new input, ids assigned, kinds and metadata set (the last one is the user's message).
    inputs: tuple[Msg, ...]
    time_zone: str
    # Server-side tools the run may offer (names), before the router narrows them.
    server_tools: tuple[str, ...] = ()
    # Client-side tools the caller declared (AG-UI tools).
    client_tools: tuple[ToolSpec, ...] = ()
    multitask_strategy: MultitaskStrategy = MultitaskStrategy.ENQUEUE

    @property
    def input(self) -> Msg:
        return self.inputs[-1]


# ---- validation ---------------------------------------------------------------------


def check_identifier(value: str, field: str) -> str:
    if not value:
        raise InvalidArgument(field, "must not be empty")
    if len(value) > MAX_ID_CHARS:
        raise InvalidArgument(field, f"must be at most {MAX_ID_CHARS} characters")
    if any(ch.isspace() or unicodedata.category(ch).startswith("C") for ch in value):
        raise InvalidArgument(field, "must not contain spaces or control characters")
    return value


def input_kind(msg: Msg, field: str) -> MessageKind:
    """User messages, and tool results of client-side tools, are a run's possible input."""
    if msg.role is Role.USER:
        return MessageKind.USER_MESSAGE
    if msg.role is Role.ASSISTANT and msg.content and all(
        isinstance(b, ToolResultBlock) for b in msg.content
    ):
        return MessageKind.TOOL_RESULT
    raise InvalidArgument(f"{field}.role", "must be a user message or client tool results")


def check_inputs(messages: Sequence[Msg], max_chars: int) -> None:
    if not messages:
        raise InvalidArgument("messages", "must hold at least one message")
    for i, msg in enumerate(messages):
        if msg.id:
            check_identifier(msg.id, f"messages[{i}].id")
        if len(msg.text) > max_chars:
            raise InvalidArgument(f"messages[{i}].content", f"must be at most {max_chars} characters")
        input_kind(msg, f"messages[{i}]")
    last = len(messages) - 1
    if messages[last].role is not Role.USER:
        raise InvalidArgument(f"messages[{last}].role", "the last message must be the user's")
    if not messages[last].text.strip():
        raise InvalidArgument(f"messages[{last}].content", "the user message has no text")


# ---- profile and topology -----------------------------------------------------------


def resolve_profile(
    origin: RuntimeMode,
    profile_name: str,
    snapshot: ExecutionProfile | None,
    registry: ProfileRegistry,
) -> ExecutionProfile:
    """chat -> chat_default or the named registry profile; automation -> the job's snapshot.

    A chat caller may name only a worker profile: the memory executor works on the owner's
    whole conversation history with write tools, which only automation (a job the owner has)
    starts.
    """
    if origin is RuntimeMode.CHAT:
        if snapshot is not None:
            raise InvalidArgument("profile", "only automation runs carry a profile snapshot")
        profile = registry.get(profile_name or CHAT_DEFAULT.name)
        if profile.executor is not ExecutorKind.WORKER:
            raise InvalidArgument(
                "profile_name", f"profile {profile.name!r} is not available to chat runs (worker profiles only)"
            )
        return profile
    if profile_name:
        raise InvalidArgument("profile_name", "automation runs use their job's profile snapshot")
    if snapshot is None:
        raise InvalidArgument("profile", "automation runs must carry their job's execution profile")
    return snapshot


def plan_steps(profile: ExecutionProfile) -> tuple[str, ...]:
    """The steps of a run, by stepName: the router only when the profile enables it."""
    executor = profile.executor.value
    return (ROUTER_STEP, executor) if profile.enable_router else (executor,)


def server_tools_for(
    origin: RuntimeMode, profile: ExecutionProfile, declared: Iterable[str]
) -> tuple[str, ...]:
    """The run's effective server-side tools (shared.tools.effective_tools).

    An automation run declares its job's config.tools; a chat run declares its profile's
    allowlist (chat callers declare only client-side tools, which are theirs to run and not
    subject to the profile). The executor applies the same rule to every call.
    """
    if origin is RuntimeMode.CHAT:
        declared = profile.tool_policy.allowlist
    return effective_tools(declared, profile, REGISTERED_TOOLS)


def narrow(tools: Sequence[str], chosen: Iterable[str]) -> tuple[str, ...]:
    """`tools` restricted to `chosen`: a router's answer can only remove tools."""
    keep = set(chosen)
    return tuple(t for t in tools if t in keep)


def message_metadata(
    origin: RuntimeMode, profile: ExecutionProfile, kind: MessageKind
) -> dict[str, object]:
    """Metadata of every message a run writes (seed 001 §6.3)."""
    return {
        "hidden_from_user": origin is RuntimeMode.AUTOMATION and kind is MessageKind.USER_MESSAGE,
        "origin": origin.value,
        "executor": profile.executor.value,
        "execution_profile_name": profile.name,
    }


# ---- events -------------------------------------------------------------------------


def event_log_key(owner: str, run_id: str) -> str:
    """The run's event-log key; it names the owner, so another owner's lookup finds nothing.
    Owner ids cannot contain "/", so the key is unambiguous."""
    return f"{owner}/{run_id}"


@dataclass
class Sequencer:
    """Per-run sequence numbers: 1, 2, 3, ... with no gap."""

    last: int = 0

    def next(self) -> int:
        self.last += 1
        return self.last


# Event payloads an executor may send; the run's own lifecycle and steps are the orchestrator's.
RELAYED_PAYLOADS = frozenset(
    {
        "text_message_start",
        "text_message_content",
        "text_message_end",
        "tool_call_start",
        "tool_call_args",
        "tool_call_end",
        "tool_call_result",
        "reasoning_start",
        "reasoning_message_start",
        "reasoning_message_content",
        "reasoning_message_end",
        "reasoning_end",
        "custom",
    }
)


@dataclass
class OpenSpans:
    """What a run's stream has opened and not yet closed, and the text streamed so far.

    A cancelled run closes what is open (tool calls, text messages, steps; innermost first)
    before RUN_FINISHED, as AG-UI clients require, and stores the text it produced.
    """

    steps: list[str] = field(default_factory=list)
    texts: dict[str, list[str]] = field(default_factory=dict)
    open_texts: list[str] = field(default_factory=list)
    open_tool_calls: list[str] = field(default_factory=list)

    def step_started(self, name: str) -> None:
        self.steps.append(name)

    def step_finished(self, name: str) -> None:
        if name in self.steps:
            self.steps.remove(name)

    def text_started(self, message_id: str) -> None:
        self.texts.setdefault(message_id, [])
        self.open_texts.append(message_id)

    def text_delta(self, message_id: str, delta: str) -> None:
        self.texts.setdefault(message_id, []).append(delta)

    def text_ended(self, message_id: str) -> None:
        if message_id in self.open_texts:
            self.open_texts.remove(message_id)

    def tool_call_started(self, tool_call_id: str) -> None:
        self.open_tool_calls.append(tool_call_id)

    def tool_call_ended(self, tool_call_id: str) -> None:
        if tool_call_id in self.open_tool_calls:
            self.open_tool_calls.remove(tool_call_id)

    def closing(self) -> list[tuple[str, str]]:
        """(payload, id) of the events that close everything open, innermost first."""
        return [
            *(("tool_call_end", c) for c in reversed(self.open_tool_calls)),
            *(("text_message_end", m) for m in reversed(self.open_texts)),
            *(("step_finished", s) for s in reversed(self.steps)),
        ]

    def partial_texts(self, stored_ids: Iterable[str]) -> list[tuple[str, str]]:
        """(message id, text) of streamed text whose message the executor never delivered."""
        stored = set(stored_ids)
        return [
            (mid, "".join(parts))
            for mid, parts in self.texts.items()
            if mid not in stored and "".join(parts)
        ]


# ---- errors -------------------------------------------------------------------------

# Errors whose message was written for the caller (validation, state): shown as they are.
_CALLER_FACING = (
    InvalidArgument,
    NotFound,
    AlreadyExists,
    FailedPrecondition,
    Aborted,
    PermissionDenied,
    Unauthenticated,
    ResourceExhausted,
)


def as_domain_error(exc: BaseException) -> DomainError:
    if isinstance(exc, DomainError):
        return exc
    if isinstance(exc, TimeoutError):
        return DeadlineExceeded("the run did not finish in time")
    return Internal("internal error")


def user_error(err: DomainError) -> tuple[str, str]:
    """(code, message) of a RUN_ERROR: the reason, and a message with no internals."""
    if isinstance(err, _CALLER_FACING):
        return err.reason, err.message
    if isinstance(err, Unavailable):
        return err.reason, "a service this run needs is unavailable; try again shortly"
    if isinstance(err, DeadlineExceeded):
        return err.reason, "the run did not finish in time"
    return "INTERNAL", "the run failed because of an internal error"


# ---- retrying an executor step ------------------------------------------------------

# Attempts of one executor step whose replica was unavailable before the step produced
# anything, and the pause before the second attempt (doubled before each later one).
EXECUTOR_STEP_ATTEMPTS = 3
EXECUTOR_RETRY_BACKOFF_SECONDS = 0.2


def retries_executor_step(
    error: DomainError, produced: bool, attempt: int, attempts: int = EXECUTOR_STEP_ATTEMPTS
) -> bool:
    """Whether a failed executor step is tried again (the channel's round robin sends the
    new attempt to a replica that is up). Only when its replica was unavailable (died, shut
    down, or could not be reached) and nothing of the step reached the run yet: a step that
    relayed an event or delivered a message may have run tools and has shown its output,
    so running it again could repeat both. And only `attempts` times in all."""
    # A model's failure is not its replica's: the model layer retried it already (its card's
    # max_retries), another replica would call the same endpoint.
    model_failed = error.reason.startswith("MODEL_")
    return isinstance(error, Unavailable) and not model_failed and not produced and attempt < attempts


def executor_retry_delay(attempt: int) -> float:
    """The pause after failed attempt number `attempt` (1, 2, ...)."""
    return EXECUTOR_RETRY_BACKOFF_SECONDS * 2 ** (attempt - 1)
