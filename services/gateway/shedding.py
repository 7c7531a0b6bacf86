"""Load shedding at the gateway's door: while this process has its bound of runs in flight
(shared/admission.py), POST /api/v1/agent/runs is answered 503 + Retry-After by the first
middleware, before the request goes through the rest of the application.

Under overload the refusals outnumber the runs admitted, and the event loop that answers
them also relays the admitted runs' streams: a refusal that went through tracing, the
access log, routing and authentication cost enough to slow those streams (bench/shedding.py
measures both). Here a refusal costs one comparison and one small answer. The process bound
is all this check can know; the per-owner bound needs the authenticated owner and stays in
routes_runs.start_run, whose `InFlight.acquire` remains the rule: a run this check lets
through may still be refused there.
"""

from __future__ import annotations

import logging
import time
import uuid

from starlette.types import ASGIApp, Receive, Scope, Send

from services.gateway.errors import ApiError
from shared import metrics
from shared.admission import OVERLOADED, RETRY_AFTER_SECONDS, InFlight
from shared.admission import Scope as Bound
from shared.errors import DomainError
from shared.ids import is_request_id
from shared.logs import request_id_var

log = logging.getLogger("agentmesh.gateway")

RUNS_PATH = "/api/v1/agent/runs"
# Refusals at the door are not in the access log (a line each would cost more than the
# refusal): one warning at most this often says how many there were.
LOG_EVERY_SECONDS = 10.0


def overloaded(exc: DomainError) -> ApiError:
    """503 with Retry-After for a run refused by a bound of the gateway or the orchestrator
    (shared/admission.py): nothing of it was stored, the same request may be sent again."""
    retry_after = exc.metadata.get("retry_after_seconds", str(RETRY_AFTER_SECONDS))
    return ApiError(
        503,
        "UNAVAILABLE",
        exc.message,
        headers={"Retry-After": retry_after},
        extra={"reason": OVERLOADED, "scope": exc.metadata.get("scope", Bound.PROCESS.value)},
    )


def _request_id(scope: Scope) -> str:
    """The caller's X-Request-ID when it is a valid one, else a new id (as RequestContext)."""
    for key, value in scope["headers"]:
        if key == b"x-request-id":
            incoming: str = value.decode("latin-1")
            if is_request_id(incoming):
                return incoming
    return uuid.uuid4().hex


class ShedRuns:
    """Pure ASGI middleware, the outermost of the gateway's: refuses a new run while the
    process bound of `in_flight` is reached; every other request passes untouched."""

    def __init__(self, app: ASGIApp, in_flight: InFlight) -> None:
        self.app = app
        self.in_flight = in_flight
        self.refused = 0  # since the last warning
        self.logged_at = float("-inf")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or not self.in_flight.full()
            or scope["path"] != RUNS_PATH
            or scope["method"] != "POST"
        ):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        rid = _request_id(scope)
        token = request_id_var.set(rid)
        try:
            error = overloaded(self.in_flight.refused(Bound.PROCESS))
            error.headers["X-Request-ID"] = rid
            # The request's body is left unread: uvicorn discards it and keeps the connection.
            await error.response()(scope, receive, send)
        finally:
            request_id_var.reset(token)
        metrics.http_request("POST", RUNS_PATH, 503, time.perf_counter() - started)
        self.refused += 1
        if started - self.logged_at >= LOG_EVERY_SECONDS:
            log.warning(
                "refusing runs: this gateway's bound of runs in flight is reached",
                extra={"fields": {"bound": self.in_flight.limit, "refused": self.refused}},
            )
            self.refused = 0
            self.logged_at = started
