"""Webhooks over HTTP (services/gateway/webhooks.py): an owner's endpoints
(/api/v1/webhooks/endpoints) and their delivery log (/api/v1/webhooks/deliveries); the
admin's view of every delivery and the replay (/api/v1/admin/webhooks/deliveries)."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, StrictStr
from pydantic.alias_generators import to_camel

from services.gateway import convert
from services.gateway.auth import Caller, admin_caller, caller
from services.gateway.errors import ApiError, invalid
from services.gateway.jobs import validate
from services.gateway.openapi import errors, json_body
from services.gateway.params import IDENTIFIER, PageToken, only_params
from services.gateway.routes_runs import read_body
from services.gateway.strict import json_object
from services.gateway.webhook_store import (
    STATES,
    Delivery,
    Endpoint,
    EndpointHealth,
    WebhookStore,
    new_endpoint_id,
)
from services.gateway.webhooks import (
    endpoint_state,
    event_types_problem,
    new_secret,
    private_host_problem,
    url_problem,
)
from shared.errors import InvalidArgument
from shared.ids import OWNER_RULE, is_owner_id
from shared.pagination import PageTokens, position_int, position_list, position_str
from shared.settings import Settings
from shared.text import TEXT_RULE, is_storable

router = APIRouter()

MAX_ENDPOINTS = 100
MAX_DELIVERIES_LISTED = 1000

IdOfPath = Annotated[str, Path(min_length=1, max_length=64), IDENTIFIER]
Size = Annotated[int, Query(ge=0, le=MAX_DELIVERIES_LISTED, description="0 = 100")]
StateFilter = Annotated[str | None, Query(max_length=16, description=", ".join(STATES))]
EndpointFilter = Annotated[str | None, Query(max_length=64)]


class EndpointIn(BaseModel):
    """POST /api/v1/webhooks/endpoints."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=False)

    url: StrictStr
    description: StrictStr = Field(default="", max_length=200)
    # Empty or absent: every event type.
    event_types: list[StrictStr] = Field(default_factory=list, max_length=20)


def _store(request: Request) -> WebhookStore:
    store: WebhookStore = request.app.state.webhook_store
    return store


def endpoint_json(e: Endpoint) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": e.id,
        "url": e.url,
        "eventTypes": list(e.event_types),
        "createTime": convert.millis_time(e.create_time_ms),
    }
    if e.description:
        out["description"] = e.description
    return out


def health_json(health: EndpointHealth | None, settings: Settings) -> dict[str, Any]:
    """An endpoint's delivery status: its circuit breaker's state (webhooks.endpoint_state),
    failed attempts in a row, and the last failure."""
    now_ms = int(time.time() * 1000)
    state = endpoint_state(health, now_ms, settings)
    out: dict[str, Any] = {
        "state": state,
        "consecutiveFailures": health.consecutive_failures if health else 0,
    }
    if health is not None and state == "paused" and health.paused_until_ms is not None:
        out["pausedUntil"] = convert.millis_time(health.paused_until_ms)
    if health is not None and health.last_failure_ms is not None:
        out["lastError"] = health.last_error
        out["lastFailureTime"] = convert.millis_time(health.last_failure_ms)
    return out


async def _with_health(request: Request, owner: str, found: list[Endpoint]) -> list[dict[str, Any]]:
    settings: Settings = request.app.state.settings
    health = await _store(request).health_of(owner, [e.id for e in found])
    return [endpoint_json(e) | health_json(health.get(e.id), settings) for e in found]


def delivery_json(d: Delivery) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": d.id,
        "endpointId": d.endpoint_id,
        "ownerId": d.owner_id,
        "webhookId": d.event_id,
        "eventType": d.event_type,
        "url": d.url,
        "state": d.state,
        "attempts": d.attempts,
        "replays": d.replays,
        "createTime": convert.millis_time(d.create_time_ms),
    }
    if not d.endpoint_owner_id:
        out["deploymentEndpoint"] = True
    if d.next_attempt_ms is not None and d.state == "pending":
        out["nextAttemptTime"] = convert.millis_time(d.next_attempt_ms)
    if d.last_attempt_ms is not None:
        out["lastAttemptTime"] = convert.millis_time(d.last_attempt_ms)
    if d.last_status_code is not None:
        out["lastStatusCode"] = d.last_status_code
    if d.last_error:
        out["lastError"] = d.last_error
    return out


