"""The history service's rules, without I/O: message stamping (mask and metadata), the
mode checks, the appending of messages, and usage. The runs' rules are
services/history/runs.py, context assembly (window, tool groups, character budget, paging)
services/history/context.py.

Message content travels here as the protobuf JSON of its ContentBlock list (plain dicts,
field names as in the .proto), which is also how it is stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from typing import Any

from services.history.visibility import in_history, visibility_mask_for
from shared.domain import TERMINAL_RUN_STATES, ExecutorKind, MessageKind, RuntimeMode
from shared.domain import RunState as RunState  # the one vocabulary of run states, re-exported
from shared.errors import AlreadyExists, FailedPrecondition, InvalidArgument
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
