"""Runs over HTTP: POST /api/v1/agent/runs (a RunAgentInput in, the run's AG-UI events out
as SSE, each frame with `id: <sequence>`), GET /api/v1/agent/runs/{run_id}/events (resume
after Last-Event-ID, from any gateway replica), POST /api/v1/agent/runs/{run_id}:cancel."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from typing import Annotated, Any, TypeAlias

import grpc
from agentmesh.history.v1 import history_service_pb2
from agentmesh.orchestrator.v1 import orchestrator_service_pb2
from agentmesh.type.v1 import run_event_pb2
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response, StreamingResponse

from services.gateway import sse
from services.gateway.auth import Caller, caller
from services.gateway.clients import Clients
from services.gateway.errors import ApiError, from_rpc, internal, invalid
from services.gateway.openapi import errors
from services.gateway.params import IdPath, only_params
from services.gateway.quota import Quota, admit
from services.gateway.resume import Replay
from services.gateway.run_input import (
    PROFILE_FIELD,
    STRATEGY_FIELD,
    RunAgentInputIn,
    cancel_on_disconnect,
    check_body_size,
    parse_body,
    start_run_request,
    time_zone,
    too_large,
)
from services.gateway.shedding import RECEIVED, overloaded
from shared import metrics
from shared.admission import OVERLOADED, InFlight
from shared.errors import DomainError, from_rpc_error
from shared.identity import call_metadata
from shared.logs import request_id_var
from shared.settings import Settings

log = logging.getLogger("agentmesh.gateway")

# RUN_ERROR code (or 504 code) of a run whose outcome this answer cannot tell: the run
# goes on (or may have started); its record says how it ended.
OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"

router = APIRouter()

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
RunPath = IdPath

# Cancels sent for clients that went away (cancelOnDisconnect); kept until they finish.
_background: set[asyncio.Task[None]] = set()


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it grows past `limit` bytes."""
    check_body_size(request.headers.get("content-length"), limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _with_ids(ev: run_event_pb2.RunEvent, thread_id: str, run_id: str) -> run_event_pb2.RunEvent:
    if not ev.thread_id:
        ev.thread_id = thread_id
    if not ev.run_id:
        ev.run_id = run_id
    return ev


# A run's event stream (StartRun's or StreamRun's call).
Call: TypeAlias = "grpc.aio.UnaryStreamCall[Any, Any]"


def _events_of(response: Any) -> Sequence[run_event_pb2.RunEvent]:
    """The events of a StartRun response (a batch in `events`, or one in `event`) or of a
    StreamRun response."""
    batch = getattr(response, "events", None)
    return batch if batch else (response.event,)


async def _events(
    call: Call,
    first: Any,
    thread_id: str,
    run_id: str,
    *,
    heartbeat: float,
    prefix: list[sse.Event] | None = None,
    on_abandon: Callable[[], Awaitable[None]] | None = None,
    on_end: StreamEnd | None = None,
    received: float | None = None,
) -> AsyncIterator[bytes]:
    """The SSE body: `prefix` (frames without id), then every mapped event of the run with
    its sequence number as the frame id; after RUN_FINISHED or RUN_ERROR, nothing. `first`
    is the first response already read, a read still pending (a Future), or None.
    While no event comes for `heartbeat` seconds, an SSE comment goes out instead.
    `on_abandon` runs (in the background) when the client goes away before the end;
    `on_end` is told when the stream starts and when it closes, with the run's last event
    sent (RUN_FINISHED or RUN_ERROR; None when the client went away first). `received`:
    when the run's request reached the gateway (its first event sent is timed from it)."""
    ended = False
    last: sse.Event | None = None
    response = first
    if on_end is not None:
        on_end.begin()
    try:
        for ahead in prefix or ():
            yield sse.frame(ahead)
        while True:
            if isinstance(response, asyncio.Future):
                while not (await asyncio.wait({response}, timeout=heartbeat))[0]:
                    yield sse.HEARTBEAT
                response = response.result()
            if response is grpc.aio.EOF:
                ended = True
                log.error("run stream ended without RUN_FINISHED or RUN_ERROR")
                yield sse.frame(sse.run_error("the run ended without a result", "INTERNAL"))
                return
            if response is not None:
                # A batch of events goes out as one write.
                frames = []
                for pbev in _events_of(response):
                    event = sse.to_agui(_with_ids(pbev, thread_id, run_id))
                    if event is None:
                        continue
                    if event.get("code") == OUTCOME_UNKNOWN:
                        event = _outcome_unknown(run_id)
                    frames.append(sse.frame(event, pbev.sequence or None))
                    if event["type"] in sse.TERMINAL_TYPES:
                        ended = True
                        last = event
                        break
                if frames:
                    yield sse.LastChunk(b"".join(frames)) if ended else b"".join(frames)
                    if received is not None:
                        metrics.run_first_event(time.perf_counter() - received)
                        received = None
                if ended:
                    return
            response = asyncio.ensure_future(call.read())
    except grpc.RpcError as err:
        ended = True
        # The run started (its first event was sent) and goes on without this stream: its
        # outcome is pending, not failed (a client told "retry" would run it twice).
        from_rpc(err, "orchestrator")  # logs what happened
        yield sse.frame(_outcome_unknown(run_id))
    except Exception:
        ended = True
        # Headers are sent: the stream itself must say the run failed.
        log.exception("run stream failed")
        api = internal()
        last = sse.run_error(api.message, api.code)
        yield sse.frame(last)
    finally:
        if isinstance(response, asyncio.Future):
            response.cancel()
        call.cancel()
        if not ended and on_abandon is not None:
            _in_background(on_abandon())
        if on_end is not None:
            on_end.end(last)


class StreamEnd:
    """Runs `then(last event)` once, when a run's SSE stream closes. A stream the server
    never started to send (its client went away before the first byte) has no end of its
    own: once the run's call ended and `grace` seconds passed without the stream starting,
    that is its end (with no last event)."""

    def __init__(
        self, then: Callable[[sse.Event | None], Awaitable[None]], *, grace: float = 30.0
    ) -> None:
        self.then = then
        self.grace = grace
        self.started = False
        self.done = False
        self.loop = asyncio.get_running_loop()

    def begin(self) -> None:
        self.started = True

    def end(self, last: sse.Event | None) -> None:
        if not self.done:
            self.done = True
            _in_background(self.then(last))

    def cancel(self) -> None:
        """The run did not start: its end must not run."""
        self.done = True

    def call_ended(self) -> None:
        self.loop.call_later(self.grace, self._if_never_started)

    def _if_never_started(self) -> None:
        if not self.started:
            self.end(None)


async def settle(timeout: float) -> None:
    """Wait (at most `timeout` seconds) for the work left in the background: the gateway's
    quota storage closes after it, not under a release still being sent."""
    if _background:
        await asyncio.wait(set(_background), timeout=timeout)


def _in_background(work: Awaitable[None]) -> None:
    async def run() -> None:
        await work

    task = asyncio.create_task(run())
    _background.add(task)
    task.add_done_callback(_background.discard)


async def _cancel_for_gone_client(
    clients: Clients, settings: Settings, owner: str, run_id: str
) -> None:
    try:
        await clients.orchestrator.CancelRun(
            orchestrator_service_pb2.CancelRunRequest(run_id=run_id),
            metadata=call_metadata(owner),
            timeout=_cancel_timeout(settings),
        )
    except grpc.RpcError as err:
        log.warning(
            "cancel on disconnect failed",
            extra={"fields": {"run_id": run_id, "code": str(err.code())}},
        )


def _outcome_unknown(run_id: str) -> sse.Event:
    """The end of a stream lost while its run goes on (sse-events.md, "Errors")."""
    return sse.run_error(
        "the run's event stream was lost but the run goes on; its outcome is pending: read "
        f"GET /api/v1/agent/runs/{run_id} (or resume GET /api/v1/agent/runs/{run_id}/events); "
        "do not send it again with a new runId",
        OUTCOME_UNKNOWN,
    )


def _cancel_timeout(settings: Settings) -> float:
    # The orchestrator waits (bounded) for a run held by another replica to stop.
    return settings.rpc_timeout_seconds + 10.0


@router.post(
    "/api/v1/agent/runs",
    summary="Start a run; stream its AG-UI events (text/event-stream)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": RunAgentInputIn.model_json_schema(by_alias=True)}
            },
        }
    },
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "AG-UI events"},
        **errors(409, 413),
    },
    response_class=StreamingResponse,
    dependencies=[Depends(only_params())],
)
async def start_run(request: Request, who: Caller = Depends(caller)) -> Response:
    settings: Settings = request.app.state.settings
    clients: Clients = request.app.state.clients
    # Load shedding: over a bound, refused at once, before the body is even read (a refusal
    # must cost next to nothing, or refusals slow the runs admitted) and before the
    # orchestrator is asked. The process bound is checked earlier still, by the first
    # middleware (services/gateway/shedding.py); this is the rule, and the owner's bound.
    in_flight: InFlight = request.app.state.in_flight
    try:
        in_flight.acquire(who.owner)
    except DomainError as exc:
        raise overloaded(exc) from None
    # Then the owner's quotas (services/gateway/quota.py): 429, still before the body.
    quota: Quota = request.app.state.quota
    try:
        admitted = await admit(quota, who.owner)
    except BaseException:
        in_flight.release(who.owner)
        raise
    # Frees its concurrent slot when its stream ends (its usage is in its run record).
    on_end = StreamEnd(lambda _last: quota.release(admitted))
    try:
        return await _start(request, who, settings, clients, in_flight, on_end)
    except BaseException:
        # Not started: nothing to count, only the slot to give back.
        on_end.cancel()
        await quota.release(admitted)
        raise


