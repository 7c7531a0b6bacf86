"""Pure rules of a run: input validation, profile resolution, the step plan, the tools a run
offers, message metadata, the run's lifecycle, event numbering, open spans, and what a user
may see of an error. No I/O."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from services.history.visibility import in_context, visibility_mask_for
from shared import errors, run_events
from shared.approvals import Decision
from shared.domain import (
    AUTOMATION_THREAD_PREFIX,
    TERMINAL_RUN_STATES,
    ExecutorKind,
    MessageKind,
    RunState,
    RuntimeMode,
    is_automation_thread_id,
)
from shared.errors import (
    Aborted,
    AlreadyExists,
    DeadlineExceeded,
    DomainError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from shared.ids import check_identifier
from shared.messages import Msg, Role, ToolResultBlock, Usage, assistant
from shared.model.base import ToolSpec
from shared.model.tokens import text_tokens
from shared.profiles import CHAT_DEFAULT, ExecutionProfile, ProfileRegistry
from shared.text import check_storable
from shared.tools import BUILTIN_KNOWN, KnownTools, effective_tools, matches, planned_tools

ROUTER_STEP = "router"


class MultitaskStrategy(StrEnum):
    """A new run on a thread with an active run (history decides; see its proto)."""

    REJECT = "reject"
    ENQUEUE = "enqueue"
    INTERRUPT = "interrupt"
    ROLLBACK = "rollback"


# Strategies whose admission cancels the thread's active runs (history marks them).
CANCELLING_STRATEGIES = frozenset({MultitaskStrategy.INTERRUPT, MultitaskStrategy.ROLLBACK})


@dataclass(frozen=True)
class RunPolicy:
    """Timing of runs: the lease on the history record, how often it is renewed (which also
    bounds how long a cancel recorded by another replica takes to stop the run), how often a
    queued run asks for its turn, and how often expired leases are swept."""

    lease_seconds: float = 15.0
    queue_poll_seconds: float = 0.25
    # How long a tool call waits for a person's approval before it is denied.
    approval_ttl_seconds: float = 3600.0

    @property
    def approval_ttl(self) -> timedelta:
        return timedelta(seconds=self.approval_ttl_seconds)

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


# The end of a run's stream lost while the run goes on (its event log failed): its outcome
# is in its record, not in the stream (docs/protocols/agent/sse-events.md, "Errors").
OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
OUTCOME_UNKNOWN_MESSAGE = (
    "the run's event stream was lost but the run goes on; its outcome is pending: read the "
    "run's record (do not send the run again with a new run id)"
)
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
    # Answers to the thread's waiting approvals (AG-UI resume), as the caller gave them.
    decisions: tuple[Decision, ...] = ()

    @property
    def input(self) -> Msg:
        return self.inputs[-1]


# ---- validation ---------------------------------------------------------------------


def check_thread_for_origin(thread_id: str, origin: RuntimeMode) -> None:
    """A chat run may not name a job's thread (the reserved automation namespace): refused
    before anything is stored, so the thread stays the job's."""
    if origin is RuntimeMode.CHAT and is_automation_thread_id(thread_id):
        description = (
            f"threads named {AUTOMATION_THREAD_PREFIX}<job id> belong to automation jobs; "
            "a chat run cannot use them"
        )
        raise FailedPrecondition(
            description,
            reason="AUTOMATION_THREAD",
            violations=[("thread_id", description)],
        )


def input_kind(msg: Msg, field: str) -> MessageKind:
    """User messages, and tool results of client-side tools, are a run's possible input."""
    if msg.role is Role.USER:
        return MessageKind.USER_MESSAGE
    if (
        msg.role is Role.ASSISTANT
        and msg.content
        and all(isinstance(b, ToolResultBlock) for b in msg.content)
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
            raise InvalidArgument(
                f"messages[{i}].content", f"must be at most {max_chars} characters"
            )
        check_storable(msg.text, f"messages[{i}].content")
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
                "profile_name",
                f"profile {profile.name!r} is not available to chat runs (worker profiles only)",
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
    origin: RuntimeMode,
    profile: ExecutionProfile,
    declared: Iterable[str],
    known: KnownTools = BUILTIN_KNOWN,
) -> tuple[str, ...]:
    """The run's server-side tool declaration (shared.tools.planned_tools): names and
    patterns of the deployment's tools (`known`) the profile may allow.

    An automation run declares its job's config.tools; a chat run declares its profile's
    allowlist (chat callers declare only client-side tools, which are theirs to run and not
    subject to the profile). The executor intersects it with the tools it really has, and
    applies the same rule to every call.
    """
    if origin is RuntimeMode.CHAT:
        declared = profile.tool_policy.allowlist
    return planned_tools(declared, profile, known)


