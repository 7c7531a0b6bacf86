"""Threads, history, runs and the admin audit listing (history service)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from agentmesh.history.v1 import history_service_pb2
from agentmesh.type.v1 import execution_profile_pb2, message_pb2
from fastapi import APIRouter, Depends, Query, Request

from services.gateway import convert
from services.gateway.auth import Caller, admin_caller, caller
from services.gateway.clients import Clients, unary
from services.gateway.errors import invalid
from services.gateway.openapi import errors
from services.gateway.params import IdPath, PageSize, PageToken, only_params
from services.gateway.strict import RFC3339, instant
from shared.ids import OWNER_RULE, is_owner_id
from shared.pagination import DEFAULT_PAGE_SIZE
from shared.settings import Settings

router = APIRouter()


_DIRECTIONS = {
    "forward": history_service_pb2.DIRECTION_FORWARD,
    "backward": history_service_pb2.DIRECTION_BACKWARD,
}
_ORIGINS = {
    "chat": message_pb2.RUNTIME_MODE_CHAT,
    "automation": message_pb2.RUNTIME_MODE_AUTOMATION,
}
_EXECUTORS = {
    "worker": execution_profile_pb2.EXECUTOR_WORKER,
    "memory": execution_profile_pb2.EXECUTOR_MEMORY,
}


def _ctx(request: Request) -> tuple[Clients, Settings]:
    return request.app.state.clients, request.app.state.settings


async def _page_of_messages(ask: Callable[[int], Awaitable[Any]], page_size: int) -> Any:
    """history's page for `page_size` (`ask(n)` asks for n stored messages), cut to at most
    `page_size` messages as the client sees them: when the stored messages expand to more
    (several tool results each), the page is asked again for the stored messages that fit,
    so its next_page_token resumes right after them."""
    limit = page_size or DEFAULT_PAGE_SIZE
    reply = await ask(page_size)
    # Bounded: a message appended between the asks (newest first) can shift the page again.
    for _ in range(3):
        fitting = convert.stored_messages_within(reply.messages, limit)
        if fitting is None:
            break
        reply = await ask(fitting)
    return reply


def _page(key: str, items: list[dict[str, Any]], token: str) -> dict[str, Any]:
    out: dict[str, Any] = {key: items}
    if token:
        out["nextPageToken"] = token
    return out


@router.get(
    "/api/v1/agent/threads",
    summary="The caller's threads",
    dependencies=[Depends(only_params("page_size", "page_token"))],
)
async def list_threads(
    request: Request,
    who: Caller = Depends(caller),
    page_size: PageSize = 0,
    page_token: PageToken = "",
) -> dict[str, Any]:
    clients, settings = _ctx(request)
    reply = await unary(
        clients.history.ListThreads,
        history_service_pb2.ListThreadsRequest(page_size=page_size, page_token=page_token),
        owner=who.owner,
        service="history",
        timeout=settings.rpc_timeout_seconds,
    )
    return _page("threads", [convert.thread_json(t) for t in reply.threads], reply.next_page_token)


@router.get(
    "/api/v1/agent/threads/{thread_id}/history",
    summary="A thread's messages visible in history (UI_HISTORY)",
    responses=errors(404),
    dependencies=[Depends(only_params("page_size", "page_token", "direction"))],
)
async def list_history(
    request: Request,
    thread_id: IdPath,
    who: Caller = Depends(caller),
    page_size: PageSize = 0,
    page_token: PageToken = "",
    direction: Literal["forward", "backward"] = "forward",
) -> dict[str, Any]:
    clients, settings = _ctx(request)

    def ask(size: int) -> Awaitable[Any]:
        return unary(
            clients.history.ListHistory,
            history_service_pb2.ListHistoryRequest(
                thread_id=thread_id,
                page_size=size,
                page_token=page_token,
                direction=_DIRECTIONS[direction],
            ),
            owner=who.owner,
            service="history",
            timeout=settings.rpc_timeout_seconds,
        )

    reply = await _page_of_messages(ask, page_size)
    return _page("messages", convert.messages_json(reply.messages), reply.next_page_token)


@router.get(
    "/api/v1/agent/runs/{run_id}",
    summary="One run record",
    responses=errors(404),
    dependencies=[Depends(only_params())],
)
async def get_run(
    request: Request,
    run_id: IdPath,
    who: Caller = Depends(caller),
) -> dict[str, Any]:
    clients, settings = _ctx(request)
    reply = await unary(
        clients.history.GetRun,
        history_service_pb2.GetRunRequest(run_id=run_id),
        owner=who.owner,
        service="history",
        timeout=settings.rpc_timeout_seconds,
    )
    return convert.run_json(reply.run)


def _utc(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)  # a time without an offset is UTC
    return value


@router.get(
    "/api/v1/admin/audit",
    summary=(
        "Every message, tool call and refused tool call of an owner, hidden ones included "
        "(admin scope)"
    ),
    responses=errors(403),
    dependencies=[
        Depends(
            only_params(
                "owner_id",
                "origin",
                "executor",
                "execution_profile_name",
                "thread_id",
                "start_time",
                "end_time",
                "page_size",
                "page_token",
            )
        )
    ],
)
async def list_audit(
    request: Request,
    owner_id: Annotated[str, Query(description="The owner whose records are listed")],
    who: Caller = Depends(admin_caller),
    origin: Literal["chat", "automation"] | None = None,
    executor: Literal["worker", "memory"] | None = None,
    execution_profile_name: Annotated[str, Query(max_length=128)] = "",
    thread_id: Annotated[str, Query(max_length=128)] = "",
    start_time: Annotated[
        datetime | None, Query(description="RFC 3339, inclusive"), RFC3339
    ] = None,
    end_time: Annotated[datetime | None, Query(description="RFC 3339, exclusive"), RFC3339] = None,
    page_size: PageSize = 0,
    page_token: PageToken = "",
) -> dict[str, Any]:
    if not is_owner_id(owner_id):
        raise invalid("owner_id", OWNER_RULE)
    # Each bound in the Timestamp range first: comparing instants past year 9999 overflows.
    start, end = _utc(start_time), _utc(end_time)
    start_ts = instant("start_time", start) if start is not None else None
    end_ts = instant("end_time", end) if end is not None else None
    if (
        start_ts is not None
        and end_ts is not None
        and (end_ts.ToNanoseconds() <= start_ts.ToNanoseconds())
    ):
        raise invalid("end_time", "must be after start_time")
    flt = history_service_pb2.AuditFilter(
        origin=_ORIGINS.get(origin or "", message_pb2.RUNTIME_MODE_UNSPECIFIED),
        executor=_EXECUTORS.get(executor or "", execution_profile_pb2.EXECUTOR_UNSPECIFIED),
        execution_profile_name=execution_profile_name,
        thread_id=thread_id,
    )
    if start_ts is not None:
        flt.start_time.CopyFrom(start_ts)
    if end_ts is not None:
        flt.end_time.CopyFrom(end_ts)
    clients, settings = _ctx(request)

    def ask(size: int) -> Awaitable[Any]:
        return unary(
            clients.history.ListAudit,
            history_service_pb2.ListAuditRequest(
                owner_id=owner_id, filter=flt, page_size=size, page_token=page_token
            ),
            owner=who.owner,
            service="history",
            timeout=settings.rpc_timeout_seconds,
            admin=True,
        )

    reply = await _page_of_messages(ask, page_size)
    out = _page(
        "messages", convert.messages_json(reply.messages, audit=True), reply.next_page_token
    )
    out["toolDenials"] = [convert.tool_denial_json(d) for d in reply.tool_denials]
    return out
