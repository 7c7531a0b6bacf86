"""HistoryService: proto -> core/store -> proto. Each RPC is one unit of work (one transaction)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import grpc
from agentmesh.history.v1 import history_service_pb2 as pb
from agentmesh.history.v1 import history_service_pb2_grpc as pb_grpc
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from services.history import convert, core, deletions, pgdirect, sqlitedirect, store, tables
from services.history.core import Message, NewMessage, Run, Thread
from services.history.owner_data import REGISTRY
from services.history.pgdirect import Conn
from services.history.store import ContextKey
from services.history.visibility import in_context
from shared import outbox, owner_data
from shared.db import is_postgres
from shared.domain import RuntimeMode, runtime_mode_from_pb
from shared.errors import Aborted, FailedPrecondition, InvalidArgument, NotFound
from shared.identity import owner_id, require_admin
from shared.ids import OWNER_RULE, is_owner_id, optional_identifier
from shared.pagination import (
    PageTokens,
    bad_token,
    page_size,
    position_dict,
    position_int,
    position_list,
    position_str,
    position_time,
)
from shared.profiles import profile_from_pb
from shared.settings import Settings

Clock = Callable[[], datetime]
T = TypeVar("T")


def utc_now() -> datetime:
    return datetime.now(UTC)


def _key_to_token(key: ContextKey) -> list[Any]:
    return [key.created_at.isoformat(), key.thread_id, key.position]


def _key_from_token(raw: Any) -> ContextKey:
    created, thread_id, position = position_list(raw, 3)
    return ContextKey(position_time(created), position_str(thread_id), position_int(position))


def _context_key(m: Message) -> ContextKey:
    return ContextKey(m.created_at, m.thread_id, m.position)


class HistoryServicer(pb_grpc.HistoryServiceServicer):
    def __init__(
        self, engine: AsyncEngine, *, clock: Clock = utc_now, tokens: PageTokens | None = None
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._tokens = tokens or PageTokens(Settings().page_token_secret)
        self._postgres = is_postgres(engine)

    @asynccontextmanager
    async def _unit(self, *, write: bool) -> AsyncIterator[Conn]:
        # Reads need no transaction on PostgreSQL (READ COMMITTED: each statement sees
        # committed data anyway); autocommit saves the BEGIN/ROLLBACK round trips. SQLite
        # keeps shared.db's transaction handling; its write units run their hot statements
        # on sqlite3 directly (services/history/sqlitedirect.py).
        if self._postgres:
            async with pgdirect.unit(self._engine, transaction=write) as conn:
                yield conn
        elif write:
            async with self._engine.begin() as sqlite:
                yield await sqlitedirect.connection(sqlite)
        else:
            async with self._engine.connect() as sqlite:
                yield sqlite

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[Conn]:
        try:
            async with self._unit(write=True) as conn:
                yield conn
        except IntegrityError:
            # Two requests created the same id at once; the retry finds the stored one.
            raise Aborted("a concurrent request stored the same ids; retry") from None

    def _read(self) -> AbstractAsyncContextManager[Conn]:
        return self._unit(write=False)

    async def _write_trusting_ids(self, work: Callable[[Conn, bool], Awaitable[T]]) -> T:
        """`work(conn, check_ids)` in a write unit: first trusting that the ids of the
        messages it stores are new, which saves looking them up (a round trip); if one was
        not, the unique violation rolls everything back and it runs again, checking them.
        Run ids and message ids are new in nearly every run; a repeated one is a retry."""
        try:
            async with self._unit(write=True) as conn:
                return await work(conn, False)
        except IntegrityError:
            pass
        async with self._write() as conn:
            return await work(conn, True)

    # --- writing ------------------------------------------------------------------------

    async def _open_thread(
        self,
        conn: Conn,
        owner: str,
        thread_id: str,
        mode: RuntimeMode | None,
        now: datetime,
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

    async def _append(
        self,
        conn: Conn,
        thread: Thread,
        items: Sequence[NewMessage],
        field: str,
        now: datetime,
        *,
        check_ids: bool = True,
        run_failed: bool = False,
    ) -> tuple[Thread, list[Message]]:
        """Store the new ones of `items` (the thread is locked); all of them, as stored.
        Without `check_ids`, every id is taken to be new (a stored one fails the insert)."""
        core.check_origins(items, thread.runtime_mode, field)
        existing = (
            await store.messages_by_id(conn, thread.owner_id, [m.id for m in items])
            if check_ids
            else {}
        )
        for i, m in enumerate(items):
            if m.id in existing:
                core.check_retry(existing[m.id], thread.id, i, field)
        fresh = [m for m in core.unique_by_id(items) if m.id not in existing]
        if fresh:
            # The thread is locked: its count is the last position taken.
            first = thread.message_count + 1
            last = thread.message_count + len(fresh)
            # Taken last, just before the insert: the owner's counter stays locked until
            # commit (the order of commits is the order of sequences).
            sequence = await store.next_sequences(conn, thread.owner_id, len(fresh))
            stamped = [
                core.stamp(
                    m,
                    owner_id=thread.owner_id,
                    thread_id=thread.id,
                    mode=thread.runtime_mode,
                    position=first + i,
                    created_at=now,
                    sequence=sequence + i,
                    run_failed=run_failed,
                )
                for i, m in enumerate(fresh)
            ]
            await store.insert_messages(
                conn,
                thread.owner_id,
                thread.id,
                [(m, convert.message_to_pb(m).SerializeToString()) for m in stamped],
                count=last,
                now=now,
            )
            existing.update({m.id: m for m in stamped})
            thread = dataclasses.replace(thread, message_count=last, update_time=now)
        return thread, [existing[m.id] for m in core.unique_by_id(items)]

    async def BeginRun(
        self, request: pb.BeginRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.BeginRunResponse:
        """Create the run (or, called again, start it when it was queued): one active run
        per thread, planned by core.plan_begin under the thread's row lock, so every
        orchestrator replica sees the same order."""
        owner = owner_id(context)
        thread_id = convert.identifier(request.thread_id, "thread_id")
        run_id = convert.identifier(request.run_id, "run_id")
        mode = runtime_mode_from_pb(request.runtime_mode, "runtime_mode")
        profile = profile_from_pb(request.profile, "profile")
        inputs = convert.new_messages(request.input_messages, "input_messages")
        options = convert.context_options(request.context, profile.history_policy.window)
        strategy = convert.multitask_strategy(request.multitask_strategy)
        answers = [
            convert.identifier(call_id, f"answered_interrupt_ids[{i}]")
            for i, call_id in enumerate(request.answered_interrupt_ids)
        ]
        now = self._clock()
        lease = core.begin_lease(request.lease_holder, request.lease_seconds, now)
        begin = core.Begin(owner, run_id, thread_id, mode, profile, strategy, lease, now)

        async def admit(
            conn: Conn, check_ids: bool
        ) -> tuple[Thread, Run, core.BeginPlan, list[Message]]:
            thread = await self._open_thread(conn, owner, thread_id, mode, now)
            # A new run on an idle thread, the common case: the plan for no stored run and
            # no active one, which its INSERT checks (one round trip). Otherwise, and when
            # the unit runs again because an id was taken, the lookup decides.
            plan = core.plan_begin(begin, None, ())
            run = None if check_ids else await store.insert_run_if_idle(conn, plan.run)
            if run is None:
                stored, active = await store.begin_lookup(conn, owner, thread_id, run_id)
                if answers and stored is None and active:
                    taken = await store.interrupt_answerers(conn, owner, thread_id, answers)
                    core.check_answers(answers, taken, run_id, "answered_interrupt_ids")
                    raise core.refuse_answers_while_busy(active, "answered_interrupt_ids")
                plan = core.plan_begin(begin, stored, active)
                run = await store.write_begin(conn, plan)
            if answers:
                # Under the thread's row lock, in the transaction that admits the run: of
                # two runs answering one approval, the second is refused and stores nothing.
                answerers = await store.interrupt_answerers(conn, owner, thread_id, answers)
                core.check_answers(answers, answerers, run_id, "answered_interrupt_ids")
                await store.take_interrupts(conn, owner, thread_id, run_id, answers, now)
            if not plan.stores_input:
                return thread, run, plan, []
            thread, ctx = await self._store_input(
                conn, thread, run, inputs, options, now, check_ids=check_ids or plan.retry
            )
            return thread, run, plan, ctx

        thread, run, plan, ctx = await self._write_trusting_ids(admit)
        run_pb = convert.run_to_pb(run)
        run_pb.ahead_run_ids.extend(plan.ahead)
        return pb.BeginRunResponse(
            thread=convert.thread_to_pb(thread),
            run=run_pb,
            context_messages=[convert.message_to_pb(m) for m in ctx],
        )

    async def _store_input(
        self,
        conn: Conn,
        thread: Thread,
        run: Run,
        inputs: Sequence[NewMessage],
        options: tuple[core.Window, ZoneInfo, int],
        now: datetime,
        *,
        check_ids: bool,
    ) -> tuple[Thread, list[Message]]:
        """Store a started run's input (its thread is locked); the thread, and the run's
        context."""
        window, zone, max_chars = options
        was_empty = thread.message_count == 0
        thread, stored = await self._append(
            conn,
            thread,
            core.for_run(inputs, run, "input_messages"),
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
                since=core.window_since(window, now, zone),
                last_n=core.window_limit(window),
            )
        return thread, core.assemble_context(found, window, now, zone, max_chars)

    async def FinishRun(
        self, request: pb.FinishRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.FinishRunResponse:
        owner = owner_id(context)
        run_id = convert.identifier(request.run_id, "run_id")
        end = core.run_end(
            convert.run_state(request.state), request.error_code, request.error_message
        )
        outputs = convert.new_messages(request.output_messages, "output_messages")
        denials = convert.new_denials(request.tool_denials, "tool_denials")
        usage = convert.messages_usage(request.output_messages, "output_messages")
        if request.HasField("unstored_usage"):
            usage += convert.usage(request.unstored_usage, "unstored_usage")
        plan = core.plan_finish(run_id, end, usage, self._clock())
        now = plan.finish_time

        async def finish(conn: Conn, check_ids: bool) -> Run:
            # Locks in the order BeginRun takes them (thread, then run), so the two never
            # deadlock; the plan is written only if the run is still active.
            thread, finished = await store.lock_thread_finish_run(conn, owner, plan)
            if thread is None:
                raise NotFound(f"run {run_id} not found")
            if finished is None:
                # It ended meanwhile (or before): a retry of the same end, or a conflict.
                current = await store.get_run(conn, owner, run_id)
                assert current is not None  # runs are never deleted
                core.finish_is_noop(current.state, end.state, current.cancel_requested)
                return current
            writes = core.plan_finished(finished, outputs, denials, now)
            await self._append(
                conn,
                thread,
                writes.outputs,
                "output_messages",
                now,
                check_ids=check_ids,
                run_failed=writes.run_failed,
            )
            await store.insert_denials(conn, writes.denials)
            # The approvals its output settled are answered (by whoever decided): a resume
            # checked before this commit is refused when it is admitted.
            settled = core.settled_interrupts(writes.outputs)
            await store.take_interrupts(conn, owner, thread.id, run_id, settled, now)
            await store.hide_run_messages(conn, owner, writes.hide)
            return finished

        run = await self._write_trusting_ids(finish)
        return pb.FinishRunResponse(run=convert.run_to_pb(run))

    async def AppendMessages(
        self, request: pb.AppendMessagesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AppendMessagesResponse:
        owner = owner_id(context)
        thread_id = convert.identifier(request.thread_id, "thread_id")
        items = convert.new_messages(request.messages, "messages")
        if not items:
            raise InvalidArgument("messages", "must hold at least one message")
        mode = convert.optional_mode(request.runtime_mode, "runtime_mode")
        if mode is None:
            mode = next((m.origin for m in items if m.origin is not None), None)
        now = self._clock()
        async with self._write() as conn:
            thread = await self._open_thread(conn, owner, thread_id, mode, now)
            items = await self._with_runs(conn, thread, items)
            _, stored = await self._append(conn, thread, items, "messages", now)
        return pb.AppendMessagesResponse(messages=[convert.message_to_pb(m) for m in stored])

    async def _with_runs(
        self, conn: Conn, thread: Thread, items: list[NewMessage]
    ) -> list[NewMessage]:
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

    # --- reading ------------------------------------------------------------------------

    async def ListHistory(
        self, request: pb.ListHistoryRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListHistoryResponse:
        owner = owner_id(context)
        thread_id = convert.identifier(request.thread_id, "thread_id")
        size = page_size(request.page_size)
        if request.direction not in (
            pb.DIRECTION_UNSPECIFIED,
            pb.DIRECTION_FORWARD,
            pb.DIRECTION_BACKWARD,
        ):
            raise InvalidArgument("direction", "must be FORWARD or BACKWARD")
        backward = request.direction == pb.DIRECTION_BACKWARD
        # Every scope names the owner: thread ids are per owner, and a position is not shared.
        scope = ["history", owner, thread_id, "backward" if backward else "forward"]
        raw = self._tokens.decode(request.page_token, scope)
        after = None if raw is None else position_int(raw)
        async with self._read() as conn:
            rows = await store.history_page(
                conn, owner, thread_id, after=after, backward=backward, limit=size + 1
            )
            # Rows prove the thread is the caller's; only an empty page needs the check.
            if not rows and await store.get_thread(conn, owner, thread_id) is None:
                raise NotFound(f"thread {thread_id} not found")
        page = rows[:size]
        response = pb.ListHistoryResponse()
        convert.add_serialized(response, "messages", [wire for _, wire in page])
        if len(rows) > size:
            response.next_page_token = self._tokens.encode(page[-1][0], scope)
        return response

    async def LoadContext(
        self, request: pb.LoadContextRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.LoadContextResponse:
        owner = owner_id(context)
        across = request.across_threads
        if across and request.thread_id:
            raise InvalidArgument("thread_id", "must be empty when across_threads is set")
        thread_id = None if across else convert.identifier(request.thread_id, "thread_id")
        window, zone, max_chars = convert.context_options(request.context)
        size = page_size(request.page_size)
        scope = [
            "context",
            owner,
            thread_id,
            across,
            request.context.window or "all",
            zone.key,
            max_chars,
        ]
        # A paged context is a snapshot: later pages use the first page's time and end.
        token = self._tokens.decode(request.page_token, scope)
        after: ContextKey | None = None
        upto: int | None = None
        if token is None:
            now = self._clock()
        else:
            token = position_dict(token, ("n", "u", "a"))
            now = position_time(token["n"])
            upto = position_int(token["u"])
            after = _key_from_token(token["a"])
        response = pb.LoadContextResponse()
        async with self._read() as conn:
            # Read before the messages: every message numbered up to it is among them (or
            # outside the window).
            response.sequence_horizon = await store.sequence_horizon(conn, owner)
            if window == core.ALL and max_chars == 0:
                # Nothing is cut, so no snapshot bound is needed either: page in SQL and
                # answer from the serving copies. Rows prove the thread is the caller's.
                wires = await store.context_page(
                    conn,
                    owner,
                    thread_id,
                    upto=None if thread_id else now,
                    after=after,
                    limit=size + 1,
                )
                if not wires and thread_id is not None:
                    await self._thread_or_not_found(conn, owner, thread_id)
                convert.add_serialized(response, "messages", wires[:size])
                last = None
                if len(wires) > size:
                    # The page's key is in its last copy (the columns it was stored from).
                    end = response.messages[size - 1]
                    last = ContextKey(
                        end.created_at.ToDatetime(tzinfo=UTC), end.thread_id, end.position
                    )
            else:
                if thread_id is not None and upto is None:
                    thread = await self._thread_or_not_found(conn, owner, thread_id)
                    upto = thread.message_count
                found = await store.context_messages_served(
                    conn,
                    owner,
                    thread_id,
                    upto=upto if thread_id is not None and upto is not None else now,
                    since=core.window_since(window, now, zone),
                    last_n=core.window_limit(window),
                )
                kept = core.assemble_context([m for m, _ in found], window, now, zone, max_chars)
                if after is not None:
                    kept = [m for m in kept if self._is_after(m, after, across)]
                # The rules pick the messages; the response is their serving copies.
                copies = {m.id: wire for m, wire in found}
                convert.add_serialized(response, "messages", [copies[m.id] for m in kept[:size]])
                last = _context_key(kept[size - 1]) if len(kept) > size else None
        if last is not None:
            response.next_page_token = self._tokens.encode(
                {"a": _key_to_token(last), "u": upto or 0, "n": now.isoformat()}, scope
            )
        return response

    @staticmethod
    async def _thread_or_not_found(conn: Conn, owner: str, thread_id: str) -> Thread:
        thread = await store.get_thread(conn, owner, thread_id)
        if thread is None:
            raise NotFound(f"thread {thread_id} not found")
        return thread

    @staticmethod
    def _is_after(m: Message, after: ContextKey, across: bool) -> bool:
        if not across:
            return m.position > after.position
        key = _context_key(m)
        return (key.created_at, key.thread_id, key.position) > (
            after.created_at,
            after.thread_id,
            after.position,
        )

    async def ListThreads(
        self, request: pb.ListThreadsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListThreadsResponse:
        owner = owner_id(context)
        size = page_size(request.page_size)
        scope = ["threads", owner]
        raw = self._tokens.decode(request.page_token, scope)
        after = None
        if raw is not None:
            update_time, thread_id = position_list(raw, 2)
            after = store.ThreadKey(position_time(update_time), position_str(thread_id))
        async with self._read() as conn:
            rows = await store.list_threads(conn, owner, after, size + 1)
        page = rows[:size]
        token = ""
        if len(rows) > size:
            token = self._tokens.encode([page[-1].update_time.isoformat(), page[-1].id], scope)
        return pb.ListThreadsResponse(
            threads=[convert.thread_to_pb(t) for t in page], next_page_token=token
        )

    async def GetThread(
        self, request: pb.GetThreadRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetThreadResponse:
        owner = owner_id(context)
        thread_id = convert.identifier(request.thread_id, "thread_id")
        async with self._read() as conn:
            thread = await store.get_thread(conn, owner, thread_id, counted=True)
        if thread is None:
            raise NotFound(f"thread {thread_id} not found")
        return pb.GetThreadResponse(thread=convert.thread_to_pb(thread))

    async def GetRun(
        self, request: pb.GetRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetRunResponse:
        owner = owner_id(context)
        run_id = convert.identifier(request.run_id, "run_id")
        async with self._read() as conn:
            run = await store.get_run(conn, owner, run_id)
        if run is None:
            raise NotFound(f"run {run_id} not found")
        return pb.GetRunResponse(run=convert.run_to_pb(run))

    async def RenewRunLease(
        self, request: pb.RenewRunLeaseRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RenewRunLeaseResponse:
        owner = owner_id(context)
        run_id = convert.identifier(request.run_id, "run_id")
        lease = core.renewal(request.lease_holder, request.lease_seconds, self._clock())
        async with self._write() as conn:
            renewed = await store.renew_lease(conn, owner, run_id, lease)
            run = renewed or await store.get_run(conn, owner, run_id)
        if run is None:
            raise NotFound(f"run {run_id} not found")
        return pb.RenewRunLeaseResponse(run=convert.run_to_pb(run), held=renewed is not None)

    async def RequestRunCancellation(
        self, request: pb.RequestRunCancellationRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RequestRunCancellationResponse:
        owner = owner_id(context)
        run_id = convert.identifier(request.run_id, "run_id")
        async with self._write() as conn:
            run = await store.lock_run(conn, owner, run_id)
            if run is None:
                raise NotFound(f"run {run_id} not found")
            if core.plan_cancel(run):
                run = await store.update_run(conn, owner, run_id, cancel_requested=True)
        return pb.RequestRunCancellationResponse(run=convert.run_to_pb(run))

    async def ExpireRunLeases(
        self, request: pb.ExpireRunLeasesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ExpireRunLeasesResponse:
        owner_id(context)
        require_admin(context)
        limit = page_size(request.page_size, default=100)
        now = self._clock()
        async with self._write() as conn:
            expired = await store.expire_leases(conn, now, core.plan_expiry(), limit=limit)
        response = pb.ExpireRunLeasesResponse()
        for run in expired:
            item = response.runs.add()
            item.CopyFrom(convert.run_to_pb(run))
            item.owner_id = run.owner_id
        return response

    async def ListAudit(
        self, request: pb.ListAuditRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListAuditResponse:
        # The operator is a caller like any other (UNAUTHENTICATED without an identity);
        # the admin scope then lets them read the owner they name.
        owner_id(context)
        require_admin(context)
        if not is_owner_id(request.owner_id):
            raise InvalidArgument("owner_id", OWNER_RULE)
        flt = _audit_filter(request.filter)
        size = page_size(request.page_size)
        scope = ["audit", request.owner_id, dataclasses.asdict(flt)]
        cursor = _AuditCursor.from_token(self._tokens.decode(request.page_token, scope))
        messages: list[Message] = []
        denials: list[core.ToolDenial] = []
        async with self._read() as conn:
            if not cursor.messages_done:
                messages = await store.audit_page(
                    conn, request.owner_id, flt, after=cursor.message, limit=size + 1
                )
            if not cursor.denials_done:
                denials = await store.denial_page(
                    conn, request.owner_id, flt, after=cursor.denial, limit=size + 1
                )
        # Messages and denials page side by side, each with its own position.
        more_messages, more_denials = len(messages) > size, len(denials) > size
        messages, denials = messages[:size], denials[:size]
        token = ""
        if more_messages or more_denials:
            token = self._tokens.encode(
                _AuditCursor(
                    message=_context_key(messages[-1]) if more_messages else None,
                    messages_done=not more_messages,
                    denial=_denial_key(denials[-1]) if more_denials else None,
                    denials_done=not more_denials,
                ).to_token(),
                scope,
            )
        return pb.ListAuditResponse(
            messages=[convert.message_to_pb(m) for m in messages],
            tool_denials=[convert.denial_to_pb(d) for d in denials],
            next_page_token=token,
        )

    # --- deletion -----------------------------------------------------------------------

    async def DeleteThread(
        self, request: pb.DeleteThreadRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteThreadResponse:
        owner = owner_id(context)
        thread_id = convert.identifier(request.thread_id, "thread_id")
        async with self._write() as conn:
            deletion, run_ids = await _delete_thread(
                conn,
                owner,
                thread_id,
                self._clock(),
                requested_by=owner,
                kind=deletions.DeletionKind.THREAD,
            )
        return pb.DeleteThreadResponse(deletion=convert.deletion_to_pb(deletion), run_ids=run_ids)

    async def DeleteOwnerData(
        self, request: pb.DeleteOwnerDataRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteOwnerDataResponse:
        """Deprecated twin of agentmesh.platform.v1's, over the same registry."""
        counts = await owner_data.delete_owner(self._engine, REGISTRY, owner_id(context))
        return pb.DeleteOwnerDataResponse(deleted_counts=counts)

    async def StartOwnerDeletion(
        self, request: pb.StartOwnerDeletionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.StartOwnerDeletionResponse:
        owner = owner_id(context)
        requested_by = _requester(request.requested_by, owner, context)
        deletion = deletions.owner_deletion(owner, self._clock(), requested_by=requested_by)
        try:
            async with self._write() as conn:
                current = await store.unfinished_owner_deletion(conn, owner)
                if current is None:
                    await store.insert_deletion(conn, deletion)
        except Aborted:
            # A concurrent request started it first (one running deletion per owner).
            async with self._read() as conn:
                current = await store.unfinished_owner_deletion(conn, owner)
            if current is None:
                raise
        if current is not None:
            return pb.StartOwnerDeletionResponse(deletion=convert.deletion_to_pb(current))
        return pb.StartOwnerDeletionResponse(
            deletion=convert.deletion_to_pb(deletion), created=True
        )

    async def RecordDeletionStep(
        self, request: pb.RecordDeletionStepRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RecordDeletionStepResponse:
        owner = owner_id(context)
        deletion_id = convert.identifier(request.deletion_id, "deletion_id")
        counts = {k: v for k, v in request.deleted_counts.items() if v >= 0}
        async with self._write() as conn:
            current = await store.get_deletion(conn, owner, deletion_id, lock=True)
            if current is None:
                raise NotFound(f"deletion {deletion_id} not found")
            updated = deletions.record_step(
                current,
                request.service,
                done=request.done,
                error=request.error,
                counts=counts,
                now=self._clock(),
            )
            await store.save_deletion(conn, updated)
        return pb.RecordDeletionStepResponse(deletion=convert.deletion_to_pb(updated))

    async def GetDeletion(
        self, request: pb.GetDeletionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetDeletionResponse:
        owner = owner_id(context)
        deletion_id = convert.identifier(request.deletion_id, "deletion_id")
        async with self._read() as conn:
            deletion = await store.get_deletion(conn, owner, deletion_id)
        if deletion is None:
            raise NotFound(f"deletion {deletion_id} not found")
        return pb.GetDeletionResponse(deletion=convert.deletion_to_pb(deletion))

    async def ListRuns(
        self, request: pb.ListRunsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListRunsResponse:
        owner = owner_id(context)
        page, token = await self._time_keyed_page(
            request,
            ["runs", owner],
            lambda conn, after, n: store.list_runs(
                conn, owner, store.RunKey(*after) if after else None, n
            ),
            lambda r: (r.create_time, r.id),
        )
        return pb.ListRunsResponse(runs=[convert.run_to_pb(r) for r in page], next_page_token=token)

    async def ListDeletions(
        self, request: pb.ListDeletionsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListDeletionsResponse:
        owner = owner_id(context)
        page, token = await self._time_keyed_page(
            request,
            ["deletions", owner],
            lambda conn, after, n: store.list_deletions(
                conn, owner, store.DeletionKey(*after) if after else None, n
            ),
            lambda d: (d.create_time, d.id),
        )
        return pb.ListDeletionsResponse(
            deletions=[convert.deletion_to_pb(d) for d in page], next_page_token=token
        )

    async def _time_keyed_page(
        self,
        request: Any,
        scope: list[str],
        fetch: Callable[[Conn, tuple[datetime, str] | None, int], Awaitable[list[T]]],
        key_of: Callable[[T], tuple[datetime, str]],
    ) -> tuple[list[T], str]:
        """One page of a listing keyed by (time, id), and the token of the next page."""
        size = page_size(request.page_size)
        raw = self._tokens.decode(request.page_token, scope)
        after = None
        if raw is not None:
            when, item_id = position_list(raw, 2)
            after = (position_time(when), position_str(item_id))
        async with self._read() as conn:
            rows = await fetch(conn, after, size + 1)
        page = rows[:size]
        token = ""
        if len(rows) > size:
            when_last, id_last = key_of(page[-1])
            token = self._tokens.encode([when_last.isoformat(), id_last], scope)
        return page, token

    async def ListUnfinishedDeletions(
        self,
        request: pb.ListUnfinishedDeletionsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.ListUnfinishedDeletionsResponse:
        owner_id(context)
        require_admin(context)
        limit = page_size(request.page_size, default=100)
        async with self._read() as conn:
            found = await store.unfinished_owner_deletions(conn, limit)
        return pb.ListUnfinishedDeletionsResponse(
            deletions=[convert.deletion_to_pb(d) for d in found]
        )

    # --- webhook outbox (shared/outbox.py; the gateway's deliverer, admin scope) ----------

    async def ListWebhookEvents(
        self,
        request: pb.ListWebhookEventsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.ListWebhookEventsResponse:
        events = await outbox.serve_list(
            context, self._read(), tables.webhook_outbox, request.page_size
        )
        return pb.ListWebhookEventsResponse(events=events)

    async def AcknowledgeWebhookEvents(
        self,
        request: pb.AcknowledgeWebhookEventsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.AcknowledgeWebhookEventsResponse:
        count = await outbox.serve_acknowledge(
            context, self._write(), tables.webhook_outbox, request.event_ids
        )
        return pb.AcknowledgeWebhookEventsResponse(acknowledged_count=count)

    async def GetOwnerUsage(
        self,
        request: pb.GetOwnerUsageRequest,
        context: grpc.aio.ServicerContext[pb.GetOwnerUsageRequest, pb.GetOwnerUsageResponse],
    ) -> pb.GetOwnerUsageResponse:
        owner = owner_id(context)
        start, end = core.usage_span(request.from_day, request.to_day)
        async with self._read() as conn:
            found = await store.owner_usage(conn, owner, start, end)
        return pb.GetOwnerUsageResponse(days=[convert.usage_day_to_pb(d) for d in found])

    async def expire_threads(self, days: int, *, limit: int = 100) -> int:
        """Delete threads older than the retention period (`days`), each with a RETENTION
        deletion record; a thread with a run in flight waits for the next sweep."""
        cutoff = deletions.retention_cutoff(self._clock(), days)
        if cutoff is None:
            return 0
        async with self._read() as conn:
            expired = await store.expired_threads(conn, cutoff, limit)
        done = 0
        for owner, thread_id in expired:
            try:
                async with self._write() as conn:
                    thread = await store.lock_thread(conn, owner, thread_id)
                    if thread is None or thread.update_time >= cutoff:
                        continue  # deleted meanwhile, or a message arrived since the pick
                    await _delete_thread(
                        conn,
                        owner,
                        thread_id,
                        self._clock(),
                        requested_by=deletions.RETENTION_REQUESTER,
                        kind=deletions.DeletionKind.RETENTION,
                    )
                    done += 1
            except (FailedPrecondition, Aborted):
                continue
        return done


async def _delete_thread(
    conn: Conn,
    owner: str,
    thread_id: str,
    now: datetime,
    *,
    requested_by: str,
    kind: deletions.DeletionKind,
) -> tuple[deletions.Deletion, list[str]]:
    """Delete one thread in the caller's transaction and store its deletion record; the
    record and the ids of the runs deleted. The thread row is locked first, so a run cannot
    begin on it meanwhile."""
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


def _requester(requested_by: str, owner: str, context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """Who asked for an owner deletion: the owner, or (admin scope) "admin:<admin's id>"."""
    if not requested_by or requested_by == owner:
        return owner
    prefix, _, admin = requested_by.partition(":")
    if prefix != "admin" or not is_owner_id(admin):
        raise InvalidArgument("requested_by", "must be the owner id or admin:<owner id>")
    require_admin(context)
    return requested_by


def _denial_key(d: core.ToolDenial) -> store.DenialKey:
    return store.DenialKey(d.created_at, d.run_id, d.tool_call_id)


@dataclasses.dataclass(frozen=True)
class _AuditCursor:
    """Where an audit listing stands in each of its two streams (messages, denials)."""

    message: ContextKey | None = None
    messages_done: bool = False
    denial: store.DenialKey | None = None
    denials_done: bool = False

    def to_token(self) -> dict[str, Any]:
        return {
            "m": _key_to_token(self.message) if self.message else None,
            "md": self.messages_done,
            "d": [self.denial.created_at.isoformat(), self.denial.run_id, self.denial.tool_call_id]
            if self.denial
            else None,
            "dd": self.denials_done,
        }

    @classmethod
    def from_token(cls, raw: Any) -> _AuditCursor:
        if raw is None:
            return cls()
        raw = position_dict(raw, ("m", "md", "d", "dd"))
        if not isinstance(raw["md"], bool) or not isinstance(raw["dd"], bool):
            raise bad_token()
        denial = None
        if raw["d"] is not None:
            created, run_id, call_id = position_list(raw["d"], 3)
            denial = store.DenialKey(
                position_time(created), position_str(run_id), position_str(call_id)
            )
        return cls(
            message=_key_from_token(raw["m"]) if raw["m"] is not None else None,
            messages_done=raw["md"],
            denial=denial,
            denials_done=raw["dd"],
        )


def _audit_filter(f: pb.AuditFilter) -> store.AuditFilter:
    if len(f.execution_profile_name) > 100:
        raise InvalidArgument("filter.execution_profile_name", "must be at most 100 characters")
    start = end = None
    if f.HasField("start_time"):
        start = convert.timestamp(f.start_time, "filter.start_time")
    if f.HasField("end_time"):
        end = convert.timestamp(f.end_time, "filter.end_time")
    if start is not None and end is not None and end <= start:
        raise InvalidArgument("filter.end_time", "must be after filter.start_time")
    return store.AuditFilter(
        origin=convert.optional_mode(f.origin, "filter.origin"),
        executor=convert.optional_executor(f.executor, "filter.executor"),
        execution_profile_name=f.execution_profile_name,
        thread_id=optional_identifier(f.thread_id, "filter.thread_id"),
        start_time=start,
        end_time=end,
    )
