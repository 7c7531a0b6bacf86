"""What the HTTP edge refuses before a route reads its input: JSON bodies are decoded
strictly, query and path parameters are checked, instants stay in the range every service
can carry. Each refusal is a 400 naming the field (`state.a.b`, `messages[0].content`,
`query`, `job_id`) or `body`, never a 500 further in.

docs/protocols/agent/api-endpoints.md ("Strict input") is the prose version of this module.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote_to_bytes

from google.protobuf import timestamp_pb2
from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError
from starlette.requests import Request

from services.gateway.errors import invalid
from shared.text import TEXT_RULE, is_storable

# Objects and arrays nest at most this deep, the body itself being level 1. `state` and
# `forwardedProps` travel as google.protobuf.Value, three messages per JSON level, and a
# protobuf decoder stops at 100 nested messages: 32 levels keep every body decodable by
# the services (and far from Python's recursion limit).
MAX_JSON_DEPTH = 32
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_INT_RULE = f"must be an integer from {INT64_MIN} to {INT64_MAX}"


class _Refused:
    """A number the decoder refuses; the walk over the decoded value names its field."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def _int(text: str) -> int | _Refused:
    # The length first: int() of thousands of digits is slow (and refused by Python).
    if len(text.lstrip("-")) > 19:
        return _Refused(_INT_RULE)
    value = int(text)
    return value if INT64_MIN <= value <= INT64_MAX else _Refused(_INT_RULE)


def _float(text: str) -> float | _Refused:
    value = float(text)
    return value if math.isfinite(value) else _Refused("must be a finite number")


def _constant(name: str) -> _Refused:
    return _Refused(f"must be a number ({name} is not JSON)")


def field_path(loc: Sequence[int | str]) -> str:
    """("messages", 0, "content") -> "messages[0].content"."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def json_value(body: bytes) -> Any:
    """The body decoded as strict JSON (RFC 8259 in UTF-8): nesting bounded, integers in the
    int64 range, numbers finite, no NUL or lone surrogate in any string or key."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid("body", f"is not UTF-8 (invalid byte at offset {exc.start})") from None
    try:
        data = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        # The decoder recurses once per level; this deep, the walk below would refuse it too.
        raise invalid("body", f"must not nest deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise invalid("body", f"is not valid JSON ({exc})") from None
    _check(data)
    return data


def json_object(body: bytes, what: str, *, allow_empty: bool = False) -> dict[str, Any]:
    """The body as a strict JSON object; 400 naming `body` when it is not one."""
    if allow_empty and not body.strip():
        return {}
    data = json_value(body)
    if not isinstance(data, dict):
        raise invalid("body", f"must be a JSON object ({what})")
    return data


def _check(data: Any) -> None:
    """Walk the decoded value without recursion; 400 naming the first bad field."""
    stack: list[tuple[Any, tuple[int | str, ...]]] = [(data, ())]
    while stack:
        value, loc = stack.pop()
        if isinstance(value, str):
            if not is_storable(value):
                raise invalid(field_path(loc) or "body", TEXT_RULE)
        elif isinstance(value, _Refused):
            raise invalid(field_path(loc) or "body", value.why)
        elif isinstance(value, dict | list):
            if len(loc) + 1 > MAX_JSON_DEPTH:
                raise invalid(
                    field_path(loc) or "body", f"must not nest deeper than {MAX_JSON_DEPTH} levels"
                )
            if isinstance(value, list):
                stack.extend((item, (*loc, i)) for i, item in enumerate(value))
                continue
            for key, item in value.items():
                if not is_storable(key):
                    # The key itself is not echoed: it could not be written in the answer.
                    raise invalid(field_path(loc) or "body", f"has a key that {TEXT_RULE}")
                stack.append((item, (*loc, key)))


# ---- query and path parameters ------------------------------------------------------------


def _text(name: str, raw: str) -> str:
    try:
        value = unquote_to_bytes(raw.replace("+", " ")).decode("utf-8")
    except UnicodeDecodeError:
        raise invalid(name, "is not UTF-8 (a percent-encoded byte sequence is invalid)") from None
    if "\x00" in value:
        raise invalid(name, "must not contain NUL characters")
    return value


def check_params(request: Request) -> None:
    """Query and path parameters are UTF-8 without NUL; 400 naming the parameter otherwise.
    (The HTTP server decodes invalid UTF-8 as U+FFFD, so the raw bytes are checked.)"""
    query = request.scope.get("query_string", b"").decode("latin-1")
    for pair in query.split("&"):
        if not pair:
            continue
        raw_key, _, raw_value = pair.partition("=")
        key = _text("query", raw_key)
        _text(key, raw_value)
    for name, value in request.path_params.items():
        if isinstance(value, str) and "\x00" in value:
            raise invalid(name, "must not contain NUL characters")
    raw_path = request.scope.get("raw_path")
    if raw_path is not None:
        try:
            unquote_to_bytes(raw_path.decode("latin-1")).decode("utf-8")
        except UnicodeDecodeError:
            names = [n for n, v in request.path_params.items() if "\ufffd" in str(v)]
            raise invalid(
                names[0] if names else "path",
                "is not UTF-8 (a percent-encoded byte sequence is invalid)",
            ) from None


# ---- instants -------------------------------------------------------------------------------

_MIN_INSTANT = datetime(1, 1, 1, tzinfo=UTC)
_MAX_INSTANT = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
INSTANT_RULE = "must be an instant from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z"


# A date and a time of day (RFC 3339 section 5.6; its note allows a space for the T).
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")
RFC3339_RULE = "must be an RFC 3339 date-time string (for example 2025-01-02T10:00:00+08:00)"


def rfc3339_text(value: object) -> object:
    """`value` when it is date-time text; pydantic's datetime would also take a number (or
    digits) as seconds since 1970, a date alone as its midnight."""
    if not isinstance(value, str) or _DATE_TIME.match(value) is None:
        # A custom error's message is the description as is (no "Value error, " prefix).
        raise PydanticCustomError("rfc3339", RFC3339_RULE)
    return value


# Before a datetime field or parameter: only RFC 3339 text is parsed as an instant.
RFC3339 = BeforeValidator(rfc3339_text)


def instant(field: str, value: datetime) -> timestamp_pb2.Timestamp:
    """An aware datetime as a Timestamp; 400 naming `field` when its UTC instant is outside
    the range of google.protobuf.Timestamp (years 1 to 9999)."""
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        raise invalid(field, INSTANT_RULE) from None
    if not _MIN_INSTANT <= utc <= _MAX_INSTANT:
        raise invalid(field, INSTANT_RULE)
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(utc)
    return out
