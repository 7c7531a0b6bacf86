"""Errors stay small: a status always fits in gRPC's trailers (8 KiB of metadata by default),
whatever input it refuses."""

from __future__ import annotations

import base64
from urllib.parse import quote

from shared.errors import (
    MAX_DESCRIPTION_BYTES,
    MAX_VIOLATIONS,
    DomainError,
    InvalidArgument,
    clip,
)

GRPC_METADATA_LIMIT = 8192


def _trailer_bytes(err: DomainError) -> int:
    """What the status costs in trailers: grpc-message (percent-encoded) and
    grpc-status-details-bin (base64)."""
    status = err.to_status()
    return len(quote(status.message, safe=" ")) + len(base64.b64encode(status.SerializeToString()))


def test_a_huge_error_fits_in_grpc_trailers() -> None:
    err = DomainError(
        "é" * 100_000,
        violations=[(f"f{i}" * 1000, "описание" * 10_000) for i in range(10_000)],
        metadata={f"k{i}" * 100: "v" * 10_000 for i in range(100)},
    )
    assert _trailer_bytes(err) < GRPC_METADATA_LIMIT * 0.85
    assert len(err.violations) == MAX_VIOLATIONS


def test_a_long_description_is_cut_with_an_ellipsis_on_a_character_boundary() -> None:
    err = InvalidArgument("config.tools", "unknown tools: " + "工具" * 1000)
    field, description = err.violations[0]
    assert field == "config.tools"
    assert description.endswith("\u2026")
    assert len(description.encode()) <= MAX_DESCRIPTION_BYTES
    description.encode("utf-8")  # whole characters only


def test_short_text_is_kept_and_a_lone_surrogate_becomes_a_question_mark() -> None:
    assert clip("title: is required", 100) == "title: is required"
    assert clip("a\ud800b", 100) == "a?b"
