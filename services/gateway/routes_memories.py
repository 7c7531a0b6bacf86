"""The caller's memories (memory service)."""

from __future__ import annotations

from typing import Annotated, Any

from agentmesh.memory.v1 import memory_service_pb2
from fastapi import APIRouter, Depends, Query, Request, Response

from services.gateway import convert
from services.gateway.auth import Caller, caller
from services.gateway.clients import Clients, unary
from services.gateway.errors import ApiError, invalid
from services.gateway.openapi import errors
from services.gateway.params import IdPath, PageSize, PageToken, only_params
from shared.settings import Settings

router = APIRouter()


@router.get(
    "/api/v1/memories",
    summary="List the caller's memories, or search them when `query` is given",
    dependencies=[Depends(only_params("query", "page_size", "page_token"))],
)
async def list_memories(
    request: Request,
    who: Caller = Depends(caller),
    query: Annotated[str, Query(max_length=1000, description="Lexical search")] = "",
    page_size: PageSize = 0,
    page_token: PageToken = "",
) -> dict[str, Any]:
    clients: Clients = request.app.state.clients
    settings: Settings = request.app.state.settings
    if query.strip():
        if page_token:
            raise invalid("page_token", "search results are one page; drop page_token or query")
        found = await unary(
            clients.memory.SearchMemories,
            memory_service_pb2.SearchMemoriesRequest(query=query, page_size=page_size),
            owner=who.owner,
            service="memory",
            timeout=settings.rpc_timeout_seconds,
        )
        return {"memories": [convert.memory_json(m) for m in found.memories]}
    reply = await unary(
        clients.memory.ListMemories,
        memory_service_pb2.ListMemoriesRequest(page_size=page_size, page_token=page_token),
        owner=who.owner,
        service="memory",
        timeout=settings.rpc_timeout_seconds,
    )
    out: dict[str, Any] = {"memories": [convert.memory_json(m) for m in reply.memories]}
    if reply.next_page_token:
        out["nextPageToken"] = reply.next_page_token
    return out


@router.delete(
    "/api/v1/memories/{memory_id}",
    summary="Forget one of the caller's memories",
    responses=errors(404, 409),
    status_code=204,
    response_class=Response,
    dependencies=[Depends(only_params())],
)
async def forget_memory(
    request: Request,
    memory_id: IdPath,
    who: Caller = Depends(caller),
) -> Response:
    clients: Clients = request.app.state.clients
    settings: Settings = request.app.state.settings
    reply = await unary(
        clients.memory.ForgetMemory,
        memory_service_pb2.ForgetMemoryRequest(id=memory_id),
        owner=who.owner,
        service="memory",
        timeout=settings.rpc_timeout_seconds,
    )
    if memory_id not in reply.forgotten_ids:
        raise ApiError(404, "NOT_FOUND", f"memory {memory_id} not found")
    return Response(status_code=204)
