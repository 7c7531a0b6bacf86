"""The gateway's FastAPI application: HTTP/JSON and SSE for apps, gRPC to the services.

`create_app(settings, clients)`: when `clients` is None the app opens its own channels at
start-up (lifespan) and closes them at shutdown; clients passed in belong to the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi_offline import FastAPIOffline
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.gateway import (
    console,
    lifecycle,
    openapi,
    routes_automation,
    routes_history,
    routes_lifecycle,
    routes_memories,
    routes_owners,
    routes_runs,
    routes_tools,
    routes_users,
    routes_webhooks,
)
from services.gateway.auth import ApiKeys, jwks_client
from services.gateway.clients import Clients, open_clients
from services.gateway.errors import ApiError, internal, invalid, store_unavailable
from services.gateway.quota import Quota
from services.gateway.shedding import ShedRuns
from services.gateway.store import GatewayStore
from services.gateway.usage import OwnerUsage
from services.gateway.webhook_store import WebhookStore
from services.gateway.webhooks import Deliverer
from shared import metrics, telemetry
from shared.admission import InFlight
from shared.errors import as_domain_error
from shared.ids import is_request_id
from shared.logs import request_id_var
from shared.settings import Settings
from shared.version import VERSION

log = logging.getLogger("agentmesh.gateway")

_HTTP_CODES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    429: "RESOURCE_EXHAUSTED",
}


class RequestContext:
    """Pure ASGI middleware: request id (X-Request-ID in and out), access log, and the last
    line of defence (an unexpected exception becomes a generic 500 JSON; its trace is logged,
    never sent)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = ""
        for key, value in scope["headers"]:
            if key == b"x-request-id":
                incoming = value.decode("latin-1")
        rid = incoming if is_request_id(incoming) else uuid.uuid4().hex
        token = request_id_var.set(rid)
        started = time.perf_counter()
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", rid.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except ClientDisconnect:
            # The client went away before its body was complete (a stalled upload it gave
            # up): nobody to answer, and not the server's fault. One line without a trace; a
            # trace per dropped upload flooded the log. 499: nginx's "client closed request".
            status = status or 499
            log.info(
                "client disconnected before sending its whole request",
                extra={"fields": {"path": scope.get("path")}},
            )
        except Exception:
            log.exception("unhandled error", extra={"fields": {"path": scope.get("path")}})
            if status == 0:
                await internal().response()(scope, receive, send_with_id)
            else:
                status = status or 500
        finally:
            log.info(
                "http",
                extra={
                    "fields": {
                        "method": scope.get("method"),
                        "path": scope.get("path"),
                        "status": status,
                        "ms": round((time.perf_counter() - started) * 1000, 1),
                    }
                },
            )
            request_id_var.reset(token)


async def _api_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _store_error(_: Request, exc: Exception) -> Response:
    """The gateway's own database (services/gateway/store.py) failed: 503, nothing done."""
    error = as_domain_error(exc, "the gateway's database failed")
    log.warning("gateway store failed: %s", error.message, exc_info=exc)
    return store_unavailable().response()


def _allowed_methods(request: Request) -> str | None:
    """The Allow header of a 405: every method the API serves at the path's template.

    Starlette names only the methods of the first route whose path matches, and FastAPI
    makes one route per method (OPTIONS /jobs/x said `Allow: GET`, not GET, PUT, PATCH,
    DELETE). Where two templates match (/jobs/{job_id} and /jobs/{job_id}:pause), the one
    with more literal characters is the resource the path names. None: not an API path."""
    path = request.url.path
    paths: dict[str, dict[str, Any]] = request.app.openapi()["paths"]
    matching = [t for t in paths if compile_path(t)[0].match(path)]
    if not matching:
        return None
    best = max(matching, key=lambda t: len(re.sub(r"{[^}]*}", "", t)))
    return ", ".join(sorted(m.upper() for m in paths[best]))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "INTERNAL" if exc.status_code >= 500 else "ERROR")
    headers = dict(exc.headers or {})
    if exc.status_code == 404:
        message = "no such endpoint"
    elif exc.status_code == 405:
        message = "method not allowed on this endpoint"
        allowed = _allowed_methods(request)
        if allowed:
            headers["Allow"] = allowed
    else:
        message = str(exc.detail)
    return ApiError(exc.status_code, code, message, headers=headers).response()


def _loc_field(loc: tuple[Any, ...]) -> str:
    # ("query", "page_size") -> "page_size"; ("path", "thread_id") -> "thread_id"
    if loc and loc[0] in ("query", "path", "body", "header"):
        loc = loc[1:]
    return ".".join(str(p) for p in loc) or "request"


async def _validation_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "is not valid", "type": ""}
    field = _loc_field(tuple(first.get("loc", ())))
    description = "is required" if first.get("type") == "missing" else str(first.get("msg"))
    return invalid(field, description).response()


