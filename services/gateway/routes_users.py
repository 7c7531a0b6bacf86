"""Registration: POST /api/v1/users gives the caller (the token's subject) their default
automation jobs (scheduler EnsureDefaultJobs), idempotently.

Registration is this explicit call only, not a side effect of the first authenticated
request: the gateway keeps no user store, so "first" could only be remembered per process
(every replica and restart would repeat the call on the request path), and it would not
know the user's time zone. Apps call it once at sign-up; calling it again is harmless.
"""

from __future__ import annotations

from typing import Any

from agentmesh.scheduler.v1 import scheduler_service_pb2 as pb
from fastapi import APIRouter, Depends, Request

from services.gateway import jobs
from services.gateway.auth import Caller, caller
from services.gateway.clients import Clients, unary
from services.gateway.openapi import errors
from services.gateway.params import only_params
from services.gateway.routes_runs import read_body
from services.gateway.strict import json_object
from shared.settings import Settings

router = APIRouter()


@router.post(
    "/api/v1/users",
    summary="Register the caller: their default automation jobs exist afterwards (idempotent)",
    responses=errors(413),
    openapi_extra={
        "requestBody": {
            "required": False,
            "content": {
                "application/json": {"schema": jobs.RegisterIn.model_json_schema(by_alias=True)}
            },
        }
    },
    dependencies=[Depends(only_params())],
)
async def register_user(request: Request, who: Caller = Depends(caller)) -> dict[str, Any]:
    clients: Clients = request.app.state.clients
    settings: Settings = request.app.state.settings
    body = await read_body(request, settings.max_request_bytes)
    data = json_object(body, "a registration", allow_empty=True)
    parsed = jobs.validate(jobs.RegisterIn, data)
    reply = await unary(
        clients.scheduler.EnsureDefaultJobs,
        pb.EnsureDefaultJobsRequest(timezone=parsed.timezone or ""),
        owner=who.owner,
        service="scheduler",
        timeout=settings.rpc_timeout_seconds,
    )
    return {"ownerId": who.owner, "jobs": [jobs.job_json(j) for j in reply.jobs]}
