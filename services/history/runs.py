"""The runs aggregate, without I/O: admission (one active run per thread, the multitask
strategy), leases, the approvals a run answers or settles, and the plans BeginRun, FinishRun,
RenewRunLease, RequestRunCancellation and ExpireRunLeases write (services/history/handlers/
runs.py runs them in a unit of work)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from services.history.context import ContextOptions
from services.history.core import (
    TERMINAL_STATES,
    Message,
    MultitaskStrategy,
    NewMessage,
    Run,
    Thread,
    ToolDenial,
    denials_for_run,
    for_run,
)
from shared.domain import RunState, RuntimeMode
from shared.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from shared.messages import Usage
from shared.profiles import ExecutionProfile

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
# decided here from what handlers/runs.py loaded in its unit of work; the store writes it.
# Three plans are written on an assumption that the store's statement checks as it writes
# (one round trip, the common case): a new run on an idle thread (plan_begin with no stored
# run and no active one), a FinishRun of a run still queued or running, and a lease renewal
# by the run's holder. When the assumption fails, nothing is written and handlers/runs.py reads
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


@dataclass(frozen=True)
class BeginRequest:
    """A BeginRun request, checked: the begin, and what a started run stores and reads (its
    input, the approvals it answers, how its context is cut)."""

    begin: Begin
    inputs: list[NewMessage]
    answers: list[str]
    options: ContextOptions


@dataclass(frozen=True)
class FinishRequest:
    """A FinishRun request, checked: the plan, and what the ended run leaves (its output
    messages, and its refused tool calls as (call id, tool, digest, reason))."""

    owner_id: str
    plan: FinishPlan
    outputs: list[NewMessage]
    denials: list[tuple[str, str, str, str]]


@dataclass(frozen=True)
class Begun:
    """What BeginRun answers: the thread, the run, the active runs ahead of it, and (a run
    that started) its context."""

    thread: Thread
    run: Run
    ahead: tuple[str, ...]
    context: list[Message]


def plan_expiry() -> RunEnd:
    """How a run whose lease ran out ends: failed, whether or not its cancel was requested,
    since no orchestrator is left to finish it."""
    return RunEnd(RunState.FAILED, LEASE_EXPIRED, LEASE_EXPIRED_MESSAGE)
