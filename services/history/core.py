"""The history service's rules, without I/O: message stamping (mask and metadata), the
mode and run-state checks and the run plans. Context assembly (window, tool groups,
character budget, paging) is services/history/context.py.

Message content travels here as the protobuf JSON of its ContentBlock list (plain dicts,
field names as in the .proto), which is also how it is stored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from typing import Any

from services.history.visibility import in_history, visibility_mask_for
from shared.domain import TERMINAL_RUN_STATES, ExecutorKind, MessageKind, RuntimeMode
from shared.domain import RunState as RunState  # the one vocabulary of run states, re-exported
from shared.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from shared.messages import Usage
from shared.profiles import ExecutionProfile

JsonBlock = Mapping[str, Any]


TERMINAL_STATES = TERMINAL_RUN_STATES
ACTIVE_STATES = frozenset({RunState.QUEUED, RunState.RUNNING})


class MultitaskStrategy(StrEnum):
    """What a new run does when its thread has an active run (double-texting)."""

    REJECT = "reject"
    ENQUEUE = "enqueue"
    INTERRUPT = "interrupt"
    ROLLBACK = "rollback"


LEASE_EXPIRED = "LEASE_EXPIRED"
LEASE_EXPIRED_MESSAGE = (
    "the orchestrator running this run stopped renewing its lease (it crashed or lost contact)"
)
# A lease asked for outside these bounds is clamped (a zero lease would expire at once).
MIN_LEASE_SECONDS = 1.0
MAX_LEASE_SECONDS = 3600.0
# A caller that names no lease (not an orchestrator) gets this one.
DEFAULT_LEASE_SECONDS = 30.0


@dataclass(frozen=True)
class Thread:
    owner_id: str
    id: str
    runtime_mode: RuntimeMode
    create_time: datetime
    update_time: datetime
    message_count: int  # every message stored in it (their positions run 1..message_count)
    # What /history lists of it (hidden inputs are not); set where threads are listed.
    shown_count: int = 0


@dataclass(frozen=True)
class Run:
    owner_id: str
    id: str
    thread_id: str
    state: RunState
    origin: RuntimeMode
    profile: ExecutionProfile
    create_time: datetime
    start_time: datetime | None
    finish_time: datetime | None
    error_code: str = ""
    error_message: str = ""
    # Order among the thread's runs (queued runs start in this order).
    thread_seq: int = 0
    cancel_requested: bool = False
    rolled_back: bool = False
    lease_holder: str = ""
    lease_expire_time: datetime | None = None
    # The usage its output messages recorded (FinishRun): tokens in and out, and whether
    # any of it was agentmesh's estimate.
    input_tokens: int = 0
    output_tokens: int = 0
    usage_estimated: bool = False

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def started(self) -> bool:
        """It ran (or runs): its input messages are stored. A run cancelled while queued
        never started and stored nothing."""
        return self.start_time is not None


@dataclass(frozen=True)
class Admission:
    """What BeginRun does with a new run, given the thread's active runs."""

    state: RunState
    # Active runs to mark cancel_requested (interrupt, rollback).
    cancel: tuple[str, ...] = ()
    rollback: bool = False


def admit(active: Sequence[Run], strategy: MultitaskStrategy) -> Admission:
    """One active run per thread: a new run runs at once on an idle thread; otherwise the
    strategy decides (reject, or queue behind the active runs, cancelling them first for
    interrupt and rollback)."""
    if not active:
        return Admission(RunState.RUNNING)
    if strategy is MultitaskStrategy.REJECT:
        busy = next((r for r in active if r.state is RunState.RUNNING), active[0])
        raise FailedPrecondition(
            f"the thread already has an active run ({busy.id}); wait for it, cancel it, or "
            "send the run with another multitask strategy (enqueue, interrupt, rollback)",
            reason="THREAD_BUSY",
            metadata={"active_run_id": busy.id, "active_run_state": busy.state.value},
        )
    if strategy in (MultitaskStrategy.INTERRUPT, MultitaskStrategy.ROLLBACK):
        return Admission(
            RunState.QUEUED,
            cancel=tuple(r.id for r in active),
            rollback=strategy is MultitaskStrategy.ROLLBACK,
        )
    return Admission(RunState.QUEUED)


def runs_ahead(run: Run, active: Sequence[Run]) -> list[Run]:
    """The thread's active runs that go before `run` (in thread order)."""
    return [r for r in active if r.id != run.id and r.thread_seq < run.thread_seq]


