"""A real local HTTP receiver of webhooks that verifies every request with the
standardwebhooks library (tests/e2e/test_webhooks.py, tests/gateway/test_webhooks.py)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1:`port`; a request whose signature does not verify
    against its path's secret is answered 401 and not recorded as received."""

    port: int
    secrets: dict[str, str] = field(default_factory=dict)
    # Statuses to answer next, per path (then 200).
    script: dict[str, list[int]] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    # Seconds to wait before answering (a slow receiver).
    delay: float = 0.0
    refused: list[str] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server names it so
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                secret = outer.secrets.get(self.path)
                try:
                    if secret is None:
                        raise ValueError("no secret for this path")
                    body = Webhook(secret).verify(raw, headers)
                except Exception as err:  # any failure is a refusal
                    outer.refused.append(f"{self.path}: {err}")
                    self.send_response(401)
                    self.end_headers()
                    return
                outer.received.append(Received(self.path, headers, body))
                time.sleep(outer.delay)
                queue = outer.script.get(self.path) or []
                status = queue.pop(0) if queue else 200
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]
