"""Who calls: a bearer JWT or an API key in `Authorization: Bearer <credential>`.

- HS256 JWTs signed with settings.jwt_secret (development, or an IdP that shares a secret);
  an empty secret turns HS256 off (an IdP's JWKS only).
- RS256 / ES256 JWTs signed by an identity provider whose keys are published at
  settings.jwks_url (services/gateway/jwks.py: fetched on first use, cached, fetched again
  when a token names a key id not seen yet, so a key rotation needs no restart; known keys
  keep verifying through an outage of the IdP, up to settings.jwks_max_stale_seconds).
- API keys (`amk_<id>_<secret>`) for server-to-server callers, created by an admin; only
  the sha256 of the secret is stored (services/gateway/store.py).

A JWT must carry `sub` (the owner id) and `exp`; `iss` and `aud` are checked when
settings.jwt_issuer / settings.jwt_audience are set. The admin endpoints also need a
`scope` claim that contains "admin" (a space-separated string, OAuth style, or a list of
strings), or an API key made with admin scope. Every refused credential is a 401 (a key
that cannot be told now, the IdP being unreachable, is a 503 with Retry-After): the
algorithm is taken from a fixed list per key source (no `none`; an HS256 token is only
ever checked with the shared secret, so a public key cannot serve as an HMAC secret).
An HS256 token that verified is remembered (bounded) until its expiry, at most 5 minutes.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

import jwt
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.gateway.errors import ApiError, unauthenticated
from services.gateway.jwks import IdpKeys, KeysUnavailable, UnknownKey
from services.gateway.store import ApiKey, GatewayStore, new_key_id
from shared.identity import ADMIN_SCOPE
from shared.ids import is_owner_id
from shared.settings import Settings

log = logging.getLogger("agentmesh.gateway")

ALGORITHM = "HS256"
# The algorithms of keys fetched from a JWKS URL.
JWKS_ALGORITHMS = ("RS256", "ES256")
DEFAULT_TTL_SECONDS = 24 * 3600
# Longer credentials are refused before any parsing (a JWT of an IdP is well under this).
MAX_CREDENTIAL_CHARS = 8192
API_KEY_PREFIX = "amk_"
# A key's last-used time is written at most this often.
TOUCH_EVERY_MS = 60_000

_bearer = HTTPBearer(
    auto_error=False, description="A JWT (HS256, or RS256/ES256 from the JWKS) or an API key."
)


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
    if settings.jwt_issuer:
        claims["iss"] = settings.jwt_issuer
    if settings.jwt_audience:
        claims["aud"] = settings.jwt_audience
    if admin:
        claims["scope"] = ADMIN_SCOPE
    return jwt.encode(claims, settings.jwt_secret, algorithm=ALGORITHM)


def _has_admin_scope(scope: object) -> bool:
    if isinstance(scope, str):
        return ADMIN_SCOPE in scope.split()
    if isinstance(scope, list):
        return ADMIN_SCOPE in scope
    return False


def jwks_client(settings: Settings) -> IdpKeys | None:
    if not settings.jwks_url:
        return None
    return IdpKeys(
        settings.jwks_url,
        cache_seconds=settings.jwks_cache_seconds,
        cooldown_seconds=settings.jwks_refresh_cooldown_seconds,
        max_stale_seconds=settings.jwks_max_stale_seconds,
        timeout=settings.rpc_timeout_seconds,
    )


def _jwks_unavailable(retry_after: int) -> ApiError:
    return ApiError(
        503,
        "UNAVAILABLE",
        "the identity provider's keys (JWKS) cannot be fetched now; try again shortly",
        headers={"Retry-After": str(retry_after)},
    )


async def _verification_key(
    settings: Settings, jwks: IdpKeys | None, token: str
) -> tuple[Any, str]:
    """The key and the one algorithm `token` is checked with."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError:
        raise unauthenticated("the bearer token is not valid") from None
    alg = header.get("alg")
    if alg == ALGORITHM and settings.jwt_secret:
        return settings.jwt_secret, ALGORITHM
    if jwks is None or alg not in JWKS_ALGORITHMS:
        raise unauthenticated("the bearer token is not valid (algorithm not accepted)")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid or len(kid) > 256:
        raise unauthenticated("the bearer token is not valid (no usable key id)")
    try:
        # A fetch is blocking I/O: off the event loop.
        key = await asyncio.to_thread(jwks.key, kid)
    except KeysUnavailable as exc:
        raise _jwks_unavailable(exc.retry_after) from None
    except UnknownKey:
        raise unauthenticated("the bearer token is not valid (unknown key id)") from None
    # The key's own algorithm (or type) must be the one the token says.
    key_alg = key.algorithm_name if key.algorithm_name in JWKS_ALGORITHMS else None
    expected = key_alg or {"RSA": "RS256", "EC": "ES256"}.get(key.key_type or "")
    if expected != alg:
        raise unauthenticated("the bearer token is not valid (algorithm does not match its key)")
    return key.key, alg


# Tokens signed with the shared secret that verified, with the caller each names and when
# it stops being valid: a client sends the same token on every request, and decoding and
# checking it again (PyJWT: about 100 us) was the gateway's largest piece of work per run
# after the HTTP stack. Only the shared-secret path: a JWKS key can be rotated out, and
# then its tokens must be refused at once. Keyed by everything the verdict depends on.
_VerifiedKey = tuple[str, str, str, str]
_VERIFIED: dict[_VerifiedKey, tuple[Caller, float]] = {}
_VERIFIED_MAX = 4096
# A remembered token is checked again after this long at most, whatever its expiry.
_VERIFIED_SECONDS = 300.0