def lease_seconds(requested: float) -> float:
    """The lease to grant: 0 asks for the default; a finite request is held to the bounds."""
    if not math.isfinite(requested) or requested < 0:
        raise InvalidArgument("lease_seconds", "must be a finite number of seconds, 0 or more")
    return min(max(requested or DEFAULT_LEASE_SECONDS, MIN_LEASE_SECONDS), MAX_LEASE_SECONDS)


@dataclass(frozen=True)
class ToolDenial:
    """An audit record of a refused tool call (arguments only as their sha256)."""

    owner_id: str
    run_id: str
    thread_id: str
    tool_call_id: str
    tool_name: str
    arguments_sha256: str
    reason: str
    origin: RuntimeMode
    executor: ExecutorKind
    execution_profile_name: str
    created_at: datetime


DENIAL_REASONS = (
    "not_declared",
    "not_in_profile",
    "not_registered",
    "denied_by_user",
    "cancelled_by_user",
    "approval_expired",
    "approval_unanswered",
)
_SHA256_HEX = frozenset("0123456789abcdef")


def check_denial(tool_call_id: str, tool_name: str, digest: str, reason: str, field: str) -> None:
    if not tool_call_id or len(tool_call_id) > 200:
        raise InvalidArgument(f"{field}.tool_call_id", "must be 1 to 200 characters")
    if not tool_name or len(tool_name) > 200:
        raise InvalidArgument(f"{field}.tool_name", "must be 1 to 200 characters")
    if len(digest) != 64 or not set(digest) <= _SHA256_HEX:
        raise InvalidArgument(
            f"{field}.arguments_sha256", "must be a sha256 digest in lowercase hex"
        )
    if reason not in DENIAL_REASONS:
        raise InvalidArgument(
            f"{field}.reason", "must be one of the ToolDenialReason values (not UNSPECIFIED)"
        )


# The reason of a BeginRun refused because another run answered one of its interrupts.
INTERRUPT_ANSWERED = "INTERRUPT_ANSWERED"


def check_answers(
    tool_call_ids: Sequence[str], answerers: Mapping[str, str], run_id: str, field: str
) -> None:
    """A run may answer the thread's waiting approvals no other run took (it took its own
    already when it is begun again); INVALID_ARGUMENT naming `<field>[i]` otherwise."""
    for i, call_id in enumerate(tool_call_ids):
        taken_by = answerers.get(call_id)
        if taken_by is not None and taken_by != run_id:
            raise InvalidArgument(
                f"{field}[{i}]",
                "this approval was answered already, by another run",
                reason=INTERRUPT_ANSWERED,
            )


# The reason of a BeginRun refused because it answers approvals while the thread has a run
# in progress (that run settles the thread's waiting approvals itself when it ends).
INTERRUPT_BUSY = "INTERRUPT_BUSY"


def refuse_answers_while_busy(active: Sequence[Run], field: str) -> InvalidArgument:
    """A new run that answers approvals is admitted only on an idle thread: a run in
    progress records every approval it found waiting (answered, or `unanswered`) when it
    ends, so a resume queued behind it would find its answer already given; refused,
    naming `<field>[0]`, with nothing stored."""
    busy = next((r for r in active if r.state is RunState.RUNNING), active[0])
    return InvalidArgument(
        f"{field}[0]",
        f"the thread has a run in progress ({busy.id}); answer once it has ended",
        reason=INTERRUPT_BUSY,
    )


def settled_interrupts(outputs: Sequence[NewMessage]) -> list[str]:
    """The tool call ids whose approval a run's output settled: each result message of
    decided calls keeps one record per call under metadata `approvals`
    (shared.approvals.approval_record), whoever decided (a person, expiry, no answer)."""
    out: list[str] = []
    for m in outputs:
        records = m.extra.get("approvals")
        if not isinstance(records, list):
            continue
        for record in records:
            call_id = record.get("toolCallId") if isinstance(record, dict) else None
            if isinstance(call_id, str) and call_id and call_id not in out:
                out.append(call_id)
    return out


def denials_for_run(
    items: Sequence[tuple[str, str, str, str]], run: Run, now: datetime
) -> list[ToolDenial]:
    """(call id, tool, digest, reason) of a run as records, each call once."""
    seen: set[str] = set()
    out = []
    for call_id, tool, digest, reason in items:
        if call_id in seen:
            continue
        seen.add(call_id)
        out.append(
            ToolDenial(
                owner_id=run.owner_id,
                run_id=run.id,
                thread_id=run.thread_id,
                tool_call_id=call_id,
                tool_name=tool,
                arguments_sha256=digest,
                reason=reason,
                origin=run.origin,
                executor=run.profile.executor,
                execution_profile_name=run.profile.name,
                created_at=now,
            )
        )
    return out


