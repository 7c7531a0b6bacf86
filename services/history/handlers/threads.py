"""Threads and their messages: opening a thread and appending to it, in the caller's unit
of work."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from services.history import convert, core, store
from services.history.core import Message, NewMessage, Run, Thread
from services.history.unit import Conn
from shared.domain import RuntimeMode
from shared.errors import InvalidArgument, NotFound


async def open_thread(
    conn: Conn, owner: str, thread_id: str, mode: RuntimeMode | None, now: datetime
) -> Thread:
    """The thread, locked; created with `mode` when missing; refused if of another mode."""
    if mode is None:
        thread = await store.lock_thread(conn, owner, thread_id)
        if thread is None:
            raise InvalidArgument("runtime_mode", "is required to create a new thread")
        return thread
    thread = await store.open_thread(conn, owner, thread_id, mode, now)
    core.require_mode(thread, mode)
    return thread


async def append(
    conn: Conn,
    thread: Thread,
    items: Sequence[NewMessage],
    field: str,
    now: datetime,
    *,
    check_ids: bool = True,
    run_failed: bool = False,
) -> tuple[Thread, list[Message]]:
    """Store the new ones of `items` (the thread is locked); the thread after them, and all
    of `items` as stored. Without `check_ids`, every id is taken to be new (a stored one
    fails the insert)."""
    stored = (
        await store.messages_by_id(conn, thread.owner_id, [m.id for m in items])
        if check_ids
        else {}
    )
    fresh = core.new_in(thread, items, stored, field)
    if fresh:
        # Taken last, just before the insert: the owner's counter stays locked until
        # commit (the order of commits is the order of sequences).
        sequence = await store.next_sequences(conn, thread.owner_id, len(fresh))
        thread, stamped = core.plan_append(thread, fresh, sequence, now, run_failed=run_failed)
        await store.insert_messages(
            conn,
            thread.owner_id,
            thread.id,
            [(m, convert.message_to_pb(m).SerializeToString()) for m in stamped],
            count=thread.message_count,
            now=now,
        )
        stored = {**stored, **{m.id: m for m in stamped}}
    return thread, [stored[m.id] for m in core.unique_by_id(items)]


async def append_messages(
    conn: Conn,
    owner: str,
    thread_id: str,
    mode: RuntimeMode | None,
    items: list[NewMessage],
    now: datetime,
) -> list[Message]:
    """AppendMessages: the messages stored in the thread (opened or created), as stored."""
    thread = await open_thread(conn, owner, thread_id, mode, now)
    items = await _with_runs(conn, thread, items)
    _, stored = await append(conn, thread, items, "messages", now)
    return stored


async def history_page(
    conn: Conn, owner: str, thread_id: str, *, after: int | None, backward: bool, size: int
) -> tuple[list[bytes], int | None]:
    """A page of the thread's /history (serving copies), and the position the next page
    starts after (None: this is the last)."""
    rows = await store.history_page(
        conn, owner, thread_id, after=after, backward=backward, limit=size + 1
    )
    # Rows prove the thread is the caller's; only an empty page needs the check.
    if not rows and await store.get_thread(conn, owner, thread_id) is None:
        raise NotFound(f"thread {thread_id} not found")
    page = rows[:size]
    return [wire for _, wire in page], page[-1][0] if len(rows) > size else None


async def _with_runs(conn: Conn, thread: Thread, items: list[NewMessage]) -> list[NewMessage]:
    """Messages naming a run must name one of this thread; they take its defaults."""
    runs: dict[str, Run] = {}
    out = []
    for i, m in enumerate(items):
        if not m.run_id:
            out.append(m)
            continue
        if m.run_id not in runs:
            run = await store.get_run(conn, thread.owner_id, m.run_id)
            if run is None or run.thread_id != thread.id:
                raise InvalidArgument(
                    f"messages[{i}].run_id", f"is not a run of thread {thread.id}"
                )
            runs[m.run_id] = run
        out.extend(core.for_run([m], runs[m.run_id], "messages"))
    return out
