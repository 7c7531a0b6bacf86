"""A local fake OpenAI-compatible server (raw asyncio HTTP/1.1) that replays recorded
streaming responses. Each request takes the next scripted Reply; the requests are kept.
By default every answer closes its connection; with keep_alive the server answers in
chunked encoding and keeps the connection for the next request, as real servers do, and
counts the connections it was opened."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RECORDINGS = Path(__file__).parent / "recordings"


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    # Write the body in pieces of this many bytes (splitting events and JSON anywhere).
    piece: int = 0
    # Seconds to wait before answering at all (a silent endpoint).
    stall: float = 0.0
    # Cut the connection after this many body bytes (a broken stream).
    cut_after: int | None = None
    # Seconds the stream stays open after its body (kept alive: before its last chunk).
    linger: float = 0.0
    # Kept alive: the connection takes the next request and closes without answering it
    # (llama-cpp-python's server after a stream it failed: 200, an empty body, then gone).
    drop_next: bool = False


def recording(name: str, piece: int = 7) -> Reply:
    return Reply(
        body=(RECORDINGS / name).read_bytes(),
        headers={"Content-Type": "text/event-stream"},
        piece=piece,
    )


def error(
    status: int,
    message: str = "boom",
    *,
    code: str | None = None,
    type: str = "server_error",
    **headers: str,
) -> Reply:
    """An OpenAI-style error answer (`code` as OpenAI sets it, e.g. context_length_exceeded)."""
    body = json.dumps({"error": {"message": message, "type": type, "code": code}}).encode()
    return Reply(status=status, body=body, headers={"Content-Type": "application/json", **headers})


def events(*payloads: object, done: bool = True) -> Reply:
    """A 200 stream of these data payloads (a str goes out as it is, anything else as JSON)."""
    lines = [p if isinstance(p, str) else json.dumps(p) for p in payloads]
    if done:
        lines.append("[DONE]")
    body = "".join(f"data: {line}\n\n" for line in lines).encode()
    return Reply(body=body, headers={"Content-Type": "text/event-stream"})


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class FakeOpenAI:
    def __init__(
        self,
        replies: list[Reply],
        keep_alive: bool = False,
        judge: Callable[[Request], Reply | None] | None = None,
    ) -> None:
        self.replies = list(replies)
        # Answers a request it refuses (a provider's rule broken) instead of the next reply.
        self.judge = judge
        self.keep_alive = keep_alive
        self.connections = 0
        self.requests: list[Request] = []
        self.port = 0
        self.tasks: set[asyncio.Task[None]] = set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.connections += 1
        try:
            while await self._answer(reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.tasks.discard(task)
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; whether the connection stays open for another."""
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        _, path, _ = lines[0].split(" ", 2)
        headers = {
            k.strip().lower(): v.strip()
            for k, v in (h.split(":", 1) for h in lines[1:] if ":" in h)
        }
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        request = Request(path, headers, json.loads(body or b"{}"))
        self.requests.append(request)
        refusal = self.judge(request) if self.judge is not None else None
        if refusal is not None:
            reply = refusal
        else:
            reply = self.replies.pop(0) if self.replies else error(500, "no reply scripted")
        if reply.stall:
            await asyncio.sleep(reply.stall)
        reason = {200: "OK", 429: "Too Many Requests", 500: "Internal Server Error"}.get(
            reply.status, "Error"
        )
        # A stream ends when the connection closes (or, kept alive, with its last chunk);
        # a declared length that the cut does not reach makes the client see a broken body.
        chunked = self.keep_alive and reply.status == 200 and reply.cut_after is None
        head_out = [f"HTTP/1.1 {reply.status} {reason}"]
        head_out.append("Transfer-Encoding: chunked" if chunked else "Connection: close")
        head_out += [f"{k}: {v}" for k, v in reply.headers.items()]
        if reply.status != 200 or reply.cut_after is not None:
            head_out.append(f"Content-Length: {len(reply.body)}")
        payload = reply.body if reply.cut_after is None else reply.body[: reply.cut_after]
        writer.write(("\r\n".join(head_out) + "\r\n\r\n").encode())
        step = reply.piece or len(payload) or 1
        for i in range(0, len(payload), step):
            piece = payload[i : i + step]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            await writer.drain()
            await asyncio.sleep(0)
        await asyncio.sleep(reply.linger)
        if chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            if reply.drop_next:
                await reader.readuntil(b"\r\n\r\n")
                return False
        return chunked


@asynccontextmanager
async def fake_openai(
    replies: list[Reply],
    *,
    keep_alive: bool = False,
    judge: Callable[[Request], Reply | None] | None = None,
) -> AsyncIterator[FakeOpenAI]:
    fake = FakeOpenAI(replies, keep_alive, judge)
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    fake.port = server.sockets[0].getsockname()[1]
    try:
        yield fake
    finally:
        server.close()
        for task in list(fake.tasks):
            task.cancel()
        await asyncio.gather(*fake.tasks, return_exceptions=True)
        await server.wait_closed()