@dataclass(frozen=True)
class NewMessage:
    """A message as a caller sends it: no mask, position or time yet."""

    id: str
    role: str
    kind: MessageKind
    content: tuple[JsonBlock, ...]
    name: str = ""
    run_id: str = ""
    # None: take the thread's mode.
    origin: RuntimeMode | None = None
    executor: ExecutorKind | None = None
    execution_profile_name: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    finished_reason: str = ""


@dataclass(frozen=True)
class Message:
    owner_id: str
    id: str
    thread_id: str
    position: int
    run_id: str
    role: str
    kind: MessageKind
    visibility_mask: int
    name: str
    content: tuple[JsonBlock, ...]
    hidden_from_user: bool
    origin: RuntimeMode
    executor: ExecutorKind | None
    execution_profile_name: str
    extra: Mapping[str, Any]
    input_tokens: int
    output_tokens: int
    finished_reason: str
    created_at: datetime
    # The owner's commit sequence (store.next_sequences): one counter per owner, taken
    # under its row lock until commit, so sequence order is the order messages committed
    # in. 0: stored before there was one.
    sequence: int = 0


# --- writing ------------------------------------------------------------------------


def require_mode(thread: Thread, requested: RuntimeMode) -> None:
    """chat and automation never share a thread."""
    if thread.runtime_mode != requested:
        raise FailedPrecondition(
            f"thread {thread.id} is a {thread.runtime_mode} thread; "
            f"{requested} messages cannot be stored in it",
            reason="RUNTIME_MODE_MISMATCH",
        )


def check_origins(messages: Sequence[NewMessage], mode: RuntimeMode, field: str) -> None:
    for i, message in enumerate(messages):
        if message.origin is not None and message.origin != mode:
            raise InvalidArgument(
                f"{field}[{i}].metadata.origin", f"must be {mode}, the runtime mode of the thread"
            )


def stamp(
    message: NewMessage,
    *,
    owner_id: str,
    thread_id: str,
    mode: RuntimeMode,
    position: int,
    created_at: datetime,
    sequence: int = 0,
    run_failed: bool = False,
) -> Message:
    """The stored form: the mask comes only from (thread mode, kind, whether the run that
    wrote it failed); never from the caller."""
    mask = visibility_mask_for(mode, message.kind, run_failed=run_failed)
    return Message(
        owner_id=owner_id,
        id=message.id,
        thread_id=thread_id,
        position=position,
        run_id=message.run_id,
        role=message.role,
        kind=message.kind,
        visibility_mask=mask,
        name=message.name,
        content=message.content,
        hidden_from_user=not in_history(mask),
        origin=mode,
        executor=message.executor,
        execution_profile_name=message.execution_profile_name,
        extra=message.extra,
        input_tokens=message.input_tokens,
        output_tokens=message.output_tokens,
        finished_reason=message.finished_reason,
        created_at=created_at,
        sequence=sequence,
    )


def for_run(messages: Sequence[NewMessage], run: Run, field: str) -> list[NewMessage]:
    """A run's messages carry its id; executor and profile name default to its profile's."""
    out = []
    for i, message in enumerate(messages):
        if message.run_id and message.run_id != run.id:
            raise InvalidArgument(f"{field}[{i}].run_id", f"must be empty or {run.id}")
        out.append(
            NewMessage(
                **{
                    **message.__dict__,
                    "run_id": run.id,
                    "executor": message.executor or run.profile.executor,
                    "execution_profile_name": message.execution_profile_name or run.profile.name,
                }
            )
        )
    return out


def unique_by_id(messages: Iterable[NewMessage]) -> list[NewMessage]:
    """The first of each id: a request that repeats an id stores it once."""
    seen: set[str] = set()
    out = []
    for message in messages:
        if message.id not in seen:
            seen.add(message.id)
            out.append(message)
    return out


def check_retry(existing: Message, thread_id: str, index: int, field: str) -> None:
    """The same message id again is a retry only within the same thread."""
    if existing.thread_id != thread_id:
        raise AlreadyExists(
            f"{field}[{index}].id: message {existing.id} already exists in another thread",
            reason="MESSAGE_ID_TAKEN",
        )


def new_in(
    thread: Thread, items: Sequence[NewMessage], stored: Mapping[str, Message], field: str
) -> list[NewMessage]:
    """The messages of `items` to store in the thread, once each and in order: those not
    among `stored` (the ones of their ids already stored). Every origin must be the
    thread's mode, and a stored one must be a retry in the same thread."""
    check_origins(items, thread.runtime_mode, field)
    for i, m in enumerate(items):
        if m.id in stored:
            check_retry(stored[m.id], thread.id, i, field)
    return [m for m in unique_by_id(items) if m.id not in stored]


def plan_append(
    thread: Thread,
    fresh: Sequence[NewMessage],
    first_sequence: int,
    now: datetime,
    *,
    run_failed: bool = False,
) -> tuple[Thread, list[Message]]:
    """New messages as stored, and the thread after them. The thread is locked, so its count
    is the last position taken: they take the positions after it and the owner's sequences
    from `first_sequence` on, in order."""
    stamped = [
        stamp(
            m,
            owner_id=thread.owner_id,
            thread_id=thread.id,
            mode=thread.runtime_mode,
            position=thread.message_count + 1 + i,
            created_at=now,
            sequence=first_sequence + i,
            run_failed=run_failed,
        )
        for i, m in enumerate(fresh)
    ]
    count = thread.message_count + len(stamped)
    return replace(thread, message_count=count, update_time=now), stamped


def check_run_retry(existing: Run, thread_id: str) -> None:
    if existing.thread_id != thread_id:
        raise AlreadyExists(
            f"run {existing.id} already exists in another thread", reason="RUN_ID_TAKEN"
        )


def finished_state(requested: RunState, cancel_requested: bool) -> RunState:
    """The state a FinishRun gives an active run. A run whose cancel was requested before it
    finished (CancelRun, or an interrupt/rollback run admitted on its thread) ends cancelled
    even if its steps completed: the run that cancelled it was admitted first, so its caller
    must not be shown a success (under rollback its messages are hidden). A failure stays a
    failure. (plan_finish gives the store's statement this state for both cases.)"""
    if cancel_requested and requested in (RunState.SUCCEEDED, RunState.INTERRUPTED):
        return RunState.CANCELLED
    return requested


def finish_is_noop(current: RunState, requested: RunState, cancel_requested: bool = False) -> bool:
    """Finishing twice with the same state is a retry; with another state, a conflict."""
    if requested not in TERMINAL_STATES:
        raise InvalidArgument("state", "must be SUCCEEDED, FAILED, CANCELLED or INTERRUPTED")
    if current in TERMINAL_STATES:
        if current == finished_state(requested, cancel_requested):
            return True
        raise FailedPrecondition(
            f"the run already finished as {current}; it cannot become {requested}",
            reason="RUN_ALREADY_FINISHED",
        )
    return False


# --- run plans ------------------------------------------------------------------------
#
# What BeginRun, FinishRun, RenewRunLease, RequestRunCancellation and ExpireRunLeases write,
# decided here from what the servicer loaded in its transaction; the store writes the plan.
# Three plans are written on an assumption that the store's statement checks as it writes
# (one round trip, the common case): a new run on an idle thread (plan_begin with no stored
# run and no active one), a FinishRun of a run still queued or running, and a lease renewal
# by the run's holder. When the assumption fails, nothing is written and the servicer reads
# what is stored: BeginRun plans again from it, FinishRun tells a retry from a conflict
# (finish_is_noop), a renewal answers that the lease is not held.


@dataclass(frozen=True)
class Lease:
    """Who holds an active run (an orchestrator replica; "" if the caller named none) and
    until when: a run whose lease runs out is failed by ExpireRunLeases."""

    holder: str
    expire_time: datetime


MAX_LEASE_HOLDER = 200


def begin_lease(holder: str, seconds: float, now: datetime) -> Lease:
    """The lease BeginRun grants; a caller that is not an orchestrator names no holder."""
    if len(holder) > MAX_LEASE_HOLDER:
        raise InvalidArgument("lease_holder", f"must be at most {MAX_LEASE_HOLDER} characters")
    return Lease(holder, now + timedelta(seconds=lease_seconds(seconds)))


def renewal(holder: str, seconds: float, now: datetime) -> Lease:
    """The lease RenewRunLease asks for. It is renewed only while the run is active and held
    by `holder` (the store's UPDATE checks both); otherwise the holder has lost the run."""
    if not holder:
        raise InvalidArgument("lease_holder", "must not be empty")
    return Lease(holder, now + timedelta(seconds=lease_seconds(seconds)))


