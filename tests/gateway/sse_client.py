"""Reading the gateway's SSE stream the way a strict client does."""

from __future__ import annotations

import json
from typing import Any

import httpx


def parse_frames(raw: bytes) -> list[dict[str, Any]]:
    """Every frame must be exactly `data: <json>\\n\\n` (LF only, nothing else)."""
    assert b"\r" not in raw, "CR in the stream"
    assert raw.endswith(b"\n\n"), "the stream does not end with a complete frame"
    frames = raw[:-2].split(b"\n\n")
    events = []
    for f in frames:
        assert f.startswith(b"data: "), f"frame without 'data: ' prefix: {f!r}"
        assert b"\n" not in f, f"frame spans several lines: {f!r}"
        events.append(json.loads(f[len(b"data: "):]))
    return events


async def post_run(
    client: httpx.AsyncClient, body: Any, headers: dict[str, str],
) -> tuple[httpx.Response, bytes]:
    async with client.stream("POST", "/api/v1/agent/runs", json=body, headers=headers) as resp:
        raw = await resp.aread()
    return resp, raw
