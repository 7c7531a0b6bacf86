"""google.protobuf.Timestamp in, an aware UTC datetime out: the one check every service
applies to a Timestamp a caller sent (seconds 2^62 or nanos 2e9 are a bad request, not a
crash). And the one text format of every time agentmesh answers (rfc3339)."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf import timestamp_pb2

from shared.errors import InvalidArgument

TIMESTAMP_RULE = "must be a valid timestamp (0001-01-01 to 9999-12-31 UTC, nanos 0 to 999999999)"


def rfc3339(when: datetime) -> str:
    """RFC 3339 in UTC with exactly six fractional digits ("2025-01-02T03:04:05.123456Z"):
    every time the gateway answers and every time in a webhook's body. Microseconds keep what
    the services store (isoformat alone gives 0 or 6 digits by value, Timestamp.ToJsonString
    0, 3, 6 or 9); one width makes the strings sort as the times do. A naive datetime is UTC
    (SQLite gives back what was stored in UTC without its zone)."""
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    return when.isoformat(timespec="microseconds") + "Z"


def from_pb(ts: timestamp_pb2.Timestamp, field: str) -> datetime:
    try:
        return ts.ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise InvalidArgument(field, TIMESTAMP_RULE) from None
