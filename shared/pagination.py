"""Opaque page tokens (AIP-158): a keyset position bound to the request that made it."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from shared.errors import InvalidArgument

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000


def page_size(value: int, *, default: int = DEFAULT_PAGE_SIZE, maximum: int = MAX_PAGE_SIZE) -> int:
    if not 0 <= value <= maximum:
        raise InvalidArgument("page_size", f"must be between 0 and {maximum}")
    return value or default


def _fingerprint(scope: Any) -> str:
    return hashlib.sha256(json.dumps(scope, sort_keys=True, default=str).encode()).hexdigest()[:16]


def encode_token(position: Any, scope: Any) -> str:
    """A token for the page after `position`, valid only for requests with the same `scope`."""
    raw = json.dumps({"p": position, "s": _fingerprint(scope)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_token(token: str, scope: Any) -> Any:
    """The position in `token`, or None for an empty token; INVALID_ARGUMENT if it is bad."""
    if not token:
        return None
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        position, fingerprint = data["p"], data["s"]
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise InvalidArgument("page_token", "is not a page token this service issued") from None
    if fingerprint != _fingerprint(scope):
        raise InvalidArgument("page_token", "belongs to a different request (filters changed)")
    return position