@dataclass(frozen=True)
class Begin:
    """A BeginRun request, checked: the run, its thread, and how it is admitted."""

    owner_id: str
    run_id: str
    thread_id: str
    mode: RuntimeMode
    profile: ExecutionProfile
    strategy: MultitaskStrategy
    lease: Lease
    now: datetime


def new_run(begin: Begin, state: RunState) -> Run:
    """The run `begin` creates: running at once, or queued until its turn comes."""
    return Run(
        owner_id=begin.owner_id,
        id=begin.run_id,
        thread_id=begin.thread_id,
        state=state,
        origin=begin.mode,
        profile=begin.profile,
        create_time=begin.now,
        start_time=begin.now if state is RunState.RUNNING else None,
        finish_time=None,
        lease_holder=begin.lease.holder,
        lease_expire_time=begin.lease.expire_time,
    )


@dataclass(frozen=True)
class BeginPlan:
    """What BeginRun writes under its thread's row lock."""

    # The run as the plan leaves it (a new run's thread_seq is the store's to number).
    run: Run
    # A new run: store `run`. Otherwise the stored run changes only as `start` and `lease` say.
    insert: bool = False
    # A queued run whose turn came: it runs from now on.
    start: bool = False
    # The stored run's new lease (it is active).
    lease: Lease | None = None
    # The thread's active runs to cancel (interrupt, rollback) and, under rollback, to roll
    # back: their messages leave history and context.
    cancel: tuple[str, ...] = ()
    rollback: bool = False
    # The active runs that go before the run, in thread order.
    ahead: tuple[str, ...] = ()
    # The run was stored before (a retry, or a queued run asking again): its input may be too.
    retry: bool = False

    @property
    def hide(self) -> tuple[str, ...]:
        """The runs whose messages the plan hides (rollback)."""
        return self.cancel if self.rollback else ()

    @property
    def stores_input(self) -> bool:
        """A run stores its input when it starts, so the reply of the run queued before it
        comes first in the thread, as the conversation happened."""
        return self.run.started


def plan_begin(begin: Begin, stored: Run | None, active: Sequence[Run]) -> BeginPlan:
    """One active run per thread, decided from `stored` (the run `begin` names, if stored)
    and `active` (the thread's queued and running runs, in thread order).

    A new run is admitted by its strategy (`admit`). A stored one is a retry or a queued run
    asking again: a queued run starts when no active run goes before it and its cancel was
    not requested; an active run gets the new lease (keeping its holder when the caller names
    none); a finished run stays as it ended.
    """
    if stored is None:
        admission = admit(active, begin.strategy)
        return BeginPlan(
            new_run(begin, admission.state),
            insert=True,
            cancel=admission.cancel,
            rollback=admission.rollback,
            ahead=tuple(r.id for r in active),
        )
    check_run_retry(stored, begin.thread_id)
    run, start = stored, False
    ahead: tuple[str, ...] = ()
    if stored.state is RunState.QUEUED and not stored.cancel_requested:
        ahead = tuple(r.id for r in runs_ahead(stored, active))
        start = not ahead
        if start:
            run = replace(run, state=RunState.RUNNING, start_time=begin.now)
    lease = None
    if run.active:
        lease = Lease(begin.lease.holder or run.lease_holder, begin.lease.expire_time)
        run = replace(run, lease_holder=lease.holder, lease_expire_time=lease.expire_time)
    return BeginPlan(run, start=start, lease=lease, ahead=ahead, retry=True)


@dataclass(frozen=True)
class RunEnd:
    """How a run ends: its final state, and why (an error code and message)."""

    state: RunState
    error_code: str = ""
    error_message: str = ""


MAX_ERROR_CODE = 100
MAX_ERROR_MESSAGE = 10_000


def run_end(state: RunState, error_code: str, error_message: str) -> RunEnd:
    """The end a FinishRun asks for, checked; a longer error message is cut to its start."""
    if state not in TERMINAL_STATES:
        raise InvalidArgument("state", "must be SUCCEEDED, FAILED, CANCELLED or INTERRUPTED")
    if len(error_code) > MAX_ERROR_CODE:
        raise InvalidArgument("error_code", f"must be at most {MAX_ERROR_CODE} characters")
    return RunEnd(state, error_code, error_message[:MAX_ERROR_MESSAGE])


