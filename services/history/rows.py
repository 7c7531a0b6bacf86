"""History's rows and its domain types, both ways: a thread, message, run, tool denial or
deletion as the values of its table's columns (services/history/tables.py), and back from a
row the store read."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from sqlalchemy.engine import Row

from services.history.core import Message, Run, RunState, Thread, ToolDenial
from services.history.deletions import Deletion, DeletionKind, DeletionState, Step
from shared.domain import ExecutorKind, MessageKind, RuntimeMode
from shared.profiles import ExecutionProfile


def thread_from_row(row: Row[Any] | SimpleNamespace) -> Thread:
    return Thread(
        owner_id=row.owner_id,
        id=row.id,
        runtime_mode=RuntimeMode(row.runtime_mode),
        create_time=row.create_time,
        update_time=row.update_time,
        message_count=row.message_count,
        # Only the listing statements select it (queries.SHOWN_COUNT).
        shown_count=getattr(row, "shown_count", 0),
    )


_KINDS = {k.value: k for k in MessageKind}
_MODES = {m.value: m for m in RuntimeMode}
_EXECUTORS: dict[str, ExecutorKind | None] = {e.value: e for e in ExecutorKind}
_EXECUTORS[""] = None


def message_from_row(row: Sequence[Any]) -> Message:
    """The message of a row of tables.MESSAGE_FIELDS, in their order."""
    # Positional unpacking and dict lookups: this runs for every row of every page.
    (
        owner_id,
        id_,
        thread_id,
        position,
        run_id,
        role,
        kind,
        mask,
        name,
        content,
        meta,
        origin,
        executor,
        profile_name,
        input_tokens,
        output_tokens,
        finished_reason,
        created_at,
        owner_seq,
    ) = row
    return Message(
        owner_id=owner_id,
        id=id_,
        thread_id=thread_id,
        position=position,
        run_id=run_id,
        role=role,
        kind=_KINDS[kind],
        visibility_mask=mask,
        name=name,
        content=tuple(content),
        hidden_from_user=bool(meta.get("hidden_from_user", False)),
        origin=_MODES[origin],
        executor=_EXECUTORS[executor],
        execution_profile_name=profile_name,
        extra=meta.get("extra") or {},
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        finished_reason=finished_reason,
        created_at=created_at,
        sequence=owner_seq or 0,
    )


def message_values(m: Message, wire: bytes) -> dict[str, Any]:
    """The columns of a message's row, with `wire` its serving copy."""
    return {
        "message_pb": wire,
        "owner_id": m.owner_id,
        "id": m.id,
        "thread_id": m.thread_id,
        "position": m.position,
        "run_id": m.run_id,
        "role": m.role,
        "kind": m.kind.value,
        "visibility_mask": m.visibility_mask,
        "name": m.name,
        "content": list(m.content),
        "metadata": {
            "hidden_from_user": m.hidden_from_user,
            "origin": m.origin.value,
            "executor": m.executor.value if m.executor else "",
            "execution_profile_name": m.execution_profile_name,
            "extra": dict(m.extra),
        },
        "origin": m.origin.value,
        "executor": m.executor.value if m.executor else "",
        "execution_profile_name": m.execution_profile_name,
        "input_tokens": m.input_tokens,
        "output_tokens": m.output_tokens,
        "finished_reason": m.finished_reason,
        "created_at": m.created_at,
        "owner_seq": m.sequence or None,
    }


def run_from_row(row: Row[Any] | SimpleNamespace) -> Run:
    return Run(
        owner_id=row.owner_id,
        id=row.id,
        thread_id=row.thread_id,
        state=RunState(row.state),
        origin=RuntimeMode(row.origin),
        profile=ExecutionProfile.model_validate(row.profile),
        create_time=row.create_time,
        start_time=row.start_time,
        finish_time=row.finish_time,
        error_code=row.error_code,
        error_message=row.error_message,
        thread_seq=row.thread_seq,
        cancel_requested=bool(row.cancel_requested),
        rolled_back=bool(row.rolled_back),
        lease_holder=row.lease_holder,
        lease_expire_time=row.lease_expire_time,
        input_tokens=row.input_tokens or 0,
        output_tokens=row.output_tokens or 0,
        usage_estimated=bool(row.usage_estimated),
    )


