"""The one rule for identifiers and time zones, used by the gateway and every service.

Ids are chosen by callers (AG-UI clients pick thread, run and message ids; identity providers
pick owner ids) and travel in URL paths, gRPC metadata, log lines and SQL text columns, so
each kind has one bounded shape, checked with `fullmatch` (a `$` would let a trailing newline
through).
"""

from __future__ import annotations

import functools
import re
import zoneinfo

from shared.errors import InvalidArgument

MAX_ID_CHARS = 128

# Thread, run, message, job, memory and tool-call ids: printable ASCII without spaces, and
# no "/" or "\" (they are path segments of the HTTP API).
_ID_RE = re.compile(r"[\x21-\x2e\x30-\x5b\x5d-\x7e]{1,128}")
ID_RULE = "must be 1 to 128 printable ASCII characters, without spaces, '/' or '\\'"

# Owner ids (a token's `sub`): what identity providers use, nothing that needs escaping.
_OWNER_RE = re.compile(r"[A-Za-z0-9._:@|-]{1,128}")
OWNER_RULE = "must be 1 to 128 characters of A-Z a-z 0-9 . _ : @ | -"

# Request ids a caller may choose (X-Request-ID); anything else gets a fresh one.
_REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")

MAX_TIME_ZONE_CHARS = 64
TIME_ZONE_RULE = "must be an IANA time zone name (for example Asia/Shanghai)"


def is_identifier(value: str) -> bool:
    return _ID_RE.fullmatch(value) is not None


def id_problem(value: str) -> str | None:
    """Why `value` is not an id, in words for an error's description; None when it is one."""
    if not value:
        return "must not be empty"
    if len(value) > MAX_ID_CHARS:
        return f"must be at most {MAX_ID_CHARS} characters"
    return None if is_identifier(value) else ID_RULE


def check_identifier(value: str, field: str) -> str:
    """`value` when it is an id; InvalidArgument naming `field` otherwise."""
    problem = id_problem(value)
    if problem is not None:
        raise InvalidArgument(field, problem)
    return value


def optional_identifier(value: str, field: str) -> str:
    """An id, or "" for an unset field."""
    return check_identifier(value, field) if value else ""


def is_owner_id(value: str) -> bool:
    return _OWNER_RE.fullmatch(value) is not None


def is_request_id(value: str) -> bool:
    return _REQUEST_ID_RE.fullmatch(value) is not None


@functools.cache
def _zone_names() -> frozenset[str]:
    # The zones tzdata names: a folder of the database ("Europe") or a path is not a zone.
    return frozenset(zoneinfo.available_timezones())


def is_time_zone(name: str) -> bool:
    return 0 < len(name) <= MAX_TIME_ZONE_CHARS and name in _zone_names()


def time_zone(name: str) -> zoneinfo.ZoneInfo | None:
    """The zone called `name`, or None when it is not a zone name."""
    return zoneinfo.ZoneInfo(name) if is_time_zone(name) else None


def check_time_zone(name: str, field: str) -> zoneinfo.ZoneInfo:
    """The zone called `name`; InvalidArgument naming `field` when it is not a zone name."""
    zone = time_zone(name)
    if zone is None:
        # The name is not echoed whole: it may be long, or hold what a log line should not.
        raise InvalidArgument(field, f"{name[:MAX_TIME_ZONE_CHARS]!r} is not an IANA time zone")
    return zone
