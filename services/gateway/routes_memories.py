"""The caller's memories (memory service): list and search, create, edit, delete, export,
consolidate, and the record of every change (who changed what, and why)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from agentmesh.memory.v1 import memory_service_pb2 as pb
from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from services.gateway import convert, jobs
from services.gateway.auth import Caller, caller
from services.gateway.clients import Clients, unary
from services.gateway.errors import ApiError, invalid
from services.gateway.openapi import errors, json_body
from services.gateway.params import IdPath, PageSize, PageToken, only_params
from services.gateway.routes_runs import read_body
from services.gateway.strict import json_object
from shared.pagination import MAX_PAGE_SIZE
from shared.settings import Settings
from shared.timestamps import rfc3339

router = APIRouter()

MEMORIES = "/api/v1/memories"
# What the API writes (the memory service's change record names the owner as its actor).
ACTOR = "api"
Kind = Literal["fact", "preference", "dislike", "name", "place"]


class MemoryIn(BaseModel):
    """POST /api/v1/memories."""

    model_config = ConfigDict(extra="forbid")
    content: StrictStr = Field(max_length=2000)
    kind: Kind | None = None


class MemoryPatch(BaseModel):
    """PATCH /api/v1/memories/{id}: what changes, and the version it is based on (optional)."""

    model_config = ConfigDict(extra="forbid")
    content: StrictStr | None = Field(default=None, max_length=2000)
    kind: Kind | None = None
    version: StrictInt | None = Field(default=None, ge=1)


async def _memory(
    request: Request,
    who: Caller,
    method: str,
    message: Any,
    renames: Mapping[str, str] | None = None,
) -> Any:
    clients: Clients = request.app.state.clients
    settings: Settings = request.app.state.settings
    return await unary(
        getattr(clients.memory, method),
        message,
        owner=who.owner,
        service="memory",
        timeout=settings.rpc_timeout_seconds,
        renames=renames,
    )


async def _body(request: Request, what: str) -> dict[str, Any]:
    settings: Settings = request.app.state.settings
    return json_object(await read_body(request, settings.max_request_bytes), what)


@router.get(
    MEMORIES,
    summary="List the caller's memories (newest update first), or search them with `q`",
    dependencies=[Depends(only_params("q", "query", "page_size", "page_token"))],
)
async def list_memories(
    request: Request,
    who: Caller = Depends(caller),
    q: Annotated[str, Query(max_length=1000, description="Search (best match first)")] = "",
    query: Annotated[str, Query(max_length=1000, description="The former name of q")] = "",
    page_size: PageSize = 0,
    page_token: PageToken = "",
) -> dict[str, Any]:
    if q and query:
        raise invalid("query", "give q or query, not both (query is the former name of q)")
    text = q or query
    if text.strip():
        if page_token:
            raise invalid("page_token", "search results are one page; drop page_token or q")
        found = await _memory(
            request,
            who,
            "SearchMemories",
            pb.SearchMemoriesRequest(query=text, page_size=page_size),
            # The service names its field query; the caller may have called it q.
            renames={"query": "q"} if q else None,
        )
        return {
            "memories": [convert.memory_json(m, scored=True) for m in found.memories],
            **convert.search_mode_json(found),
        }
    reply = await _memory(
        request,
        who,
        "ListMemories",
        pb.ListMemoriesRequest(page_size=page_size, page_token=page_token),
    )
    out: dict[str, Any] = {"memories": [convert.memory_json(m) for m in reply.memories]}
    if reply.next_page_token:
        out["nextPageToken"] = reply.next_page_token
    return out


@router.post(
    MEMORIES,
    summary="Save a memory (the same fact twice is one memory: 200 with it, else 201)",
    responses=errors(413),
    status_code=201,
    openapi_extra=json_body(MemoryIn.model_json_schema()),
    dependencies=[Depends(only_params())],
)
async def create_memory(
    request: Request, response: Response, who: Caller = Depends(caller)
) -> dict[str, Any]:
    body = jobs.validate(MemoryIn, await _body(request, "a memory"))
    reply = await _memory(
        request,
        who,
        "WriteMemory",
        pb.WriteMemoryRequest(content=body.content, kind=body.kind or "", actor=ACTOR),
    )
    if not reply.created:
        response.status_code = 200
    response.headers["Location"] = f"{MEMORIES}/{reply.memory.id}"
    return convert.memory_json(reply.memory)


@router.get(
    f"{MEMORIES}:export",
    summary="All of the caller's memories and their change record, as one JSON document",
    dependencies=[Depends(only_params())],
)
async def export_memories(
    request: Request, response: Response, who: Caller = Depends(caller)
) -> dict[str, Any]:
    exported = rfc3339(datetime.now(UTC))
    memories = await _every_page(request, who, "ListMemories", pb.ListMemoriesRequest, "memories")
    changes = await _every_page(
        request, who, "ListMemoryChanges", pb.ListMemoryChangesRequest, "changes"
    )
    response.headers["Content-Disposition"] = 'attachment; filename="memories.json"'
    return {
        "exportTime": exported,
        "memories": [convert.memory_json(m) for m in memories],
        "changes": [convert.memory_change_json(c) for c in changes],
    }


async def _every_page(
    request: Request, who: Caller, method: str, make: Callable[..., Any], field: str
) -> list[Any]:
    """Every item of a paged listing of the caller's, following next_page_token."""
    items: list[Any] = []
    token = ""
    while True:
        page = await _memory(request, who, method, make(page_size=MAX_PAGE_SIZE, page_token=token))
        items.extend(getattr(page, field))
        token = page.next_page_token
        if not token:
            return items