def _remembered(key: _VerifiedKey) -> Caller | None:
    hit = _VERIFIED.get(key)
    if hit is None:
        return None
    who, until = hit
    if time.time() < until:
        return who
    _VERIFIED.pop(key, None)
    return None


def _remember(key: _VerifiedKey, who: Caller, expires: object) -> None:
    if not isinstance(expires, int | float):
        return
    if len(_VERIFIED) >= _VERIFIED_MAX:
        _VERIFIED.pop(next(iter(_VERIFIED)))  # the oldest
    # PyJWT refuses a token once exp <= now: it stays valid while now < exp. The bound is
    # taken before float(): an int exp may be past any float (10**400 is valid JSON).
    _VERIFIED[key] = (who, float(min(expires, time.time() + _VERIFIED_SECONDS)))


async def verify_token(settings: Settings, token: str, jwks: IdpKeys | None = None) -> Caller:
    if len(token) > MAX_CREDENTIAL_CHARS:
        raise unauthenticated("the bearer token is not valid (too long)")
    remembered = (token, settings.jwt_secret, settings.jwt_issuer, settings.jwt_audience)
    who = _remembered(remembered)
    if who is not None:
        return who
    key, alg = await _verification_key(settings, jwks, token)
    required = ["sub", "exp"]
    if settings.jwt_issuer:
        required.append("iss")
    if settings.jwt_audience:
        required.append("aud")
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[alg],
            issuer=settings.jwt_issuer or None,
            audience=settings.jwt_audience or None,
            options={"require": required},
        )
    except jwt.ExpiredSignatureError:
        raise unauthenticated("the bearer token has expired") from None
    except jwt.InvalidIssuerError:
        raise unauthenticated("the bearer token's issuer is not accepted") from None
    except jwt.InvalidAudienceError:
        raise unauthenticated("the bearer token's audience is not accepted") from None
    except (jwt.InvalidTokenError, ValueError, TypeError):
        raise unauthenticated("the bearer token is not valid") from None
    sub = claims.get("sub")
    if not isinstance(sub, str) or not is_owner_id(sub):
        raise unauthenticated("the bearer token's subject is not a valid owner id")
    who = Caller(owner=sub, admin=_has_admin_scope(claims.get("scope")))
    if alg == ALGORITHM and key == settings.jwt_secret:
        _remember(remembered, who, claims.get("exp"))
    return who


def _sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiKeys:
    """API keys of server-to-server callers: created by an admin for an owner (optionally
    with admin scope), shown once, stored hashed, revocable."""

    def __init__(self, store: GatewayStore) -> None:
        self.store = store

    async def create(self, owner: str, *, admin: bool, name: str) -> tuple[ApiKey, str]:
        """The new key's record and the key itself (the only time it is known)."""
        key_id = new_key_id()
        secret = secrets.token_urlsafe(32)
        record = ApiKey(
            id=key_id,
            owner_id=owner,
            admin=admin,
            name=name,
            secret_sha256=_sha256(secret),
            create_time_ms=int(time.time() * 1000),
            last_used_time_ms=None,
            revoke_time_ms=None,
        )
        await self.store.insert_key(record)
        return record, f"{API_KEY_PREFIX}{key_id}_{secret}"

    async def verify(self, credential: str) -> Caller:
        body = credential.removeprefix(API_KEY_PREFIX)
        key_id, _, secret = body.partition("_")
        if len(key_id) != 16 or not secret or len(credential) > 200:
            raise unauthenticated("the API key is not valid")
        record = await self.store.key(key_id)
        # Compared in constant time, and the same answer for an unknown and a wrong key.
        expected = record.secret_sha256 if record is not None else _sha256("")
        if not hmac.compare_digest(expected, _sha256(secret)) or record is None:
            raise unauthenticated("the API key is not valid")
        if record.revoke_time_ms is not None:
            raise unauthenticated("the API key was revoked")
        now_ms = int(time.time() * 1000)
        used = record.last_used_time_ms
        try:
            # Written when it is older than TOUCH_EVERY_MS (a read is all most calls cost).
            if used is None or used < now_ms - TOUCH_EVERY_MS:
                await self.store.touch_key(key_id, now_ms, TOUCH_EVERY_MS)
        except Exception:
            # The call is authenticated; a last-used time not written must not refuse it.
            log.warning("writing an API key's last-used time failed", exc_info=True)
        return Caller(owner=record.owner_id, admin=record.admin)


async def authenticate(request: Request, credential: str) -> Caller:
    state = request.app.state
    if credential.startswith(API_KEY_PREFIX):
        keys: ApiKeys = state.api_keys
        try:
            return await keys.verify(credential)
        except ApiError:
            raise
        except Exception:
            log.exception("API key lookup failed")
            raise ApiError(
                503,
                "UNAVAILABLE",
                "API keys cannot be checked now; try again shortly",
                headers={"Retry-After": "1"},
            ) from None
    return await verify_token(state.settings, credential, getattr(state, "jwks", None))


async def caller(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> Caller:
    """The authenticated caller of a request (FastAPI dependency)."""
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise unauthenticated("missing bearer token (Authorization: Bearer <token>)")
    return await authenticate(request, credentials.credentials)


async def admin_caller(who: Caller = Depends(caller)) -> Caller:
    if not who.admin:
        raise ApiError(403, "PERMISSION_DENIED", "this endpoint needs the admin scope")
    return who