def tools_for_chat(
    profile: ExecutionProfile,
    registered: Sequence[tuple[str, bool]],
    known: KnownTools = BUILTIN_KNOWN,
) -> tuple[list[str], list[str]]:
    """What a chat run on `profile` may call of the executor's `registered` (name, whether
    its source requires approval) tools, and which of those need approval: the same rule a
    run applies (server_tools_for, then the executor's effective_tools)."""
    declared = server_tools_for(RuntimeMode.CHAT, profile, (), known)
    needs = dict(registered)
    effective = list(effective_tools(declared, profile, needs))
    asking = [n for n in effective if needs[n] or matches(profile.tool_policy.requires_approval, n)]
    return effective, asking


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


def stamped(msg: Msg, plan: RunPlan) -> Msg:
    """A message the run writes (an agent reply unless it says otherwise), with the run's
    ids, kind and metadata."""
    kind = msg.kind or MessageKind.AGENT_REPLY
    return dataclasses.replace(
        msg,
        thread_id=plan.thread_id,
        run_id=plan.run_id,
        kind=kind,
        metadata={**msg.metadata, **message_metadata(plan.origin, plan.profile, kind)},
    )


# What conversation recall indexes of a chat run (services/memory/conversation.py).
RECALLABLE_KINDS = (MessageKind.USER_MESSAGE, MessageKind.AGENT_REPLY)


def recallable(plan: RunPlan, messages: Iterable[Msg]) -> list[Msg]:
    """The messages of a finished chat run the conversation index takes: user messages and
    agent replies with text that the visibility rule lets into a model's context (never an
    automation input, never a recall or route record)."""
    if plan.origin is not RuntimeMode.CHAT:
        return []
    return [
        m
        for m in messages
        if m.kind in RECALLABLE_KINDS
        and in_context(visibility_mask_for(plan.origin, m.kind))
        and m.text.strip()
    ]


def partial_replies(
    spans: OpenSpans, stored: Iterable[Msg], plan: RunPlan, reason: str
) -> list[Msg]:
    """The text a stopped run streamed but never got as a finished message, marked `reason`."""
    return [
        stamped(assistant(text, id=mid, kind=MessageKind.AGENT_REPLY, finished_reason=reason), plan)
        for mid, text in spans.partial_texts(m.id for m in stored)
    ]


# ---- the run's lifecycle ------------------------------------------------------------


class IllegalTransition(RuntimeError):
    """The run manager moved a run's lifecycle out of order (a bug, never the caller's)."""


class Stage(StrEnum):
    """Where a run of this replica is. A caller sees each stage as a RunState
    (RunLifecycle.state): the finer stages only say what the replica is doing meanwhile."""

    # RUN_STARTED is stored; history has not admitted the run yet (BeginRun).
    ADMITTING = "admitting"
    # Admitted behind the thread's active run: it asks history for its turn.
    QUEUED = "queued"
    # Its steps (router, executor) run.
    RUNNING = "running"
    # Its end is being recorded in history (FinishRun): a lease renewal that is not held
    # any more is expected, and a stop request comes too late.
    FINISHING = "finishing"
    # Its stream's last event is emitted; RunLifecycle.outcome says how it ended.
    ENDED = "ended"


class Stop(StrEnum):
    """Why a run must stop at its next step boundary (a request, honoured by the run)."""

    # A caller, history (another replica's cancel, an interrupt/rollback run) or a shutdown
    # asked: it stores what it produced and ends cancelled.
    CANCEL = "cancel"
    # History gave the run's lease up and marked it failed: it ends its stream and records
    # nothing more. Overrides a cancel (the record is failed already).
    LEASE_LOST = "lease_lost"