def run_values(run: Run) -> dict[str, Any]:
    """The parameters of queries.INSERT_RUN and queries.INSERT_RUN_IF_IDLE for `run`."""
    return {
        "owner_id": run.owner_id,
        "id": run.id,
        "thread_id": run.thread_id,
        "seq_o": run.owner_id,
        "seq_t": run.thread_id,
        "state": run.state.value,
        "origin": run.origin.value,
        "profile": run.profile.model_dump(mode="json"),
        "profile_name": run.profile.name,
        "create_time": run.create_time,
        "start_time": run.start_time,
        "finish_time": run.finish_time,
        "error_code": run.error_code,
        "error_message": run.error_message,
        "cancel_requested": run.cancel_requested,
        "rolled_back": run.rolled_back,
        "lease_holder": run.lease_holder,
        "lease_expire_time": run.lease_expire_time,
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "usage_estimated": run.usage_estimated,
    }


def part(row: Row[Any], prefix: str) -> SimpleNamespace:
    """The columns of `row` labelled `prefix`<name>, by name."""
    return SimpleNamespace(
        **{k[len(prefix) :]: v for k, v in row._asdict().items() if k.startswith(prefix)}
    )


def denial_values(d: ToolDenial) -> dict[str, Any]:
    return {
        "owner_id": d.owner_id,
        "run_id": d.run_id,
        "tool_call_id": d.tool_call_id,
        "thread_id": d.thread_id,
        "tool_name": d.tool_name,
        "arguments_sha256": d.arguments_sha256,
        "reason": d.reason,
        "origin": d.origin.value,
        "executor": d.executor.value,
        "execution_profile_name": d.execution_profile_name,
        "created_at": d.created_at,
    }


def denial_from_row(row: Row[Any]) -> ToolDenial:
    return ToolDenial(
        owner_id=row.owner_id,
        run_id=row.run_id,
        thread_id=row.thread_id,
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        arguments_sha256=row.arguments_sha256,
        reason=row.reason,
        origin=RuntimeMode(row.origin),
        executor=ExecutorKind(row.executor),
        execution_profile_name=row.execution_profile_name,
        created_at=row.created_at,
    )


def _steps_json(steps: Sequence[Step]) -> list[dict[str, Any]]:
    return [
        {
            "service": s.service,
            "done": s.done,
            "attempts": s.attempts,
            "last_error": s.last_error,
            "update_time": s.update_time.isoformat() if s.update_time else None,
            "deleted_counts": dict(s.deleted_counts),
        }
        for s in steps
    ]


def deletion_from_row(row: Row[Any]) -> Deletion:
    steps = tuple(
        Step(
            service=s["service"],
            done=s["done"],
            attempts=s["attempts"],
            last_error=s["last_error"],
            update_time=datetime.fromisoformat(s["update_time"]) if s["update_time"] else None,
            deleted_counts=s["deleted_counts"],
        )
        for s in row.steps
    )
    return Deletion(
        owner_id=row.owner_id,
        id=row.id,
        kind=DeletionKind(row.kind),
        state=DeletionState(row.state),
        steps=steps,
        requested_by=row.requested_by,
        create_time=row.create_time,
        thread_id=row.thread_id,
        finish_time=row.finish_time,
    )


def deletion_values(d: Deletion) -> dict[str, Any]:
    return {
        "owner_id": d.owner_id,
        "id": d.id,
        "kind": d.kind.value,
        "thread_id": d.thread_id,
        "state": d.state.value,
        "steps": _steps_json(d.steps),
        "requested_by": d.requested_by,
        "create_time": d.create_time,
        "finish_time": d.finish_time,
    }
