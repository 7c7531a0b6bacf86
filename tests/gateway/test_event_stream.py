"""sse.EventStream: the last chunk of a run's stream ends the HTTP body in the same send."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from services.gateway import sse


async def _sent(chunks: list[bytes]) -> list[dict[str, Any]]:
    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    messages: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        messages.append(message)

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {"type": "http", "asgi": {"spec_version": "2.4"}}
    await sse.EventStream(body(), media_type="text/event-stream")(scope, receive, send)
    return [m for m in messages if m["type"] == "http.response.body"]


async def test_the_last_chunk_ends_the_body_without_a_send_of_its_own() -> None:
    sent = await _sent([b"data: 1\n\n", sse.LastChunk(b"data: 2\n\n")])
    assert [(m["body"], m["more_body"]) for m in sent] == [
        (b"data: 1\n\n", True),
        (b"data: 2\n\n", False),
    ]


async def test_a_stream_that_ends_without_a_last_chunk_ends_with_an_empty_body() -> None:
    sent = await _sent([b"data: 1\n\n", sse.HEARTBEAT])
    assert [(m["body"], m["more_body"]) for m in sent] == [
        (b"data: 1\n\n", True),
        (sse.HEARTBEAT, True),
        (b"", False),
    ]