# The lifecycle's stage transitions; anything else raises IllegalTransition.
#   admitting -> queued | running    history admitted it (admit)
#   queued    -> running             its turn came (take_turn)
#   admitting | queued | running -> finishing
#                                    it records its end (finish): refused, failed, stopped,
#                                    or its steps ended
#   finishing -> finishing           recording the end failed: it records a failure instead
#   any stage but ended -> ended     its last event is emitted (end), recorded or not (an
#                                    end history had already, a lost lease, a hard stop)
TRANSITIONS: dict[Stage, frozenset[Stage]] = {
    Stage.ADMITTING: frozenset({Stage.QUEUED, Stage.RUNNING, Stage.FINISHING, Stage.ENDED}),
    Stage.QUEUED: frozenset({Stage.RUNNING, Stage.FINISHING, Stage.ENDED}),
    Stage.RUNNING: frozenset({Stage.FINISHING, Stage.ENDED}),
    Stage.FINISHING: frozenset({Stage.FINISHING, Stage.ENDED}),
    Stage.ENDED: frozenset(),
}

# Stages in which a stop request still changes what the run does.
_STOPPABLE = frozenset({Stage.ADMITTING, Stage.QUEUED, Stage.RUNNING})


@dataclass
class RunLifecycle:
    """The state machine of one run on this replica: its stage, the stop requested of it,
    why history refused it, and how it ended. The run manager (runs.py) drives it; the
    events are its methods, and a move TRANSITIONS does not allow raises IllegalTransition.
    Stop requests (cancel, lost lease) may come at any time from other tasks: they never
    raise, and say whether the run's steps must be stopped now."""

    stage: Stage = Stage.ADMITTING
    stop: Stop | None = None
    # Why BeginRun failed (history refused the run or could not be reached).
    refusal: BaseException | None = None
    outcome: RunState | None = None

    def _move(self, target: Stage) -> None:
        if target not in TRANSITIONS[self.stage]:
            raise IllegalTransition(f"a run cannot go from {self.stage.value} to {target.value}")
        self.stage = target

    # ---- events of the pipeline ---------------------------------------------------

    def admit(self, state: RunState) -> None:
        """History admitted the run: queued behind the thread's active run, or running."""
        if self.stage is not Stage.ADMITTING:
            raise IllegalTransition(f"a run {self.stage.value} was admitted already")
        if state is RunState.QUEUED:
            self._move(Stage.QUEUED)
        elif state is RunState.RUNNING:
            self._move(Stage.RUNNING)
        else:
            raise IllegalTransition(f"a run is admitted queued or running, not {state.value}")

    def refuse(self, error: BaseException) -> None:
        """BeginRun failed: the run is not admitted (it then records its failure and ends)."""
        if self.stage is not Stage.ADMITTING:
            raise IllegalTransition(f"a run {self.stage.value} cannot be refused")
        self.refusal = error

    def take_turn(self) -> None:
        """The queued run's turn came: it runs."""
        if self.stage is not Stage.QUEUED:
            raise IllegalTransition(f"a run {self.stage.value} has no turn to take")
        self._move(Stage.RUNNING)

    def finish(self) -> None:
        """Its end is being recorded in history."""
        self._move(Stage.FINISHING)

    def end(self, outcome: RunState) -> None:
        """Its last event is about to be emitted: the run ended `outcome`."""
        if outcome not in TERMINAL_RUN_STATES:
            raise IllegalTransition(f"a run cannot end {outcome.value}")
        self._move(Stage.ENDED)
        self.outcome = outcome

    # ---- stop requests ------------------------------------------------------------

    def request_cancel(self) -> bool:
        """A cancel was asked; True when it is new and the run's steps must stop now."""
        if self.stop is not None or self.stage not in _STOPPABLE:
            return False
        self.stop = Stop.CANCEL
        return True

    def lose_lease(self) -> bool:
        """History no longer counts this replica as the run's holder; True when the run's
        steps must stop now (not once its end is being recorded: that was expected)."""
        if self.stop is Stop.LEASE_LOST or self.stage not in _STOPPABLE:
            return False
        self.stop = Stop.LEASE_LOST
        return True

    # ---- what the run manager asks ------------------------------------------------

    @property
    def cancelling(self) -> bool:
        return self.stop is Stop.CANCEL

    @property
    def lease_lost(self) -> bool:
        return self.stop is Stop.LEASE_LOST

    @property
    def stopping(self) -> bool:
        return self.stop is not None

    @property
    def ended(self) -> bool:
        return self.stage is Stage.ENDED

    @property
    def state(self) -> RunState:
        """The run's state as a caller sees it: queued, running, or how it ended."""
        if self.outcome is not None:
            return self.outcome
        return RunState.QUEUED if self.stage is Stage.QUEUED else RunState.RUNNING


