"""GET /api/v1/tools: the deployment's server-side tools, and which of them a chat run on
a profile may call (docs/tools.md)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2
from fastapi import APIRouter, Depends, Query, Request

from services.gateway.auth import Caller, caller
from services.gateway.clients import Clients
from services.gateway.convert import source_status_json
from services.gateway.errors import from_rpc
from services.gateway.params import only_params
from services.gateway.run_input import MAX_PROFILE_NAME
from shared.identity import call_metadata
from shared.logs import request_id_var
from shared.settings import Settings

router = APIRouter()


@router.get(
    "/api/v1/tools",
    summary="The server-side tools, and the ones a chat run on a profile may call",
    dependencies=[Depends(only_params("profile"))],
)
async def list_tools(
    request: Request,
    who: Caller = Depends(caller),
    profile: Annotated[
        str,
        Query(max_length=MAX_PROFILE_NAME, description="a worker profile; empty: chat_default"),
    ] = "",
) -> dict[str, Any]:
    clients: Clients = request.app.state.clients
    settings: Settings = request.app.state.settings
    try:
        reply: orchestrator_service_pb2.ListToolsResponse = await clients.orchestrator.ListTools(
            orchestrator_service_pb2.ListToolsRequest(profile_name=profile),
            metadata=call_metadata(who.owner, request_id=request_id_var.get()),
            timeout=settings.rpc_timeout_seconds,
        )
    except grpc.RpcError as err:
        raise from_rpc(err, "orchestrator", renames={"profile_name": "profile"}) from None
    effective = set(reply.effective_tool_names)
    asking = set(reply.approval_tool_names)
    return {
        "profile": reply.profile_name,
        "tools": [
            {
                "name": t.spec.name,
                "description": t.spec.description,
                "parameters": json.loads(t.spec.parameters_json or "{}"),
                "source": t.source,
                "effective": t.spec.name in effective,
                "requiresApproval": t.requires_approval or t.spec.name in asking,
            }
            for t in reply.tools
        ],
        "effective": list(reply.effective_tool_names),
        "sources": [source_status_json(s) for s in reply.sources],
    }
