"""Data lifecycle: delete a thread, delete an owner (a resumable job with readable progress),
export an owner's data (services.gateway.lifecycle drives and composes them)."""

from __future__ import annotations

from typing import Annotated, Any

import grpc
from agentmesh.history.v1 import history_service_pb2 as history_pb
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from services.gateway import lifecycle
from services.gateway.auth import Caller, admin_caller, caller
from services.gateway.clients import Clients, unary
from services.gateway.errors import from_rpc, invalid
from services.gateway.openapi import errors
from services.gateway.params import IdPath, PageSize, PageToken, only_params
from shared.errors import from_rpc_error
from shared.identity import call_metadata
from shared.ids import OWNER_RULE, is_owner_id
from shared.logs import request_id_var
from shared.settings import Settings

router = APIRouter()


def _ctx(request: Request) -> tuple[Clients, Settings]:
    return request.app.state.clients, request.app.state.settings


@router.delete(
    "/api/v1/agent/threads/{thread_id}",
    summary="Delete a thread with its messages, runs and event log (409 while a run is in flight)",
    responses=errors(404, 409),
    dependencies=[Depends(only_params())],
)
async def delete_thread(
    request: Request, thread_id: IdPath, who: Annotated[Caller, Depends(caller)]
) -> dict[str, Any]:
    clients, settings = _ctx(request)
    # Conversation recall's copy of the messages goes first: while the memory service
    # cannot answer, nothing is deleted (503, the caller tries again), so a deleted message
    # is never recalled. Messages of the thread written before this are never indexed again.
    await lifecycle.forget_conversation(clients, settings, who.owner, thread_id, strict=True)
    try:
        reply = await clients.history.DeleteThread(
            history_pb.DeleteThreadRequest(thread_id=thread_id),
            metadata=call_metadata(who.owner, request_id=request_id_var.get()),
            timeout=settings.rpc_timeout_seconds,
        )
    except grpc.RpcError as err:
        api = from_rpc(err, "history")
        domain = from_rpc_error(err)
        if domain.reason == "THREAD_BUSY":
            api.extra = {
                "reason": "THREAD_BUSY",
                "activeRunId": domain.metadata.get("active_run_id", ""),
            }
        raise api from None
    await lifecycle.delete_run_events(clients, settings, who.owner, list(reply.run_ids))
    # Again, for a run that began and ended between the first call and the deletion.
    await lifecycle.forget_conversation(clients, settings, who.owner, thread_id, strict=False)
    return lifecycle.deletion_json(reply.deletion)


def _accepted(deletion: history_pb.Deletion) -> JSONResponse:
    return JSONResponse(lifecycle.deletion_json(deletion), status_code=202)


@router.delete(
    "/api/v1/users/me",
    summary="Delete everything of the caller in every service (a job; 202 with its progress)",
    status_code=202,
    dependencies=[Depends(only_params())],
)
async def delete_me(request: Request, who: Annotated[Caller, Depends(caller)]) -> JSONResponse:
    clients, settings = _ctx(request)
    deletion = await lifecycle.start_owner_deletion(
        clients,
        settings,
        request.app.state.webhook_store,
        who.owner,
        requested_by=who.owner,
        admin=False,
    )
    return _accepted(deletion)


@router.get(
    "/api/v1/users/me/deletions/{deletion_id}",
    summary="One of the caller's deletion records: an owner deletion's progress, or a thread's",
    responses=errors(404),
    dependencies=[Depends(only_params())],
)
async def get_my_deletion(
    request: Request, deletion_id: IdPath, who: Annotated[Caller, Depends(caller)]
) -> dict[str, Any]:
    return await _deletion(request, who.owner, deletion_id, admin=False)


@router.get(
    "/api/v1/users/me/deletions",
    summary="The caller's deletion records, newest first (threads, retention, owner deletions)",
    dependencies=[Depends(only_params("page_size", "page_token"))],
)
async def list_my_deletions(
    request: Request,
    who: Annotated[Caller, Depends(caller)],
    page_size: PageSize = 0,
    page_token: PageToken = "",
) -> dict[str, Any]:
    return await _deletions(request, who.owner, page_size, page_token, admin=False)


@router.get(
    "/api/v1/admin/users/{owner_id}/deletions",
    summary="An owner's deletion records, newest first (admin scope)",
    responses=errors(403),
    dependencies=[Depends(only_params("page_size", "page_token"))],
)
async def list_owner_deletions(
    request: Request,
    owner_id: str,
    who: Annotated[Caller, Depends(admin_caller)],
    page_size: PageSize = 0,
    page_token: PageToken = "",
) -> dict[str, Any]:
    return await _deletions(request, _owner(owner_id), page_size, page_token, admin=True)


async def _deletions(
    request: Request, owner: str, page_size: int, page_token: str, *, admin: bool
) -> dict[str, Any]:
    clients, settings = _ctx(request)
    reply = await unary(
        clients.history.ListDeletions,
        history_pb.ListDeletionsRequest(page_size=page_size, page_token=page_token),
        owner=owner,
        service="history",
        timeout=settings.rpc_timeout_seconds,
        admin=admin,
    )
    out: dict[str, Any] = {"deletions": [lifecycle.deletion_json(d) for d in reply.deletions]}
    if reply.next_page_token:
        out["nextPageToken"] = reply.next_page_token
    return out


@router.get(
    "/api/v1/users/me/export",
    summary="Everything the caller has (threads, messages, memories, jobs) as one JSON document",
    dependencies=[Depends(only_params())],
)
async def export_me(request: Request, who: Annotated[Caller, Depends(caller)]) -> dict[str, Any]:
    clients, settings = _ctx(request)
    webhooks = request.app.state.webhook_store
    return await lifecycle.export_owner(clients, settings, webhooks, who.owner)


def _owner(owner_id: str) -> str:
    if not is_owner_id(owner_id):
        raise invalid("owner_id", OWNER_RULE)
    return owner_id


@router.delete(
    "/api/v1/admin/users/{owner_id}",
    summary="Delete everything of an owner in every service (admin scope; 202 with progress)",
    status_code=202,
    responses=errors(403),
    dependencies=[Depends(only_params())],
)
async def delete_owner(
    request: Request, owner_id: str, who: Annotated[Caller, Depends(admin_caller)]
) -> JSONResponse:
    clients, settings = _ctx(request)
    deletion = await lifecycle.start_owner_deletion(
        clients,
        settings,
        request.app.state.webhook_store,
        _owner(owner_id),
        requested_by=f"admin:{who.owner}",
        admin=True,
    )
    return _accepted(deletion)


@router.get(
    "/api/v1/admin/users/{owner_id}/deletions/{deletion_id}",
    summary="A deletion record of an owner (admin scope)",
    responses=errors(403, 404),
    dependencies=[Depends(only_params())],
)
async def get_owner_deletion(
    request: Request,
    owner_id: str,
    deletion_id: IdPath,
    who: Annotated[Caller, Depends(admin_caller)],
) -> dict[str, Any]:
    return await _deletion(request, _owner(owner_id), deletion_id, admin=True)


async def _deletion(
    request: Request, owner: str, deletion_id: str, *, admin: bool
) -> dict[str, Any]:
    clients, settings = _ctx(request)
    reply = await unary(
        clients.history.GetDeletion,
        history_pb.GetDeletionRequest(deletion_id=deletion_id),
        owner=owner,
        service="history",
        timeout=settings.rpc_timeout_seconds,
        admin=admin,
    )
    return lifecycle.deletion_json(reply.deletion)
