"""Real tool servers for the tool tests, started by the tests: the project's notes MCP
server (stdio and streamable HTTP), the PyPI reference time server (mcp-server-time, pinned
in the dev extra), and a plain HTTP tool server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from services.launcher import free_port

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def notes_stdio(**extra: Any) -> dict[str, Any]:
    return {
        "name": "notes",
        "transport": "stdio",
        "command": PYTHON,
        "args": ["-m", "tests.tools.notes_mcp_server", "stdio"],
        "cwd": str(ROOT),
        "owner": {"via": "argument", "name": "owner_id"},
        **extra,
    }


def time_server() -> dict[str, Any]:
    exe = Path(PYTHON).with_name("mcp-server-time")
    return {
        "name": "time",
        "transport": "stdio",
        "command": str(exe),
        "args": ["--local-timezone", "UTC"],
    }


@pytest.fixture
def notes_http_url() -> Iterator[str]:
    """The notes MCP server over streamable HTTP, in a process of its own."""
    port = free_port()
    proc = subprocess.Popen(
        [PYTHON, "-m", "tests.tools.notes_mcp_server", "http", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("the notes MCP server did not start")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


class HttpToolServer:
    """A local HTTP tool: answers what it was sent (body and owner header)."""

    def __init__(self) -> None:
        seen: list[dict[str, Any]] = []
        self.seen = seen

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner = self.headers.get("X-Agentmesh-Owner", "")
                seen.append({"path": self.path, "body": body, "owner": owner})
                if self.path == "/fail":
                    status, out = 503, b"down for maintenance"
                elif self.path == "/slow":
                    time.sleep(float(body.get("seconds", 1)))
                    status, out = 200, b"late"
                else:
                    status, out = 200, json.dumps({"owner": owner, "order": body}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except BrokenPipeError:
                    pass  # the tool's caller gave up (its timeout)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def http_tool_server() -> Iterator[HttpToolServer]:
    server = HttpToolServer()
    try:
        yield server
    finally:
        server.close()