# ---- events -------------------------------------------------------------------------


def event_log_key(owner: str, run_id: str) -> str:
    """The run's event-log key; it names the owner, so another owner's lookup finds nothing.
    Owner ids cannot contain "/", so the key is unambiguous."""
    return f"{owner}/{run_id}"


# Sequence numbers stay JSON-safe integers (SSE ids, AG-UI clients in JavaScript); a resume
# past this is not a position any run reaches.
MAX_SEQUENCE = 2**53 - 1


@dataclass
class Sequencer:
    """Per-run sequence numbers: 1, 2, 3, ... with no gap."""

    last: int = 0

    def next(self) -> int:
        self.last += 1
        return self.last


# Event payloads an executor may send (shared.run_events is the table of event kinds).
RELAYED_PAYLOADS = run_events.RELAYED_PAYLOADS


class OpenSpans(run_events.SpanTracker):
    """What a run's stream has opened and not yet closed, and the text streamed so far.

    A cancelled run closes what is open (innermost first: `closing()`) before RUN_FINISHED,
    as AG-UI clients require, and stores the text it produced.
    """

    def __init__(self) -> None:
        super().__init__(keep=frozenset({"text"}))

    def partial_texts(self, stored_ids: Iterable[str]) -> list[tuple[str, str]]:
        """(message id, text) of streamed text whose message the executor never delivered."""
        return self.texts("text", stored_ids)


@dataclass
class TurnMeter:
    """The model turn under way in an executor step: its usage as the step last reported it
    (ExecuteResponse.turn_usage) and what it streamed since. A turn that ends delivers its
    message with its usage, which history sums; a turn that a cancel or a broken stream cuts
    short delivers none, and `cut_short` is what it used: the model server's report when it
    sent one, else the input counted at the turn's start and the output counted from what
    streamed (estimated), so a run that called a model always reports usage."""

    reported: Usage | None = None
    streamed: list[str] = dataclasses.field(default_factory=list)

    def report(self, usage: Usage) -> None:
        if self.reported is None:
            self.streamed.clear()  # a new turn
        self.reported = usage

    def stream(self, delta: str) -> None:
        if self.reported is not None:
            self.streamed.append(delta)

    def ended(self) -> None:
        """The turn's message arrived with its usage."""
        self.reported = None
        self.streamed.clear()

    def cut_short(self) -> Usage | None:
        if self.reported is None:
            return None
        if not self.reported.estimated:
            return self.reported
        output = text_tokens("".join(self.streamed))
        return Usage(self.reported.input_tokens, max(output, self.reported.output_tokens), True)


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
    """What a run's failure was (shared.errors.as_domain_error: a lost database or event
    log is UNAVAILABLE); a timeout is the run's own deadline."""
    if isinstance(exc, TimeoutError):
        return DeadlineExceeded("the run did not finish in time")
    return errors.as_domain_error(exc)


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
# anything, and how long the first retry waits at most for a connected replica (doubled
# for each later one): the step goes to a restarted executor as soon as the channel
# reconnects (Peers.executor_reconnected), and gives up after 0.5 + 1 s with none.
EXECUTOR_STEP_ATTEMPTS = 3
EXECUTOR_RETRY_BACKOFF_SECONDS = 0.5


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
    return (
        isinstance(error, Unavailable) and not model_failed and not produced and attempt < attempts
    )


def executor_retry_delay(attempt: int) -> float:
    """The longest wait for a connected replica after failed attempt `attempt` (1, 2, ...)."""
    return EXECUTOR_RETRY_BACKOFF_SECONDS * 2.0 ** (attempt - 1)
