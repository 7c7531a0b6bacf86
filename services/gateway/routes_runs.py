"""POST /api/v1/agent/runs: a RunAgentInput in, the run's AG-UI events out as SSE."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2
from agentmesh.type.v1 import run_event_pb2
from fastapi import APIRouter, Depends, Request
from starlette.responses import StreamingResponse

from services.gateway import sse
from services.gateway.auth import Caller, caller
from services.gateway.clients import Clients
from services.gateway.errors import ApiError, from_rpc, internal
from services.gateway.run_input import (
    PROFILE_FIELD,
    RunAgentInputIn,
    check_body_size,
    parse_body,
    start_run_request,
    time_zone,
    too_large,
)
from shared.identity import call_metadata
from shared.logs import request_id_var
from shared.settings import Settings

log = logging.getLogger("agentmesh.gateway")

router = APIRouter()

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


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


async def _events(
    call: grpc.aio.UnaryStreamCall,  # type: ignore[type-arg]
    first: orchestrator_service_pb2.StartRunResponse,
    thread_id: str,
    run_id: str,
) -> AsyncIterator[bytes]:
    """The SSE body: every mapped event; after RUN_FINISHED or RUN_ERROR, nothing."""
    try:
        response = first
        while True:
            event = sse.to_agui(_with_ids(response.event, thread_id, run_id))
            if event is not None:
                yield sse.frame(event)
                if event["type"] in sse.TERMINAL_TYPES:
                    return
            nxt = await call.read()
            if nxt is grpc.aio.EOF:
                log.error("run stream ended without RUN_FINISHED or RUN_ERROR")
                yield sse.frame(sse.run_error("the run ended without a result", "INTERNAL"))
                return
            response = nxt
    except grpc.RpcError as err:
        api = from_rpc(err, "orchestrator")
        yield sse.frame(sse.run_error(api.message, api.code))
    except Exception:
        # Headers are sent: the stream itself must say the run failed.
        log.exception("run stream failed")
        api = internal()
        yield sse.frame(sse.run_error(api.message, api.code))
    finally:
        call.cancel()


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
    responses={200: {"content": {"text/event-stream": {}}, "description": "AG-UI events"}},
    response_class=StreamingResponse,
)
async def start_run(request: Request, who: Caller = Depends(caller)) -> StreamingResponse:
    settings: Settings = request.app.state.settings
    clients: Clients = request.app.state.clients
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
    # The first event decides the HTTP status: an orchestrator that is down or refuses the
    # run gets a JSON error, not a 200 stream that fails.
    try:
        first = await asyncio.wait_for(call.read(), settings.rpc_timeout_seconds)
    except TimeoutError:
        call.cancel()
        raise ApiError(
            504, "DEADLINE_EXCEEDED", "the orchestrator service did not answer in time; retry later"
        ) from None
    except grpc.RpcError as err:
        raise from_rpc(
            err, "orchestrator", camel_fields=True, renames={"profile_name": PROFILE_FIELD}
        ) from None
    if first is grpc.aio.EOF:
        raise ApiError(502, "INTERNAL", "the orchestrator ended the run without any event")
    return StreamingResponse(
        _events(call, first, req.thread_id, req.run_id),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )
