"""google.protobuf.Timestamp in, an aware UTC datetime out: the one check every service
applies to a Timestamp a caller sent (seconds 2^62 or nanos 2e9 are a bad request, not a
crash)."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf import timestamp_pb2

from shared.errors import InvalidArgument

TIMESTAMP_RULE = "must be a valid timestamp (0001-01-01 to 9999-12-31 UTC, nanos 0 to 999999999)"


def from_pb(ts: timestamp_pb2.Timestamp, field: str) -> datetime:
    try:
        return ts.ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise InvalidArgument(field, TIMESTAMP_RULE) from None