async def _start(
    request: Request,
    who: Caller,
    settings: Settings,
    clients: Clients,
    in_flight: InFlight,
    on_end: StreamEnd,
) -> Response:
    """The run admitted: read its body, start it, answer its first event's status."""
    received: float | None = request.scope.get(RECEIVED)
    try:
        body = await read_body(request, settings.max_request_bytes)
        parsed = parse_body(body)
        req = start_run_request(
            parsed,
            max_chars=settings.max_message_chars,
            tz=time_zone(request.headers.get("x-timezone")),
        )
        call = clients.orchestrator.StartRun(
            req,
            metadata=call_metadata(who.owner, request_id=request_id_var.get()),
            timeout=settings.run_timeout_seconds,
        )
    except BaseException:
        in_flight.release(who.owner)
        raise
    # The run is in flight here until its stream ends, fails or is cancelled.
    call.add_done_callback(lambda _: in_flight.release(who.owner))
    on_abandon = (
        partial(_cancel_for_gone_client, clients, settings, who.owner, req.run_id)
        if cancel_on_disconnect(parsed.forwarded_props)
        else None
    )
    call.add_done_callback(lambda _: on_end.call_ended())
    # The first event decides the HTTP status: an orchestrator that is down or refuses the
    # run gets a JSON error, not a 200 stream that fails.
    try:
        first = await asyncio.wait_for(call.read(), settings.rpc_timeout_seconds)
    except TimeoutError:
        call.cancel()
        return await _started_or_pending(
            clients, settings, who.owner, req, on_abandon, on_end, received
        )
    except grpc.RpcError as err:
        api = from_rpc(
            err,
            "orchestrator",
            camel_fields=True,
            renames={"profile_name": PROFILE_FIELD, "multitask_strategy": STRATEGY_FIELD},
        )
        domain = from_rpc_error(err)
        if domain.reason == OVERLOADED:
            raise overloaded(domain) from None
        if domain.reason == "THREAD_BUSY":
            api.extra = {
                "reason": "THREAD_BUSY",
                "activeRunId": domain.metadata.get("active_run_id", ""),
                "activeRunState": domain.metadata.get("active_run_state", ""),
            }
        elif domain.reason == "AUTOMATION_THREAD":
            api.extra = {"reason": "AUTOMATION_THREAD"}
        raise api from None
    if first is grpc.aio.EOF:
        raise ApiError(502, "INTERNAL", "the orchestrator ended the run without any event")
    return _run_stream(call, first, req, settings, on_abandon, on_end, received)