def _health_routes(app: FastAPI) -> None:
    @app.get("/healthz", summary="The process is alive", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        summary=(
            "Every service the gateway needs answers SERVING; how memory search works now "
            "and each tool source's state"
        ),
        tags=["health"],
        responses={
            503: {
                "model": openapi.ErrorBody,
                "description": "Some service is not SERVING (or lost its store)",
            }
        },
    )
    async def readyz(request: Request) -> Response:
        clients: Clients = request.app.state.clients
        down = await clients.not_serving()
        if down:
            return ApiError(
                503,
                "UNAVAILABLE",
                "not ready: " + "; ".join(f"{name} {why}" for name, why in down.items()),
                violations=list(down.items()),
            ).response()
        # Memory search without its embedding model still serves (lexical-only, degraded),
        # and so does a deployment whose tool source failed: said here, never a 503.
        search, tools = await asyncio.gather(clients.memory_search(), clients.tool_sources())
        return JSONResponse({"status": "ready", "memorySearch": search, "toolSources": tools})


async def _metrics() -> Response:
    body, content_type = metrics.exposition()
    return Response(body, media_type=content_type)


def create_app(settings: Settings, clients: Clients | None = None) -> FastAPI:
    # Tracing when AGENTMESH_OTLP_ENDPOINT is set; HTTP and gRPC metrics on GET /metrics.
    telemetry.configure("gateway", settings)
    metrics.enable()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The gateway's own tables (quota overrides, API keys), migrated to head.
        store = await GatewayStore.open(settings)
        app.state.store = store
        # Usage is history's (its run records); read through the app's clients.
        app.state.usage = OwnerUsage(settings, lambda: app.state.clients)
        quota = Quota.open(settings, store, app.state.usage)
        app.state.quota = quota
        app.state.api_keys = ApiKeys(store)
        app.state.jwks = jwks_client(settings)
        # Webhook endpoints and deliveries, in the same database.
        app.state.webhook_store = WebhookStore(store.engine)
        try:
            if clients is not None:
                yield
                return
            own = open_clients(settings)
            app.state.clients = own
            # Owner deletions left unfinished (a service was down) are driven again from here.
            resumer = asyncio.create_task(
                lifecycle.resume_forever(own, settings, app.state.webhook_store)
            )
            # Webhook delivery (one active deliverer per deployment: a lease in the store).
            deliverer = Deliverer(own, app.state.webhook_store, settings)
            delivering = asyncio.create_task(deliverer.run_forever())
            try:
                yield
            finally:
                for task in (resumer, delivering):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                await deliverer.aclose()
                await own.close()
                telemetry.shutdown()
        finally:
            await routes_runs.settle(settings.grace_seconds)
            await quota.aclose()
            await store.close()

    # /docs (Swagger UI) and /redoc load their scripts and styles from the pinned
    # fastapi-offline package, served under /static-offline-docs: no CDN, so they work offline.
    app = FastAPIOffline(
        title="agentmesh gateway",
        version=VERSION,
        description="AG-UI runs over SSE, history, audit and memories. See docs/protocols/agent/.",
        docs_url="/docs",
        redoc_url="/redoc",
        openapi_url="/openapi.json",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.clients = clients
    # Load shedding of this gateway process (routes_runs.start_run).
    app.state.in_flight = InFlight(
        limit=settings.max_runs_in_flight, per_owner=settings.max_runs_in_flight_per_owner
    )
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(SQLAlchemyError, _store_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.include_router(routes_runs.router, tags=["runs"], responses=openapi.COMMON)
    app.include_router(routes_history.router, tags=["history"], responses=openapi.COMMON)
    app.include_router(routes_memories.router, tags=["memories"], responses=openapi.COMMON)
    app.include_router(routes_tools.router, tags=["tools"], responses=openapi.COMMON)
    app.include_router(routes_automation.router, tags=["automation"], responses=openapi.COMMON)
    app.include_router(routes_users.router, tags=["users"], responses=openapi.COMMON)
    app.include_router(routes_owners.router, tags=["usage and access"], responses=openapi.COMMON)
    app.include_router(routes_lifecycle.router, tags=["lifecycle"], responses=openapi.COMMON)
    app.include_router(routes_webhooks.router, tags=["webhooks"], responses=openapi.COMMON)
    openapi.install(app)
    _health_routes(app)
    app.add_api_route("/metrics", _metrics, methods=["GET"], include_in_schema=False)
    # The browser console at / (static assets; it uses the API above like any app).
    console.install(app)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=[
                "Authorization",
                "Content-Type",
                "X-Request-ID",
                "X-Timezone",
                "Idempotency-Key",
                "Last-Event-ID",
            ],
            # Retry-After: a browser app reads when to send a refused (429, 503) run again.
            expose_headers=["X-Request-ID", "Retry-After"],
        )
    app.add_middleware(RequestContext)
    # Its span is current in RequestContext's log lines and in every gRPC call.
    app.add_middleware(telemetry.HttpMiddleware)
    # Outermost: a run refused by the process bound costs no span, log line or routing.
    app.add_middleware(ShedRuns, in_flight=app.state.in_flight)
    return app
