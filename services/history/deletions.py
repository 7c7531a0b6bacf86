"""Deletion rules, without I/O: the audit record of a deletion, the steps of an owner
deletion and their progress, and when a thread has outlived the retention period.

A deletion record keeps who asked, what kind, when, and how many records of each kind went;
never the deleted content. An owner deletion is a job of steps, one per service that holds the
owner's data, done in STEP order: the scheduler first (no automation starts a new run), then
memory, then history (it waits for the runs in flight to stop), then the orchestrator's run
event logs (once no run writes to them any more), then the gateway's webhook endpoints,
deliveries (last: the services' webhook outboxes are emptied by their own steps). Each step is
idempotent, so a step that failed (a service was down) is simply tried again.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from shared.errors import FailedPrecondition, InvalidArgument

OWNER_STEPS = ("scheduler", "memory", "history", "orchestrator", "gateway")
THREAD_STEP = "history"
RETENTION_REQUESTER = "retention"
MAX_ERROR_CHARS = 500


class DeletionKind(StrEnum):
    THREAD = "thread"
    OWNER = "owner"
    RETENTION = "retention"


class DeletionState(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"


@dataclass(frozen=True)
class Step:
    service: str
    done: bool = False
    attempts: int = 0
    last_error: str = ""
    update_time: datetime | None = None
    deleted_counts: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Deletion:
    owner_id: str
    id: str
    kind: DeletionKind
    state: DeletionState
    steps: tuple[Step, ...]
    requested_by: str
    create_time: datetime
    thread_id: str = ""
    finish_time: datetime | None = None


def new_deletion_id() -> str:
    return f"del_{uuid.uuid4().hex}"


def thread_deletion(
    owner_id: str,
    thread_id: str,
    counts: Mapping[str, int],
    now: datetime,
    *,
    requested_by: str,
    kind: DeletionKind = DeletionKind.THREAD,
) -> Deletion:
    """The record of a thread deletion, done in one transaction (so already succeeded)."""
    step = Step(THREAD_STEP, done=True, attempts=1, update_time=now, deleted_counts=dict(counts))
    return Deletion(
        owner_id=owner_id,
        id=new_deletion_id(),
        kind=kind,
        state=DeletionState.SUCCEEDED,
        steps=(step,),
        requested_by=requested_by,
        create_time=now,
        thread_id=thread_id,
        finish_time=now,
    )


def owner_deletion(owner_id: str, now: datetime, *, requested_by: str) -> Deletion:
    return Deletion(
        owner_id=owner_id,
        id=new_deletion_id(),
        kind=DeletionKind.OWNER,
        state=DeletionState.RUNNING,
        steps=tuple(Step(s) for s in OWNER_STEPS),
        requested_by=requested_by,
        create_time=now,
    )


def record_step(
    deletion: Deletion,
    service: str,
    *,
    done: bool,
    error: str,
    counts: Mapping[str, int],
    now: datetime,
) -> Deletion:
    """`deletion` after one attempt of its step `service`. A step already done stays done
    with its first counts (a driver that retried it after a lost answer deleted nothing
    more); the deletion succeeds when its last step is done."""
    if deletion.kind is not DeletionKind.OWNER:
        raise FailedPrecondition("only an owner deletion has steps to record")
    if service not in OWNER_STEPS:
        raise InvalidArgument("service", f"must be one of {', '.join(OWNER_STEPS)}")
    steps: list[Step] = []
    for step in deletion.steps:
        if step.service == service and not step.done:
            step = replace(
                step,
                done=done,
                attempts=step.attempts + 1,
                last_error="" if done else error[:MAX_ERROR_CHARS],
                update_time=now,
                deleted_counts=dict(counts) if done else {},
            )
        steps.append(step)
    finished = all(s.done for s in steps)
    return replace(
        deletion,
        steps=tuple(steps),
        state=DeletionState.SUCCEEDED if finished else DeletionState.RUNNING,
        finish_time=deletion.finish_time or (now if finished else None),
    )


def pending_steps(deletion: Deletion) -> Sequence[str]:
    return [s.service for s in deletion.steps if not s.done]


def retention_cutoff(now: datetime, days: int) -> datetime | None:
    """Threads last updated before this are expired; None when retention is off (0 days)."""
    return now - timedelta(days=days) if days > 0 else None