@dataclass(frozen=True)
class FinishPlan:
    """How FinishRun ends its run, written only if the run is still queued or running. The
    statement that ends it reads whether its cancel was requested (one round trip), so the
    plan names the state for both cases."""

    run_id: str
    end: RunEnd
    state_if_cancel_requested: RunState
    finish_time: datetime
    usage: Usage


def plan_finish(run_id: str, end: RunEnd, usage: Usage, now: datetime) -> FinishPlan:
    return FinishPlan(run_id, end, finished_state(end.state, True), now, usage)


@dataclass(frozen=True)
class FinishWrites:
    """What a run leaves once FinishRun ended it."""

    # Its output messages, carrying its id and, by default, its profile's executor and name.
    outputs: list[NewMessage]
    denials: list[ToolDenial]
    # A rolled-back run's messages (its output too) leave history and context.
    hide: tuple[str, ...]
    # The run ended FAILED: its outputs are stamped so (visibility_mask_for).
    run_failed: bool = False


def plan_finished(
    run: Run,
    outputs: Sequence[NewMessage],
    denials: Sequence[tuple[str, str, str, str]],
    now: datetime,
) -> FinishWrites:
    """The writes that follow the end of `run` (as it ended)."""
    return FinishWrites(
        outputs=for_run(outputs, run, "output_messages"),
        denials=denials_for_run(denials, run, now),
        hide=(run.id,) if run.rolled_back else (),
        run_failed=run.state is RunState.FAILED,
    )


def plan_cancel(run: Run) -> bool:
    """Whether RequestRunCancellation marks `run` cancel_requested: an active run, once (its
    holder stops it when its next lease renewal says so); a finished run stays as it ended."""
    return run.active and not run.cancel_requested


def plan_expiry() -> RunEnd:
    """How a run whose lease ran out ends: failed, whether or not its cancel was requested,
    since no orchestrator is left to finish it."""
    return RunEnd(RunState.FAILED, LEASE_EXPIRED, LEASE_EXPIRED_MESSAGE)


# --- usage -------------------------------------------------------------------------------

MAX_USAGE_DAYS = 366


@dataclass(frozen=True)
class UsageDay:
    """One UTC day of an owner's runs (every run counts on the UTC day it was created)."""

    day: str
    runs: int
    failed_runs: int
    automation_runs: int
    input_tokens: int
    output_tokens: int
    duration_ms: int
    tokens_estimated: bool


@dataclass(frozen=True)
class LedgerEntry:
    """A finished run's line in the usage ledger: what it used, never what it said."""

    owner_id: str
    run_id: str
    day: str  # the UTC day the run was created on, YYYY-MM-DD: the day it counts on
    origin: RuntimeMode
    state: RunState
    input_tokens: int
    output_tokens: int
    usage_estimated: bool
    duration_ms: int
    record_time: datetime


def ledger_entry(run: Run, now: datetime) -> LedgerEntry:
    """The ledger's entry of `run`, which has just finished. Every finished run has one (a
    run that called no model with no tokens), so the ledger also counts the runs of a day
    after their thread is gone."""
    ran = (
        round((run.finish_time - run.start_time).total_seconds() * 1000)
        if run.start_time is not None and run.finish_time is not None
        else 0
    )
    return LedgerEntry(
        owner_id=run.owner_id,
        run_id=run.id,
        day=run.create_time.astimezone(UTC).date().isoformat(),
        origin=run.origin,
        state=run.state,
        input_tokens=run.input_tokens,
        output_tokens=run.output_tokens,
        usage_estimated=run.usage_estimated,
        duration_ms=max(0, ran),
        record_time=now,
    )


def _utc_day(text: str, field: str) -> date:
    try:
        if len(text) != len("YYYY-MM-DD"):
            raise ValueError(text)
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(field, "must be a UTC day, YYYY-MM-DD") from None


def usage_span(from_day: str, to_day: str) -> tuple[datetime, datetime]:
    """The instants [start, end) of the UTC days from_day..to_day, both included."""
    first = _utc_day(from_day, "from_day")
    last = _utc_day(to_day, "to_day")
    if last < first:
        raise InvalidArgument("to_day", "must not be before from_day")
    if (last - first).days >= MAX_USAGE_DAYS:
        raise InvalidArgument("to_day", f"at most {MAX_USAGE_DAYS} days from from_day")
    start = datetime.combine(first, time(), UTC)
    return start, datetime.combine(last + timedelta(days=1), time(), UTC)
