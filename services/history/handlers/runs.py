"""Runs: BeginRun, FinishRun, lease renewal, cancellation and lease expiry, each in the
caller's unit of work, planned by services/history/runs.py."""

from __future__ import annotations

from datetime import datetime

from services.history import runs, store
from services.history.context import assemble_context, window_limit, window_since
from services.history.core import Message, Run, Thread, for_run
from services.history.handlers import threads
from services.history.unit import Conn
from services.history.visibility import in_context
from shared.errors import NotFound


async def begin(request: runs.BeginRequest, conn: Conn, check_ids: bool) -> runs.Begun:
    """Create the run (or, called again, start it when it was queued): one active run per
    thread, planned by runs.plan_begin under the thread's row lock, so every orchestrator
    replica sees the same order. Without `check_ids`, the run's and its input's ids are
    taken to be new (unit.Units.write_trusting_ids)."""
    b, answers = request.begin, request.answers
    thread = await threads.open_thread(conn, b.owner_id, b.thread_id, b.mode, b.now)
    # A new run on an idle thread, the common case: the plan for no stored run and no active
    # one, which its INSERT checks (one round trip). Otherwise, and when the unit runs again
    # because an id was taken, the lookup decides.
    plan = runs.plan_begin(b, None, ())
    run = None if check_ids else await store.insert_run_if_idle(conn, plan.run)
    if run is None:
        stored, active = await store.begin_lookup(conn, b.owner_id, b.thread_id, b.run_id)
        if answers and stored is None and active:
            taken = await store.interrupt_answerers(conn, b.owner_id, b.thread_id, answers)
            runs.check_answers(answers, taken, b.run_id, "answered_interrupt_ids")
            raise runs.refuse_answers_while_busy(active, "answered_interrupt_ids")
        plan = runs.plan_begin(b, stored, active)
        run = await store.write_begin(conn, plan)
    if answers:
        # Under the thread's row lock, in the transaction that admits the run: of two runs
        # answering one approval, the second is refused and stores nothing.
        answerers = await store.interrupt_answerers(conn, b.owner_id, b.thread_id, answers)
        runs.check_answers(answers, answerers, b.run_id, "answered_interrupt_ids")
        await store.take_interrupts(conn, b.owner_id, b.thread_id, b.run_id, answers, b.now)
    if not plan.stores_input:
        return runs.Begun(thread, run, plan.ahead, [])
    thread, context = await _store_input(
        conn, thread, run, request, check_ids=check_ids or plan.retry
    )
    return runs.Begun(thread, run, plan.ahead, context)


async def _store_input(
    conn: Conn, thread: Thread, run: Run, request: runs.BeginRequest, *, check_ids: bool
) -> tuple[Thread, list[Message]]:
    """Store a started run's input (its thread is locked); the thread, and the run's
    context."""
    now, options = request.begin.now, request.options
    was_empty = thread.message_count == 0
    thread, stored = await threads.append(
        conn,
        thread,
        for_run(request.inputs, run, "input_messages"),
        "input_messages",
        now,
        check_ids=check_ids,
    )
    if was_empty:
        # A new thread holds only what was just stored: no need to read it back.
        found = [m for m in stored if in_context(m.visibility_mask)]
    else:
        found = await store.context_messages(
            conn,
            thread.owner_id,
            thread.id,
            upto=thread.message_count,
            since=window_since(options.window, now, options.zone),
            last_n=window_limit(options.window),
        )
    return thread, assemble_context(found, options.window, now, options.zone, options.max_chars)


async def finish(request: runs.FinishRequest, conn: Conn, check_ids: bool) -> Run:
    """End the run as planned, if it is still active, and store what it leaves; the run."""
    owner, plan = request.owner_id, request.plan
    now = plan.finish_time
    # Locks in the order BeginRun takes them (thread, then run), so the two never deadlock;
    # the plan is written only if the run is still active.
    thread, finished = await store.lock_thread_finish_run(conn, owner, plan)
    if thread is None:
        raise NotFound(f"run {plan.run_id} not found")
    if finished is None:
        # It ended meanwhile (or before): a retry of the same end, or a conflict.
        current = await store.get_run(conn, owner, plan.run_id)
        assert current is not None  # runs are never deleted
        runs.finish_is_noop(current.state, plan.end.state, current.cancel_requested)
        return current
    writes = runs.plan_finished(finished, request.outputs, request.denials, now)
    await threads.append(
        conn,
        thread,
        writes.outputs,
        "output_messages",
        now,
        check_ids=check_ids,
        run_failed=writes.run_failed,
    )
    await store.insert_denials(conn, writes.denials)
    # The approvals its output settled are answered (by whoever decided): a resume checked
    # before this commit is refused when it is admitted.
    settled = runs.settled_interrupts(writes.outputs)
    await store.take_interrupts(conn, owner, thread.id, plan.run_id, settled, now)
    await store.hide_run_messages(conn, owner, writes.hide)
    return finished


async def renew_lease(conn: Conn, owner: str, run_id: str, lease: runs.Lease) -> tuple[Run, bool]:
    """The run, and whether its lease was renewed (it is active and held by the holder)."""
    renewed = await store.renew_lease(conn, owner, run_id, lease)
    run = renewed or await store.get_run(conn, owner, run_id)
    if run is None:
        raise NotFound(f"run {run_id} not found")
    return run, renewed is not None


async def request_cancellation(conn: Conn, owner: str, run_id: str) -> Run:
    run = await store.lock_run(conn, owner, run_id)
    if run is None:
        raise NotFound(f"run {run_id} not found")
    if runs.plan_cancel(run):
        run = await store.update_run(conn, owner, run_id, cancel_requested=True)
    return run


async def expire_leases(conn: Conn, now: datetime, limit: int) -> list[Run]:
    """Fail the runs whose lease ran out (at most `limit`); the runs as they ended."""
    return await store.expire_leases(conn, now, runs.plan_expiry(), limit=limit)
