"""Usage, quotas and API keys: GET /api/v1/usage (the caller's own), and the admin
endpoints /api/v1/admin/owners/{owner_id}/usage, /api/v1/admin/owners/{owner_id}/quotas
and /api/v1/admin/api-keys (services/gateway/quota.py, services/gateway/auth.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from agentmesh.history.v1 import history_service_pb2 as history_pb
from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr
from pydantic.alias_generators import to_camel

from services.gateway import convert
from services.gateway.auth import ApiKeys, Caller, admin_caller, caller
from services.gateway.errors import ApiError, invalid
from services.gateway.jobs import validate
from services.gateway.openapi import errors, json_body
from services.gateway.params import IDENTIFIER, only_params
from services.gateway.quota import Quota, Quotas, effective, utc_day
from services.gateway.routes_runs import read_body
from services.gateway.store import ApiKey, GatewayStore, QuotaOverride
from services.gateway.strict import json_object
from services.gateway.usage import OwnerUsage
from shared.ids import OWNER_RULE, is_owner_id
from shared.settings import Settings
from shared.text import TEXT_RULE, is_storable

router = APIRouter()

MAX_USAGE_DAYS = 366
# The most a quota may be set to (fits every store's BIGINT, and JSON numbers exactly).
MAX_QUOTA = 10**12
MAX_KEYS_LISTED = 1000

OwnerPath = Annotated[str, Path(min_length=1, max_length=128, description="The owner id")]
KeyPath = Annotated[
    str, Path(min_length=1, max_length=128, description="The API key's id"), IDENTIFIER
]
Days = Annotated[
    int,
    Query(ge=1, le=MAX_USAGE_DAYS, description="UTC days counted, today included"),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=False)


class QuotasIn(_Strict):
    """PUT /api/v1/admin/owners/{owner_id}/quotas: null or absent = the deployment default,
    0 = no limit."""

    runs_per_minute: StrictInt | None = Field(default=None, ge=0, le=MAX_QUOTA)
    concurrent_runs: StrictInt | None = Field(default=None, ge=0, le=MAX_QUOTA)
    tokens_per_day: StrictInt | None = Field(default=None, ge=0, le=MAX_QUOTA)


class ApiKeyIn(_Strict):
    """POST /api/v1/admin/api-keys."""

    owner_id: StrictStr
    name: StrictStr = Field(min_length=1, max_length=200)
    admin: StrictBool = False


def _state(request: Request) -> tuple[Settings, GatewayStore, Quota]:
    state = request.app.state
    return state.settings, state.store, state.quota


def _owner(owner_id: str) -> str:
    if not is_owner_id(owner_id):
        raise invalid("owner_id", OWNER_RULE)
    return owner_id


def _present(values: dict[str, Any]) -> dict[str, Any]:
    """Optional fields without a value are omitted, never null (api-endpoints.md)."""
    return {k: v for k, v in values.items() if v is not None}


def _quotas_json(q: Quotas) -> dict[str, Any]:
    return {
        "runsPerMinute": q.runs_per_minute,
        "concurrentRuns": q.concurrent_runs,
        "tokensPerDay": q.tokens_per_day,
    }


def _totals(days: Sequence[history_pb.OwnerUsageDay]) -> dict[str, Any]:
    inp = sum(d.input_tokens for d in days)
    out = sum(d.output_tokens for d in days)
    return {
        "runs": sum(d.runs for d in days),
        "failedRuns": sum(d.failed_runs for d in days),
        "automationRuns": sum(d.automation_runs for d in days),
        "inputTokens": inp,
        "outputTokens": out,
        "totalTokens": inp + out,
        "durationMs": sum(d.duration_ms for d in days),
        "tokensEstimated": any(d.tokens_estimated for d in days),
    }


async def _usage(request: Request, owner: str, days: int) -> dict[str, Any]:
    """The owner's usage, as history's usage ledger sums it (services/gateway/usage.py)."""
    _, _, quota = _state(request)
    usage: OwnerUsage = request.app.state.usage
    today = datetime.now(UTC)
    first = utc_day(today - timedelta(days=days - 1))
    last = utc_day(today)
    found = await usage.days(owner, first, last)
    quotas = await quota.quotas(owner)
    return {
        "ownerId": owner,
        "from": first,
        "to": last,
        "total": _totals(found),
        "days": [{"day": d.day} | _totals([d]) for d in found],
        "quotas": _quotas_json(quotas) | {"overridden": quotas.overridden},
        "current": {
            "concurrentRuns": await quota.concurrent(owner),
            # Read now, not the tokens-per-day check's cached value.
            "tokensToday": sum(d.input_tokens + d.output_tokens for d in found if d.day == last),
        },
    }


@router.get(
    "/api/v1/usage",
    summary="The caller's usage (runs, tokens, duration per UTC day) and quotas",
    dependencies=[Depends(only_params("days"))],
)
async def my_usage(
    request: Request, who: Caller = Depends(caller), days: Days = 30
) -> dict[str, Any]:
    return await _usage(request, who.owner, days)


@router.get(
    "/api/v1/admin/owners/{owner_id}/usage",
    summary="An owner's usage and quotas (admin scope)",
    responses=errors(403),
    dependencies=[Depends(only_params("days"))],
)
async def owner_usage(
    request: Request,
    owner_id: OwnerPath,
    _who: Caller = Depends(admin_caller),
    days: Days = 30,
) -> dict[str, Any]:
    return await _usage(request, _owner(owner_id), days)


async def _quotas_answer(request: Request, owner: str) -> dict[str, Any]:
    _, store, quota = _state(request)
    override = await store.quota_override(owner)
    # Read now (not the cached override a run would use): what the admin set is shown.
    now = effective(quota.defaults(), override)
    return {
        "ownerId": owner,
        **_quotas_json(now),
        "overridden": override is not None,
        "defaults": _quotas_json(quota.defaults()),
        **(
            {}
            if override is None
            else {
                "override": _present(
                    {
                        "runsPerMinute": override.runs_per_minute,
                        "concurrentRuns": override.concurrent_runs,
                        "tokensPerDay": override.tokens_per_day,
                        "updateTime": convert.millis_time(override.update_time_ms),
                    }
                )
            }
        ),
    }


@router.get(
    "/api/v1/admin/owners/{owner_id}/quotas",
    summary="An owner's quotas: effective, defaults and the admin's override (admin scope)",
    responses=errors(403),
    dependencies=[Depends(only_params())],
)
async def get_quotas(
    request: Request, owner_id: OwnerPath, _who: Caller = Depends(admin_caller)
) -> dict[str, Any]:
    return await _quotas_answer(request, _owner(owner_id))


@router.put(
    "/api/v1/admin/owners/{owner_id}/quotas",
    summary="Set an owner's quotas (admin scope); null = the default, 0 = no limit",
    responses=errors(403, 413),
    openapi_extra=json_body(QuotasIn.model_json_schema(by_alias=True)),
    dependencies=[Depends(only_params())],
)
async def put_quotas(
    request: Request, owner_id: OwnerPath, _who: Caller = Depends(admin_caller)
) -> dict[str, Any]:
    owner = _owner(owner_id)
    settings, store, _ = _state(request)
    body = validate(
        QuotasIn, json_object(await read_body(request, settings.max_request_bytes), "quotas")
    )
    await store.put_quota_override(
        owner,
        QuotaOverride(
            body.runs_per_minute,
            body.concurrent_runs,
            body.tokens_per_day,
            int(time.time() * 1000),
        ),
    )
    request.app.state.quota.forget(owner)
    return await _quotas_answer(request, owner)


@router.delete(
    "/api/v1/admin/owners/{owner_id}/quotas",
    summary="Give an owner the default quotas again (admin scope); harmless when repeated",
    responses=errors(403),
    dependencies=[Depends(only_params())],
)
async def delete_quotas(
    request: Request, owner_id: OwnerPath, _who: Caller = Depends(admin_caller)
) -> dict[str, Any]:
    owner = _owner(owner_id)
    await request.app.state.store.delete_quota_override(owner)
    request.app.state.quota.forget(owner)
    return await _quotas_answer(request, owner)


def _key_json(key: ApiKey) -> dict[str, Any]:
    return _present(
        {
            "id": key.id,
            "ownerId": key.owner_id,
            "name": key.name,
            "admin": key.admin,
            "createTime": convert.millis_time(key.create_time_ms),
            "lastUsedTime": None
            if key.last_used_time_ms is None
            else convert.millis_time(key.last_used_time_ms),
            "revokeTime": None
            if key.revoke_time_ms is None
            else convert.millis_time(key.revoke_time_ms),
            "revoked": key.revoke_time_ms is not None,
        }
    )


@router.post(
    "/api/v1/admin/api-keys",
    summary="Create an API key for an owner (admin scope); the key is shown only here",
    status_code=201,
    responses=errors(403, 413),
    openapi_extra=json_body(ApiKeyIn.model_json_schema(by_alias=True)),
    dependencies=[Depends(only_params())],
)
async def create_api_key(request: Request, _who: Caller = Depends(admin_caller)) -> dict[str, Any]:
    settings: Settings = request.app.state.settings
    body = validate(
        ApiKeyIn, json_object(await read_body(request, settings.max_request_bytes), "an API key")
    )
    if not is_owner_id(body.owner_id):
        raise invalid("ownerId", OWNER_RULE)
    if not is_storable(body.name):
        raise invalid("name", TEXT_RULE)
    keys: ApiKeys = request.app.state.api_keys
    record, key = await keys.create(body.owner_id, admin=body.admin, name=body.name)
    return _key_json(record) | {"key": key}


@router.get(
    "/api/v1/admin/api-keys",
    summary="API keys, newest first, of one owner or of all (admin scope); never the keys",
    responses=errors(403),
    dependencies=[Depends(only_params("owner_id", "page_size"))],
)
async def list_api_keys(
    request: Request,
    _who: Caller = Depends(admin_caller),
    owner_id: Annotated[str | None, Query(max_length=128)] = None,
    page_size: Annotated[int, Query(ge=0, le=MAX_KEYS_LISTED)] = 0,
) -> dict[str, Any]:
    owner = None if owner_id is None else _owner(owner_id)
    store: GatewayStore = request.app.state.store
    records = await store.keys(owner, page_size or 100)
    return {"apiKeys": [_key_json(k) for k in records]}


@router.delete(
    "/api/v1/admin/api-keys/{key_id}",
    summary="Revoke an API key (admin scope); harmless when repeated",
    responses=errors(403, 404),
    dependencies=[Depends(only_params())],
)
async def revoke_api_key(
    request: Request, key_id: KeyPath, _who: Caller = Depends(admin_caller)
) -> dict[str, Any]:
    store: GatewayStore = request.app.state.store
    await store.revoke_key(key_id, int(time.time() * 1000))
    record = await store.key(key_id)
    if record is None:
        raise ApiError(404, "NOT_FOUND", "no such API key")
    return _key_json(record)