def _run_stream(
    call: Call,
    first: Any,
    req: orchestrator_service_pb2.StartRunRequest,
    settings: Settings,
    on_abandon: Callable[[], Awaitable[None]] | None,
    on_end: StreamEnd,
    received: float | None,
) -> StreamingResponse:
    """The 200 SSE answer of a run whose first response `first` was read from `call`."""
    return sse.EventStream(
        _events(
            call,
            first,
            req.thread_id,
            req.run_id,
            heartbeat=settings.sse_heartbeat_seconds,
            on_abandon=on_abandon,
            on_end=on_end,
            received=received,
        ),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


async def _started_or_pending(
    clients: Clients,
    settings: Settings,
    owner: str,
    req: orchestrator_service_pb2.StartRunRequest,
    on_abandon: Callable[[], Awaitable[None]] | None,
    on_end: StreamEnd,
    received: float | None,
) -> Response:
    """StartRun gave no first event in time. A run that started is streamed from its log
    (200, as if the POST had answered); otherwise 504 OUTCOME_UNKNOWN: the run may still be
    starting, so the one safe retry is the same request with the same runId (a run that
    started answers 409 RUN_EXISTS; one that did not starts now), never a new runId."""
    call = clients.orchestrator.StreamRun(
        orchestrator_service_pb2.StreamRunRequest(run_id=req.run_id, after_sequence=0),
        metadata=call_metadata(owner, request_id=request_id_var.get()),
        timeout=settings.run_timeout_seconds,
    )
    try:
        first = await asyncio.wait_for(call.read(), settings.rpc_timeout_seconds)
    except (TimeoutError, grpc.RpcError):
        first = None
    if first is None or first is grpc.aio.EOF:
        call.cancel()
        raise ApiError(
            504,
            OUTCOME_UNKNOWN,
            "the orchestrator did not say in time whether the run started; send the same "
            "request again with the same runId (409 RUN_EXISTS then means it started: follow "
            f"it with GET /api/v1/agent/runs/{req.run_id}/events), never with a new runId",
            extra={"runId": req.run_id, "threadId": req.thread_id},
        )
    return _run_stream(call, first, req, settings, on_abandon, on_end, received)


# A sequence number: ASCII digits only (str.isdigit() also takes "²" and other digits that
# int() refuses), at most 18 of them.
_SEQUENCE_RE = re.compile(r"[0-9]{1,18}")
MAX_SEQUENCE = 10**18 - 1


def _resume_position(header: str | None, after: int | None) -> int:
    """Last-Event-ID (what an EventSource sends when it reconnects) wins over ?after=."""
    if header is not None and header.strip():
        value = header.strip()
        if not _SEQUENCE_RE.fullmatch(value):
            raise invalid(
                "Last-Event-ID", "must be a sequence number (0 to 999999999999999999, ASCII digits)"
            )
        return int(value)
    return after or 0


async def _gone_or_missing(
    clients: Clients, settings: Settings, owner: str, run_id: str
) -> ApiError:
    """The run's events are gone: 410 with where its result is, if history knows the run
    (for this owner); otherwise 404."""
    try:
        reply = await clients.history.GetRun(
            history_service_pb2.GetRunRequest(run_id=run_id),
            metadata=call_metadata(owner, request_id=request_id_var.get()),
            timeout=settings.rpc_timeout_seconds,
        )
    except grpc.RpcError as err:
        return from_rpc(err, "history")
    run = reply.run
    history = f"/api/v1/agent/threads/{run.thread_id}/history"
    state = history_service_pb2.RunState.Name(run.state).removeprefix("RUN_STATE_").lower()
    return ApiError(
        410,
        "EVENTS_EXPIRED",
        "the run's events are no longer kept (its retention ended, or the event log was "
        f"lost); the run is {state}: read what it stored with GET {history} "
        f"and its record with GET /api/v1/agent/runs/{run_id}",
        extra={"runId": run_id, "threadId": run.thread_id, "state": state, "history": history},
    )


@router.get(
    "/api/v1/agent/runs/{run_id}/events",
    summary="Resume a run's AG-UI events after Last-Event-ID (or ?after=); SSE",
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "AG-UI events"},
        204: {"description": "the client already has the run's last event"},
        **errors(404, 410),
    },
    response_class=StreamingResponse,
    dependencies=[Depends(only_params("after"))],
)
async def resume_run(
    request: Request,
    run_id: RunPath,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_SEQUENCE, description="resume after this sequence number")
    ] = None,
    who: Caller = Depends(caller),
) -> Response:
    settings: Settings = request.app.state.settings
    clients: Clients = request.app.state.clients
    position = _resume_position(request.headers.get("last-event-id"), after)
    call = clients.orchestrator.StreamRun(
        orchestrator_service_pb2.StreamRunRequest(run_id=run_id, after_sequence=0),
        metadata=call_metadata(who.owner, request_id=request_id_var.get()),
        timeout=settings.run_timeout_seconds,
    )
    # Read the stored events up to `position` (at least one, which proves the run is the
    # caller's and its log exists), noting what is open there.
    replay = Replay()
    seen = 0
    thread_id = ""
    pending: Any = None
    eof = False
    while seen < max(position, 1):
        pending = asyncio.ensure_future(call.read())
        done, _ = await asyncio.wait({pending}, timeout=settings.rpc_timeout_seconds)
        if not done:
            if seen == 0:
                pending.cancel()
                call.cancel()
                raise ApiError(
                    504,
                    "DEADLINE_EXCEEDED",
                    "the orchestrator service did not answer in time; retry later",
                )
            break  # a position past what is stored: follow the live run from here
        try:
            response = pending.result()
        except grpc.RpcError as err:
            call.cancel()
            if err.code() == grpc.StatusCode.NOT_FOUND:
                raise await _gone_or_missing(clients, settings, who.owner, run_id) from None
            raise from_rpc(err, "orchestrator") from None
        if response is grpc.aio.EOF:
            pending, eof = None, True
            break
        event = response.event
        thread_id = thread_id or event.thread_id
        if event.sequence > position:
            break
        pending = None
        seen = event.sequence
        mapped = sse.to_agui(_with_ids(event, event.thread_id, run_id))
        if mapped is not None:
            replay.observe(mapped)
    if replay.terminal is not None or eof:
        # The client has the run's end already: nothing to send (and 204 tells an
        # EventSource to stop reconnecting).
        call.cancel()
        return Response(status_code=204, headers={"Cache-Control": "no-cache"})
    prefix = replay.prefix(thread_id, run_id) if position > 0 else []
    return sse.EventStream(
        _events(
            call,
            pending,
            thread_id,
            run_id,
            heartbeat=settings.sse_heartbeat_seconds,
            prefix=prefix,
        ),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


@router.post(
    "/api/v1/agent/runs/{run_id}:cancel",
    summary="Cancel a run (from any replica); harmless when repeated",
    responses=errors(404, 409),
    dependencies=[Depends(only_params())],
)
async def cancel_run(
    request: Request, run_id: RunPath, who: Caller = Depends(caller)
) -> dict[str, Any]:
    settings: Settings = request.app.state.settings
    clients: Clients = request.app.state.clients
    try:
        reply = await clients.orchestrator.CancelRun(
            orchestrator_service_pb2.CancelRunRequest(run_id=run_id),
            metadata=call_metadata(who.owner, request_id=request_id_var.get()),
            timeout=_cancel_timeout(settings),
        )
    except grpc.RpcError as err:
        api = from_rpc(err, "orchestrator", camel_fields=True)
        state = from_rpc_error(err).metadata.get("state")
        if state:
            api.extra = {"state": state}
        raise api from None
    return {
        "runId": run_id,
        "threadId": reply.thread_id,
        "state": reply.state,
        "cancelled": reply.cancelled,
    }