@router.post(
    "/api/v1/webhooks/endpoints",
    summary="Create a webhook endpoint; its signing secret is shown only here",
    status_code=201,
    responses=errors(413),
    openapi_extra=json_body(EndpointIn.model_json_schema(by_alias=True)),
    dependencies=[Depends(only_params())],
)
async def create_endpoint(
    request: Request, who: Annotated[Caller, Depends(caller)]
) -> dict[str, Any]:
    settings: Settings = request.app.state.settings
    body = validate(
        EndpointIn,
        json_object(await read_body(request, settings.max_request_bytes), "a webhook endpoint"),
    )
    problem = url_problem(body.url)
    if problem is None and not settings.webhook_allow_private_addresses:
        problem = private_host_problem(body.url)
    if problem is not None:
        raise invalid("url", problem)
    problem = event_types_problem(body.event_types)
    if problem is not None:
        raise invalid("eventTypes", problem)
    if not is_storable(body.description):
        raise invalid("description", TEXT_RULE)
    store = _store(request)
    if len(await store.endpoints(who.owner, MAX_ENDPOINTS)) >= MAX_ENDPOINTS:
        raise ApiError(
            409, "FAILED_PRECONDITION", f"an owner may have at most {MAX_ENDPOINTS} endpoints"
        )
    endpoint = Endpoint(
        id=new_endpoint_id(),
        owner_id=who.owner,
        url=body.url,
        secret=new_secret(),
        description=body.description,
        event_types=tuple(body.event_types),
        create_time_ms=int(time.time() * 1000),
    )
    await store.insert_endpoint(endpoint)
    return endpoint_json(endpoint) | health_json(None, settings) | {"secret": endpoint.secret}


@router.get(
    "/api/v1/webhooks/endpoints",
    summary="The caller's webhook endpoints, newest first (never their secrets)",
    dependencies=[Depends(only_params())],
)
async def list_endpoints(
    request: Request, who: Annotated[Caller, Depends(caller)]
) -> dict[str, Any]:
    found = await _store(request).endpoints(who.owner, MAX_ENDPOINTS)
    return {"endpoints": await _with_health(request, who.owner, found)}


@router.get(
    "/api/v1/webhooks/endpoints/{endpoint_id}",
    summary="One of the caller's webhook endpoints, with its delivery status",
    responses=errors(404),
    dependencies=[Depends(only_params())],
)
async def get_endpoint(
    request: Request, endpoint_id: IdOfPath, who: Annotated[Caller, Depends(caller)]
) -> dict[str, Any]:
    found = await _store(request).endpoint(who.owner, endpoint_id)
    if found is None:
        raise ApiError(404, "NOT_FOUND", "no such webhook endpoint")
    [shown] = await _with_health(request, who.owner, [found])
    return shown


@router.delete(
    "/api/v1/webhooks/endpoints/{endpoint_id}",
    summary="Delete one of the caller's webhook endpoints (its pending deliveries fail)",
    status_code=204,
    responses=errors(404),
    dependencies=[Depends(only_params())],
)
async def delete_endpoint(
    request: Request, endpoint_id: IdOfPath, who: Annotated[Caller, Depends(caller)]
) -> Response:
    if not await _store(request).delete_endpoint(who.owner, endpoint_id):
        raise ApiError(404, "NOT_FOUND", "no such webhook endpoint")
    return Response(status_code=204)


def _state_filter(state: str | None) -> str | None:
    if state is not None and state not in STATES:
        raise invalid("state", f"must be one of {', '.join(STATES)}")
    return state


