"""Opaque page tokens (AIP-158): a keyset position bound to the request that made it.

A token is `<payload>.<mac>`: the payload (base64url JSON) holds the position and a
fingerprint of the request's scope (the RPC, the owner, the filters); the mac is its
HMAC-SHA256 under AGENTMESH_PAGE_TOKEN_SECRET, so a client can hand a token back but not
change the position in it or make one. Positions still go through `position_*` below
before they reach a query: a token is trusted to be ours, not to be well formed forever
(an older build's layout, or a secret shared too widely).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from shared.errors import InvalidArgument

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
# Positions that reach SQL as BIGINT.
MAX_POSITION = 2**63 - 1
_DOMAIN = b"agentmesh page token v1\x00"


def page_size(value: int, *, default: int = DEFAULT_PAGE_SIZE, maximum: int = MAX_PAGE_SIZE) -> int:
    if not 0 <= value <= maximum:
        raise InvalidArgument("page_size", f"must be between 0 and {maximum}")
    return value or default


def bad_token() -> InvalidArgument:
    return InvalidArgument("page_token", "is not a page token this service issued")


def _fingerprint(scope: Any) -> str:
    return hashlib.sha256(json.dumps(scope, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode((text + "=" * (-len(text) % 4)).encode())


class PageTokens:
    """Signs and checks the page tokens of one service (every replica shares the secret)."""

    def __init__(self, secret: str) -> None:
        if not secret:
            raise ValueError("the page token secret must not be empty")
        self._key = secret.encode()

    def _mac(self, payload: str) -> str:
        return _b64(hmac.new(self._key, _DOMAIN + payload.encode(), hashlib.sha256).digest())

    def encode(self, position: Any, scope: Any) -> str:
        """A token for the page after `position`, valid only for requests with the same `scope`."""
        raw = json.dumps({"p": position, "s": _fingerprint(scope)}, separators=(",", ":"))
        payload = _b64(raw.encode())
        return f"{payload}.{self._mac(payload)}"

    def decode(self, token: str, scope: Any) -> Any:
        """The position in `token`, or None for an empty token; INVALID_ARGUMENT naming
        page_token for a token this service did not sign, or one of another request."""
        if not token:
            return None
        payload, dot, mac = token.partition(".")
        given = mac.encode("ascii", "replace")
        if not dot or not hmac.compare_digest(given, self._mac(payload).encode()):
            raise bad_token()
        try:
            data = json.loads(_unb64(payload))
            position, fingerprint = data["p"], data["s"]
        except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise bad_token() from None
        if fingerprint != _fingerprint(scope):
            raise InvalidArgument("page_token", "belongs to a different request (filters changed)")
        return position


# ---- positions: what a decoded token may hold ------------------------------------------


def position_int(value: Any, *, maximum: int = MAX_POSITION) -> int:
    """A whole number from 0 to `maximum` (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise bad_token()
    return value


def position_str(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise bad_token()
    return value


def position_time(value: Any) -> datetime:
    """An aware datetime written by `datetime.isoformat`."""
    if not isinstance(value, str):
        raise bad_token()
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise bad_token() from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise bad_token()
    return when


def position_list(value: Any, length: int) -> Sequence[Any]:
    if not isinstance(value, list) or len(value) != length:
        raise bad_token()
    return value


def position_dict(value: Any, keys: Sequence[str]) -> dict[str, Any]:
    if not isinstance(value, dict) or any(k not in value for k in keys):
        raise bad_token()
    return value
