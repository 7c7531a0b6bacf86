"""uvicorn's HTTP/1.1 protocols, answering the requests their parser refuses with the
gateway's JSON error body.

A request the HTTP parser cannot read (a control character in a header, a malformed request
line) never reaches the application, so no middleware can answer it: uvicorn writes a plain
text 400 itself, from `send_400_response`. These subclasses write the error body every
other answer has (services.gateway.errors), with a fresh request id, and still close the
connection (after a parse error the rest of the stream cannot be trusted).
"""

from __future__ import annotations

import importlib.util
import json
import uuid

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from services.gateway.errors import invalid
from shared.logs import request_id_var

_FIELD = "request"
_DESCRIPTION = "is not a valid HTTP/1.1 request (for example a header with a control character)"


def _error() -> tuple[bytes, bytes]:
    """The JSON body of the refusal and its request id."""
    rid = uuid.uuid4().hex
    token = request_id_var.set(rid)
    try:
        body = json.dumps(invalid(_FIELD, _DESCRIPTION).body(), separators=(",", ":"))
    finally:
        request_id_var.reset(token)
    return body.encode(), rid.encode()


class JsonErrorHttpToolsProtocol(HttpToolsProtocol):
    def send_400_response(self, msg: str) -> None:
        body, rid = _error()
        content = [b"HTTP/1.1 400 Bad Request\r\n"]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"x-request-id: " + rid + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()


class JsonErrorH11Protocol(H11Protocol):
    def send_400_response(self, msg: str) -> None:
        body, rid = _error()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode("ascii")),
            (b"x-request-id", rid),
            (b"connection", b"close"),
        ]
        self.transport.write(self.conn.send(h11.Response(status_code=400, headers=headers)))
        self.transport.write(self.conn.send(h11.Data(data=body)))
        self.transport.write(self.conn.send(h11.EndOfMessage()))
        self.transport.close()


def http_protocol() -> type[HttpToolsProtocol] | type[H11Protocol]:
    """What uvicorn's "auto" would choose (httptools when installed), with the JSON 400."""
    if importlib.util.find_spec("httptools") is None:  # pragma: no cover - a pinned dependency
        return JsonErrorH11Protocol
    return JsonErrorHttpToolsProtocol
