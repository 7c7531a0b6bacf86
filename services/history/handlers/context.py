"""A page of a context (LoadContext), read in one unit of work."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from services.history import store
from services.history.context import (
    ContextKey,
    ContextOptions,
    Snapshot,
    context_bound,
    plan_context_page,
    window_limit,
    window_since,
)
from services.history.core import Thread
from services.history.unit import Conn
from shared.errors import NotFound


@dataclass(frozen=True)
class ContextRead:
    """What LoadContext answers: the owner's sequence horizon, a page of serving copies,
    and the snapshot of the next page (None: the last page)."""

    sequence_horizon: int
    messages: list[bytes]
    next: Snapshot | None


async def load_page(
    conn: Conn,
    owner: str,
    thread_id: str | None,
    options: ContextOptions,
    snapshot: Snapshot,
    size: int,
    key_of: Callable[[bytes], ContextKey],
) -> ContextRead:
    """One page of the context of a thread (or, thread_id None, of the owner's threads);
    `key_of` reads a serving copy's key."""
    # Read before the messages: every message numbered up to it is among them (or outside
    # the window).
    horizon = await store.sequence_horizon(conn, owner)
    if not options.cuts:
        # Nothing is cut, so no snapshot bound is needed either: page in SQL and answer
        # from the serving copies. Rows prove the thread is the caller's.
        wires = await store.context_page(
            conn,
            owner,
            thread_id,
            upto=None if thread_id else snapshot.now,
            after=snapshot.after,
            limit=size + 1,
        )
        if not wires and thread_id is not None:
            await thread_or_not_found(conn, owner, thread_id)
        if len(wires) <= size:
            return ContextRead(horizon, wires, None)
        # The page's key is in its last copy (the columns it was stored from).
        return ContextRead(horizon, wires[:size], replace(snapshot, after=key_of(wires[size - 1])))
    if thread_id is not None and snapshot.upto is None:
        thread = await thread_or_not_found(conn, owner, thread_id)
        snapshot = replace(snapshot, upto=thread.message_count)
    found = await store.context_messages_served(
        conn,
        owner,
        thread_id,
        upto=context_bound(thread_id, snapshot),
        since=window_since(options.window, snapshot.now, options.zone),
        last_n=window_limit(options.window),
    )
    page = plan_context_page(
        [m for m, _ in found], options, snapshot, size, across=thread_id is None
    )
    # The rules pick the messages; the response is their serving copies.
    copies = {m.id: wire for m, wire in found}
    return ContextRead(horizon, [copies[m.id] for m in page.messages], page.next)


async def thread_or_not_found(conn: Conn, owner: str, thread_id: str) -> Thread:
    thread = await store.get_thread(conn, owner, thread_id)
    if thread is None:
        raise NotFound(f"thread {thread_id} not found")
    return thread