@router.post(
    f"{MEMORIES}:consolidate",
    summary="Merge the caller's duplicate memories and remove the ones newer memories contradict",
    dependencies=[Depends(only_params())],
)
async def consolidate_memories(request: Request, who: Caller = Depends(caller)) -> dict[str, Any]:
    reply = await _memory(
        request, who, "ConsolidateMemories", pb.ConsolidateMemoriesRequest(actor=ACTOR)
    )
    return {
        "merged": reply.merged_count,
        "superseded": reply.superseded_count,
        "changes": [convert.memory_change_json(c) for c in reply.changes],
    }


@router.get(
    f"{MEMORIES}:changes",
    summary="The record of every change of the caller's memories, oldest first",
    dependencies=[Depends(only_params("page_size", "page_token"))],
)
async def list_memory_changes(
    request: Request,
    who: Caller = Depends(caller),
    page_size: PageSize = 0,
    page_token: PageToken = "",
) -> dict[str, Any]:
    reply = await _memory(
        request,
        who,
        "ListMemoryChanges",
        pb.ListMemoryChangesRequest(page_size=page_size, page_token=page_token),
    )
    out: dict[str, Any] = {"changes": [convert.memory_change_json(c) for c in reply.changes]}
    if reply.next_page_token:
        out["nextPageToken"] = reply.next_page_token
    return out


@router.get(
    f"{MEMORIES}/{{memory_id}}",
    summary="One of the caller's memories",
    responses=errors(404),
    dependencies=[Depends(only_params())],
)
async def get_memory(
    request: Request, memory_id: IdPath, who: Caller = Depends(caller)
) -> dict[str, Any]:
    reply = await _memory(request, who, "GetMemory", pb.GetMemoryRequest(id=memory_id))
    return convert.memory_json(reply.memory)


@router.patch(
    f"{MEMORIES}/{{memory_id}}",
    summary="Edit a memory's content and/or kind",
    responses=errors(404, 409, 413),
    openapi_extra=json_body(MemoryPatch.model_json_schema()),
    dependencies=[Depends(only_params())],
)
async def edit_memory(
    request: Request, memory_id: IdPath, who: Caller = Depends(caller)
) -> dict[str, Any]:
    body = jobs.validate(MemoryPatch, await _body(request, "a memory edit"))
    if body.content is None and body.kind is None:
        raise invalid("content", "set content or kind (or both)")
    if body.content is not None and not body.content.strip():
        raise invalid("content", "must not be empty")
    reply = await _memory(
        request,
        who,
        "UpdateMemory",
        pb.UpdateMemoryRequest(
            id=memory_id,
            content=body.content or "",
            kind=body.kind or "",
            expected_version=body.version or 0,
            actor=ACTOR,
        ),
    )
    return convert.memory_json(reply.memory)


@router.delete(
    f"{MEMORIES}/{{memory_id}}",
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
    reply = await _memory(
        request,
        who,
        "ForgetMemory",
        pb.ForgetMemoryRequest(id=memory_id, actor=ACTOR, reason="deleted by the owner"),
    )
    if memory_id not in reply.forgotten_ids:
        raise ApiError(404, "NOT_FOUND", f"memory {memory_id} not found")
    return Response(status_code=204)
