"""Deletions: a thread's (asked for, or by the retention sweep) and the record of an owner
deletion's steps, in the caller's unit of work, by the rules of
services/history/deletions.py."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from services.history import deletions, store
from services.history.deletions import Deletion, DeletionKind
from services.history.unit import Conn
from shared.errors import FailedPrecondition, NotFound


async def delete_thread(
    conn: Conn,
    owner: str,
    thread_id: str,
    now: datetime,
    *,
    requested_by: str,
    kind: DeletionKind,
) -> tuple[Deletion, list[str]]:
    """Delete one thread and store its deletion record; the record and the ids of the runs
    deleted. The thread row is locked first, so a run cannot begin on it meanwhile."""
    thread = await store.lock_thread(conn, owner, thread_id)
    if thread is None:
        raise NotFound(f"thread {thread_id} not found")
    active = await store.active_run_ids(conn, owner, thread_id)
    if active:
        raise FailedPrecondition(
            f"the thread has a run in flight ({active[0]}); cancel it or wait for it to "
            "finish, then delete the thread",
            reason="THREAD_BUSY",
            metadata={"active_run_id": active[0]},
        )
    run_ids = await store.thread_run_ids(conn, owner, thread_id)
    counts = await store.delete_thread_data(conn, owner, thread_id)
    deletion = deletions.thread_deletion(
        owner, thread_id, counts, now, requested_by=requested_by, kind=kind
    )
    await store.insert_deletion(conn, deletion)
    return deletion, run_ids


async def expire_thread(
    conn: Conn, owner: str, thread_id: str, cutoff: datetime, now: datetime
) -> bool:
    """Delete a thread the retention sweep picked, with a RETENTION deletion record, unless
    it was deleted meanwhile or a message arrived since the pick; whether it was."""
    thread = await store.lock_thread(conn, owner, thread_id)
    if thread is None or thread.update_time >= cutoff:
        return False
    await delete_thread(
        conn,
        owner,
        thread_id,
        now,
        requested_by=deletions.RETENTION_REQUESTER,
        kind=DeletionKind.RETENTION,
    )
    return True


async def start_owner_deletion(conn: Conn, deletion: Deletion) -> Deletion | None:
    """Store `deletion` unless the owner has one running (one per owner); the running one,
    or None when `deletion` was stored."""
    current = await store.unfinished_owner_deletion(conn, deletion.owner_id)
    if current is None:
        await store.insert_deletion(conn, deletion)
    return current


async def record_step(
    conn: Conn,
    owner: str,
    deletion_id: str,
    service: str,
    *,
    done: bool,
    error: str,
    counts: Mapping[str, int],
    now: datetime,
) -> Deletion:
    """Record how an owner deletion's step went; the deletion as it now stands."""
    current = await store.get_deletion(conn, owner, deletion_id, lock=True)
    if current is None:
        raise NotFound(f"deletion {deletion_id} not found")
    updated = deletions.record_step(
        current, service, done=done, error=error, counts=counts, now=now
    )
    await store.save_deletion(conn, updated)
    return updated


async def get_deletion(conn: Conn, owner: str, deletion_id: str) -> Deletion:
    deletion = await store.get_deletion(conn, owner, deletion_id)
    if deletion is None:
        raise NotFound(f"deletion {deletion_id} not found")
    return deletion
