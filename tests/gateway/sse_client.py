"""Reading the gateway's SSE stream the way a strict client does."""

from __future__ import annotations

import json
from typing import Any

import httpx

# The SSE comment the gateway sends while a stream has nothing to say.
HEARTBEAT = b": keepalive"


def parse_sequenced(raw: bytes) -> list[tuple[int | None, dict[str, Any]]]:
    """(id, event) of every frame. A frame is exactly `[id: <n>\\n]data: <json>\\n\\n`:
    LF only, an optional id line of digits, one data line, nothing else; besides frames, the
    stream may carry the heartbeat comment `: keepalive\\n\\n` (not an event)."""
    assert b"\r" not in raw, "CR in the stream"
    assert raw.endswith(b"\n\n"), "the stream does not end with a complete frame"
    frames = raw[:-2].split(b"\n\n")
    out: list[tuple[int | None, dict[str, Any]]] = []
    for f in frames:
        if f == HEARTBEAT:
            continue
        seq = None
        if f.startswith(b"id: "):
            head, _, f = f.partition(b"\n")
            assert head[4:].isdigit(), f"id line is not a sequence number: {head!r}"
            seq = int(head[4:])
        assert f.startswith(b"data: "), f"frame without 'data: ' prefix: {f!r}"
        assert b"\n" not in f, f"frame spans several lines: {f!r}"
        out.append((seq, json.loads(f[len(b"data: ") :])))
    return out


def parse_frames(raw: bytes) -> list[dict[str, Any]]:
    """The events of the stream (see parse_sequenced for the exact frame format)."""
    return [event for _, event in parse_sequenced(raw)]


async def post_run(
    client: httpx.AsyncClient,
    body: Any,
    headers: dict[str, str],
) -> tuple[httpx.Response, bytes]:
    async with client.stream("POST", "/api/v1/agent/runs", json=body, headers=headers) as resp:
        raw = await resp.aread()
    return resp, raw
