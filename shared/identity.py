"""Who is calling: the owner id travels from the gateway to every service in gRPC metadata.

Services trust this metadata because only the gateway (which verified the bearer token) and
other services inside the deployment can reach them.
"""

from __future__ import annotations

import uuid
from typing import Any

import grpc

from shared.errors import PermissionDenied, Unauthenticated
from shared.ids import is_owner_id

OWNER_KEY = "x-agentmesh-owner"
SCOPE_KEY = "x-agentmesh-scope"
REQUEST_ID_KEY = "x-request-id"
ADMIN_SCOPE = "admin"


def _metadata(context: grpc.aio.ServicerContext[Any, Any]) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


def owner_id(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """The caller's owner id; UNAUTHENTICATED when absent or malformed."""
    value = _metadata(context).get(OWNER_KEY, "")
    if not is_owner_id(value):
        raise Unauthenticated("the call carries no valid owner identity")
    return value


def require_admin(context: grpc.aio.ServicerContext[Any, Any]) -> None:
    if _metadata(context).get(SCOPE_KEY) != ADMIN_SCOPE:
        raise PermissionDenied("this call needs the admin scope")


def request_id(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    return _metadata(context).get(REQUEST_ID_KEY) or uuid.uuid4().hex


def call_metadata(
    owner: str, *, request_id: str | None = None, admin: bool = False
) -> tuple[tuple[str, str], ...]:
    """Metadata for an outgoing call on behalf of `owner`."""
    items = [(OWNER_KEY, owner)]
    if request_id:
        items.append((REQUEST_ID_KEY, request_id))
    if admin:
        items.append((SCOPE_KEY, ADMIN_SCOPE))
    return tuple(items)
