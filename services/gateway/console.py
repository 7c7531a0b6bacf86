"""The console: a browser app served by the gateway at `/`, its assets under `/console/`.

The files are the folder services/gateway/console/ as committed (no build step on a user's
machine; the AG-UI client bundle in vendor/ is built by `make console-vendor`). Only files
inside that folder with a known type are served: a path that leaves it (`..`, an absolute
path, a symlink out), a folder or an unknown type is `404`. Every answer carries a Content
Security Policy that allows nothing but this origin, and `Cache-Control: no-cache` with an
ETag: the names are not versioned, so a browser revalidates (a `304` when unchanged).
The console speaks only the public HTTP API, as any other app.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.staticfiles import NotModifiedResponse, StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

ASSETS = Path(__file__).resolve().parent / "console"
PREFIX = "/console"

MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}


# /docs and /redoc (fastapi-offline's pages): their scripts and styles come from the gateway,
# but ReDoc's bundle still shows a logo from cdn.redoc.ly. This policy keeps the pages to this
# origin (the image is refused and ReDoc hides it), so the docs work offline and leak nothing.
# The pages start their viewers with an inline script, and ReDoc runs a blob: worker.
DOCS_PATHS = frozenset({"/docs", "/redoc"})
DOCS_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class DocsPolicy:
    """Pure ASGI middleware: the Content Security Policy of the API docs pages."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") not in DOCS_PATHS:
            await self.app(scope, receive, send)
            return

        async def send_with_policy(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.lower() != b"content-security-policy"]  # fmt: skip
                headers.append((b"content-security-policy", DOCS_CSP.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_policy)


class ConsoleAssets(StaticFiles):
    """Starlette's static files (path containment, ETag, 304, HEAD), with the console's types
    and headers, and nothing served whose type is not one of MEDIA_TYPES."""

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        media_type = MEDIA_TYPES.get(Path(full_path).suffix)
        if media_type is None:
            raise HTTPException(status_code=404)
        response = FileResponse(
            full_path, status_code=status_code, stat_result=stat_result, media_type=media_type
        )
        response.headers.update(HEADERS)
        if self.is_not_modified(response.headers, Headers(scope=scope)):
            return NotModifiedResponse(response.headers)
        return response


def install(app: FastAPI) -> None:
    assets = ConsoleAssets(directory=ASSETS)

    async def index(request: Request) -> Response:
        return await assets.get_response("index.html", request.scope)

    app.add_route("/", index, methods=["GET", "HEAD"], include_in_schema=False)
    app.mount(PREFIX, assets, name="console")
    app.add_middleware(DocsPolicy)
