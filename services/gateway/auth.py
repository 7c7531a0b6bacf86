"""Bearer tokens: HS256 JWTs signed with settings.jwt_secret; `sub` is the owner id.

A token must carry `sub` and `exp`. The admin endpoints also need a `scope` claim that
contains "admin" (a space-separated string, OAuth style, or a list of strings).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import jwt
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.gateway.errors import ApiError, unauthenticated
from shared.identity import ADMIN_SCOPE
from shared.ids import is_owner_id
from shared.settings import Settings

ALGORITHM = "HS256"
DEFAULT_TTL_SECONDS = 24 * 3600

_bearer = HTTPBearer(auto_error=False, description="An HS256 JWT; `sub` is the owner id.")


@dataclass(frozen=True)
class Caller:
    owner: str
    admin: bool


def issue_token(
    settings: Settings, sub: str, *, admin: bool = False, ttl_seconds: int = DEFAULT_TTL_SECONDS
) -> str:
    """A bearer token for `sub` (development and tests; production tokens come from the IdP)."""
    if not is_owner_id(sub):
        raise ValueError(f"{sub!r} is not a valid owner id")
    now = int(time.time())
    claims: dict[str, object] = {"sub": sub, "iat": now, "exp": now + ttl_seconds}
    if admin:
        claims["scope"] = ADMIN_SCOPE
    return jwt.encode(claims, settings.jwt_secret, algorithm=ALGORITHM)


def _has_admin_scope(scope: object) -> bool:
    if isinstance(scope, str):
        return ADMIN_SCOPE in scope.split()
    if isinstance(scope, list):
        return ADMIN_SCOPE in scope
    return False


def verify_token(settings: Settings, token: str) -> Caller:
    try:
        claims = jwt.decode(
            token,
            settings.jwt_secret,
            algorithms=[ALGORITHM],
            options={"require": ["sub", "exp"]},
        )
    except jwt.ExpiredSignatureError:
        raise unauthenticated("the bearer token has expired") from None
    except jwt.InvalidTokenError:
        raise unauthenticated("the bearer token is not valid") from None
    sub = claims.get("sub")
    if not isinstance(sub, str) or not is_owner_id(sub):
        raise unauthenticated("the bearer token's subject is not a valid owner id")
    return Caller(owner=sub, admin=_has_admin_scope(claims.get("scope")))


async def caller(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> Caller:
    """The authenticated caller of a request (FastAPI dependency)."""
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise unauthenticated("missing bearer token (Authorization: Bearer <token>)")
    settings: Settings = request.app.state.settings
    return verify_token(settings, credentials.credentials)


async def admin_caller(who: Caller = Depends(caller)) -> Caller:
    if not who.admin:
        raise ApiError(403, "PERMISSION_DENIED", "this endpoint needs the admin scope")
    return who
