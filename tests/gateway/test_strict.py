"""The gateway's strict JSON decoding (services/gateway/strict.py), without a server: every
refusal is an ApiError 400 naming the field, never an exception of the decoder."""

from __future__ import annotations

import json

import pytest

from services.gateway.errors import ApiError
from services.gateway.strict import MAX_JSON_DEPTH, json_value, rfc3339_text


def _refused(body: bytes) -> tuple[str, str]:
    with pytest.raises(ApiError) as info:
        json_value(body)
    assert info.value.status == 400
    [(field, description)] = info.value.violations
    return field, description


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 5_000, 200_000])
def test_nesting_past_the_limit_is_refused_at_any_depth(depth: int) -> None:
    field, description = _refused(b"[" * depth + b"]" * depth)
    assert field.startswith(("body", "[0]"))
    assert str(MAX_JSON_DEPTH) in description


def test_nesting_at_the_limit_is_accepted() -> None:
    body = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert json_value(body.encode()) == json.loads(body)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"a": {"b": [1, "x\\u0000"]}}', "a.b[1]"),
        (b'{"a": "\\ud800"}', "a"),
        (b'{"a": {"\\udfff": 1}}', "a"),
        (b'{"n": 9223372036854775808}', "n"),
        (b'{"n": -9223372036854775809}', "n"),
        (b'{"n": ' + b"1" * 5000 + b"}", "n"),
        (b'{"n": NaN}', "n"),
        (b'{"n": [Infinity]}', "n[0]"),
        (b'{"n": 1e400}', "n"),
        (b'{"a": 1', "body"),
        (b'{"a": "\xff"}', "body"),
    ],
)
def test_what_no_service_can_carry_is_refused_naming_the_field(body: bytes, field: str) -> None:
    assert _refused(body)[0] == field


def test_the_int64_range_and_paired_surrogates_are_accepted() -> None:
    body = b'{"lo": -9223372036854775808, "hi": 9223372036854775807, "s": "\\ud83d\\ude00"}'
    assert json_value(body) == {"lo": -(2**63), "hi": 2**63 - 1, "s": "\U0001f600"}


@pytest.mark.parametrize(
    "value", ["2025-01-02T10:00:00+08:00", "2025-01-02t10:00:00.5z", "2025-01-02 10:00:00Z"]
)
def test_rfc3339_date_times_are_passed_on(value: str) -> None:
    assert rfc3339_text(value) == value


@pytest.mark.parametrize("value", [1, 1.5, True, "1", "1700000000.5", "2025-01-02", "10:00"])
def test_numbers_and_partial_times_are_not_instants(value: object) -> None:
    with pytest.raises(ValueError, match="RFC 3339"):
        rfc3339_text(value)