async def _page(
    request: Request,
    *,
    endpoint_owner: str | None,
    owner: str | None,
    endpoint_id: str | None,
    state: str | None,
    page_size: int,
    page_token: str,
) -> dict[str, Any]:
    settings: Settings = request.app.state.settings
    tokens = PageTokens(settings.page_token_secret)
    scope = ["webhook-deliveries", endpoint_owner, owner, endpoint_id, state]
    after = None
    try:
        position = tokens.decode(page_token, scope)
        if position is not None:
            t, i = position_list(position, 2)
            after = (position_int(t), position_str(i))
    except InvalidArgument as err:
        why = err.violations[0][1] if err.violations else err.message
        raise invalid("page_token", why) from None
    size = page_size or 100
    rows = await _store(request).deliveries(
        endpoint_owner=endpoint_owner,
        owner=owner,
        endpoint_id=endpoint_id,
        state=_state_filter(state),
        after=after,
        limit=size + 1,
    )
    out: dict[str, Any] = {"deliveries": [delivery_json(d) for d in rows[:size]]}
    if len(rows) > size:
        last = rows[size - 1]
        out["nextPageToken"] = tokens.encode([last.create_time_ms, last.id], scope)
    return out


@router.get(
    "/api/v1/webhooks/deliveries",
    summary="The delivery log of the caller's endpoints, newest first",
    dependencies=[Depends(only_params("endpoint_id", "state", "page_size", "page_token"))],
)
async def list_deliveries(
    request: Request,
    who: Annotated[Caller, Depends(caller)],
    endpoint_id: EndpointFilter = None,
    state: StateFilter = None,
    page_size: Size = 0,
    page_token: PageToken = "",
) -> dict[str, Any]:
    return await _page(
        request,
        endpoint_owner=who.owner,
        owner=None,
        endpoint_id=endpoint_id,
        state=state,
        page_size=page_size,
        page_token=page_token,
    )


@router.get(
    "/api/v1/webhooks/deliveries/{delivery_id}",
    summary="One delivery to one of the caller's endpoints",
    responses=errors(404),
    dependencies=[Depends(only_params())],
)
async def get_delivery(
    request: Request, delivery_id: IdOfPath, who: Annotated[Caller, Depends(caller)]
) -> dict[str, Any]:
    found = await _store(request).delivery(delivery_id, who.owner)
    if found is None:
        raise ApiError(404, "NOT_FOUND", "no such webhook delivery")
    return delivery_json(found)


@router.get(
    "/api/v1/admin/webhooks/deliveries",
    summary="Every delivery (deployment and owners' endpoints), newest first (admin scope)",
    responses=errors(403),
    dependencies=[
        Depends(only_params("owner_id", "endpoint_id", "state", "page_size", "page_token"))
    ],
)
async def admin_list_deliveries(
    request: Request,
    _who: Annotated[Caller, Depends(admin_caller)],
    owner_id: Annotated[str | None, Query(max_length=128)] = None,
    endpoint_id: EndpointFilter = None,
    state: StateFilter = None,
    page_size: Size = 0,
    page_token: PageToken = "",
) -> dict[str, Any]:
    if owner_id is not None and not is_owner_id(owner_id):
        raise invalid("owner_id", OWNER_RULE)
    return await _page(
        request,
        endpoint_owner=None,
        owner=owner_id,
        endpoint_id=endpoint_id,
        state=state,
        page_size=page_size,
        page_token=page_token,
    )


@router.post(
    "/api/v1/admin/webhooks/deliveries/{delivery_id}:replay",
    summary="Send a delivery again, same webhook-id and body, new round of attempts (admin)",
    responses=errors(403, 404),
    dependencies=[Depends(only_params())],
)
async def replay_delivery(
    request: Request, delivery_id: IdOfPath, _who: Annotated[Caller, Depends(admin_caller)]
) -> dict[str, Any]:
    replayed = await _store(request).replay(delivery_id, int(time.time() * 1000))
    if replayed is None:
        raise ApiError(404, "NOT_FOUND", "no such webhook delivery")
    return delivery_json(replayed)
