"""HistoryService, the gRPC edge: each RPC converts its request (convert.py), opens one unit
of work (unit.py; one transaction for a write), runs a use case of its aggregate
(handlers/) and converts the answer back."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

import grpc
from agentmesh.history.v1 import history_service_pb2 as pb
from agentmesh.history.v1 import history_service_pb2_grpc as pb_grpc
from sqlalchemy.ext.asyncio import AsyncEngine

from services.history import convert, core, deletions, handlers, runs, store, tables
from services.history.audit import AuditCursor
from services.history.context import Snapshot
from services.history.owner_data import REGISTRY
from services.history.unit import Conn, Units
from shared import outbox, owner_data
from shared.errors import Aborted, FailedPrecondition, InvalidArgument, NotFound
from shared.identity import owner_id, require_admin
from shared.ids import is_owner_id
from shared.pagination import (
    PageTokens,
    page_size,
    position_int,
    position_list,
    position_str,
    position_time,
)
from shared.settings import Settings

Clock = Callable[[], datetime]
T = TypeVar("T")


def utc_now() -> datetime:
    return datetime.now(UTC)


class HistoryServicer(pb_grpc.HistoryServiceServicer):
    def __init__(
        self, engine: AsyncEngine, *, clock: Clock = utc_now, tokens: PageTokens | None = None
    ) -> None:
        # The engine stays the servicer's, for what runs outside history's units of work.
        self._engine = engine
        self._units = Units(engine)
        self._clock = clock
        self._tokens = tokens or PageTokens(Settings().page_token_secret)

    # The units of work every RPC opens: a read, or a write (one transaction).
    def _read(self) -> AbstractAsyncContextManager[Conn]:
        return self._units.read()

    def _write(self) -> AbstractAsyncContextManager[Conn]:
        return self._units.write()

    # --- writing ------------------------------------------------------------------------

    async def BeginRun(
        self, request: pb.BeginRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.BeginRunResponse:
        begin = convert.begin_request(request, owner_id(context), self._clock())
        begun = await self._units.write_trusting_ids(partial(handlers.runs.begin, begin))
        return convert.begun_to_pb(begun)

    async def FinishRun(
        self, request: pb.FinishRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.FinishRunResponse:
        finish = convert.finish_request(request, owner_id(context), self._clock())
        run = await self._units.write_trusting_ids(partial(handlers.runs.finish, finish))
        return pb.FinishRunResponse(run=convert.run_to_pb(run))

    async def AppendMessages(
        self, request: pb.AppendMessagesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AppendMessagesResponse:
        owner = owner_id(context)
        thread_id, mode, items = convert.append_request(request)
        async with self._write() as conn:
            stored = await handlers.threads.append_messages(
                conn, owner, thread_id, mode, items, self._clock()
            )
        return pb.AppendMessagesResponse(messages=[convert.message_to_pb(m) for m in stored])

    # --- reading ------------------------------------------------------------------------

    async def ListHistory(
        self, request: pb.ListHistoryRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListHistoryResponse:
        owner = owner_id(context)
        thread_id = convert.identifier(request.thread_id, "thread_id")
        size = page_size(request.page_size)
        backward = convert.backward(request.direction)
        # Every scope names the owner: thread ids are per owner, and a position is not shared.
        scope = ["history", owner, thread_id, "backward" if backward else "forward"]
        raw = self._tokens.decode(request.page_token, scope)
        after = None if raw is None else position_int(raw)
        async with self._read() as conn:
            page, last = await handlers.threads.history_page(
                conn, owner, thread_id, after=after, backward=backward, size=size
            )
        response = pb.ListHistoryResponse()
        convert.add_serialized(response, "messages", page)
        if last is not None:
            response.next_page_token = self._tokens.encode(last, scope)
        return response

    async def LoadContext(
        self, request: pb.LoadContextRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.LoadContextResponse:
        owner = owner_id(context)
        thread_id = convert.context_thread(request.thread_id, request.across_threads)
        options = convert.context_options(request.context)
        size = page_size(request.page_size)
        scope = convert.context_scope(owner, thread_id, request, options)
        # A paged context is a snapshot: later pages use the first page's time and end.
        token = self._tokens.decode(request.page_token, scope)
        snapshot = Snapshot(self._clock()) if token is None else Snapshot.from_token(token)
        async with self._read() as conn:
            page = await handlers.context.load_page(
                conn, owner, thread_id, options, snapshot, size, convert.context_key
            )
        response = pb.LoadContextResponse(sequence_horizon=page.sequence_horizon)
        convert.add_serialized(response, "messages", page.messages)
        if page.next is not None:
            response.next_page_token = self._tokens.encode(page.next.to_token(), scope)
        return response

    async def ListThreads(
        self, request: pb.ListThreadsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListThreadsResponse:
        owner = owner_id(context)
        page, token = await self._time_keyed_page(
            request,
            ["threads", owner],
            lambda conn, after, n: store.list_threads(
                conn, owner, store.ThreadKey(*after) if after else None, n
            ),
            lambda t: (t.update_time, t.id),
        )
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
        lease = runs.renewal(request.lease_holder, request.lease_seconds, self._clock())
        async with self._write() as conn:
            run, held = await handlers.runs.renew_lease(conn, owner, run_id, lease)
        return pb.RenewRunLeaseResponse(run=convert.run_to_pb(run), held=held)

    async def RequestRunCancellation(
        self, request: pb.RequestRunCancellationRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RequestRunCancellationResponse:
        owner = owner_id(context)
        run_id = convert.identifier(request.run_id, "run_id")
        async with self._write() as conn:
            run = await handlers.runs.request_cancellation(conn, owner, run_id)
        return pb.RequestRunCancellationResponse(run=convert.run_to_pb(run))

    async def ExpireRunLeases(
        self, request: pb.ExpireRunLeasesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ExpireRunLeasesResponse:
        owner_id(context)
        require_admin(context)
        limit = page_size(request.page_size, default=100)
        async with self._write() as conn:
            expired = await handlers.runs.expire_leases(conn, self._clock(), limit)
        return pb.ExpireRunLeasesResponse(runs=[convert.expired_run_to_pb(r) for r in expired])

    async def ListAudit(
        self, request: pb.ListAuditRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListAuditResponse:
        # The operator is a caller like any other (UNAUTHENTICATED without an identity);
        # the admin scope then lets them read the owner they name.
        owner_id(context)
        require_admin(context)
        owner, flt = convert.audited_owner(request.owner_id), convert.audit_filter(request.filter)
        size = page_size(request.page_size)
        scope = ["audit", owner, dataclasses.asdict(flt)]
        cursor = AuditCursor.from_token(self._tokens.decode(request.page_token, scope))
        async with self._read() as conn:
            page = await handlers.audit.audit_page(conn, owner, flt, cursor, size)
        return pb.ListAuditResponse(
            messages=[convert.message_to_pb(m) for m in page.messages],
            tool_denials=[convert.denial_to_pb(d) for d in page.denials],
            next_page_token=self._tokens.encode(page.next.to_token(), scope) if page.next else "",
        )

    # --- deletion -----------------------------------------------------------------------

    async def DeleteThread(
        self, request: pb.DeleteThreadRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteThreadResponse:
        owner = owner_id(context)
        thread_id = convert.identifier(request.thread_id, "thread_id")
        async with self._write() as conn:
            deletion, run_ids = await handlers.deletions.delete_thread(
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
                current = await handlers.deletions.start_owner_deletion(conn, deletion)
        except Aborted:
            # A concurrent request started it first (one running deletion per owner).
            async with self._read() as conn:
                current = await store.unfinished_owner_deletion(conn, owner)
            if current is None:
                raise
        return pb.StartOwnerDeletionResponse(
            deletion=convert.deletion_to_pb(current or deletion), created=current is None
        )

    async def RecordDeletionStep(
        self, request: pb.RecordDeletionStepRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RecordDeletionStepResponse:
        owner = owner_id(context)
        deletion_id = convert.identifier(request.deletion_id, "deletion_id")
        counts = {k: v for k, v in request.deleted_counts.items() if v >= 0}
        async with self._write() as conn:
            updated = await handlers.deletions.record_step(
                conn,
                owner,
                deletion_id,
                request.service,
                done=request.done,
                error=request.error,
                counts=counts,
                now=self._clock(),
            )
        return pb.RecordDeletionStepResponse(deletion=convert.deletion_to_pb(updated))

    async def GetDeletion(
        self, request: pb.GetDeletionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetDeletionResponse:
        owner = owner_id(context)
        deletion_id = convert.identifier(request.deletion_id, "deletion_id")
        async with self._read() as conn:
            deletion = await handlers.deletions.get_deletion(conn, owner, deletion_id)
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
                    done += await handlers.deletions.expire_thread(
                        conn, owner, thread_id, cutoff, self._clock()
                    )
            except (FailedPrecondition, Aborted):
                continue
        return done


def _requester(requested_by: str, owner: str, context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """Who asked for an owner deletion: the owner, or (admin scope) "admin:<admin's id>"."""
    if not requested_by or requested_by == owner:
        return owner
    prefix, _, admin = requested_by.partition(":")
    if prefix != "admin" or not is_owner_id(admin):
        raise InvalidArgument("requested_by", "must be the owner id or admin:<owner id>")
    require_admin(context)
    return requested_by
