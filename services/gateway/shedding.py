"""Load shedding at the gateway's door: while this process has its bound of runs in flight
(shared/admission.py), POST /api/v1/agent/runs is answered 503 + Retry-After by the first
middleware, before the request goes through the rest of the application.

Under overload the refusals outnumber the runs admitted, and the event loop that answers
them also relays the admitted runs' streams: a refusal that went through tracing, the
access log, routing and authentication cost enough to slow those streams (bench/shedding.py
measures both). Here a refusal costs one comparison and one small answer, built once (only
its request id differs from one refusal to the next). The process bound
is all this check can know; the per-owner bound needs the authenticated owner and stays in
routes_runs.start_run, whose `InFlight.acquire` remains the rule: a run this check lets
through may still be refused there.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass

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
# The ASGI scope key of a run request's arrival (time.perf_counter()).
RECEIVED = "agentmesh.received"
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
            incoming = bytes(value).decode("latin-1")
            if is_request_id(incoming):
                return incoming
    return uuid.uuid4().hex


# Stands for the request id in the refusal built once (any text a body cannot contain).
_RID = "\x00request-id\x00"


@dataclass(frozen=True)
class _Refusal:
    """`overloaded`'s answer to a run over the process bound, encoded once: the body in two
    halves around its request id, and its headers but the request id and the length."""

    head: bytes
    tail: bytes
    headers: tuple[tuple[bytes, bytes], ...]

    @classmethod
    def of(cls, error: ApiError) -> _Refusal:
        token = request_id_var.set(_RID)
        try:
            response = error.response()
        finally:
            request_id_var.reset(token)
        head, tail = bytes(response.body).split(json.dumps(_RID)[1:-1].encode(), 1)
        kept = tuple(
            (k, v) for k, v in response.raw_headers if k not in (b"content-length", b"x-request-id")
        )
        return cls(head, tail, kept)

    async def send(self, rid: str, send: Send) -> None:
        """The refusal with request id `rid` (is_request_id: nothing JSON would escape)."""
        body = b"".join((self.head, rid.encode("ascii"), self.tail))
        headers = [
            *self.headers,
            (b"x-request-id", rid.encode("ascii")),
            (b"content-length", str(len(body)).encode("ascii")),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class ShedRuns:
    """Pure ASGI middleware, the outermost of the gateway's: refuses a new run while the
    process bound of `in_flight` is reached; every other request passes untouched."""

    def __init__(self, app: ASGIApp, in_flight: InFlight) -> None:
        self.app = app
        self.in_flight = in_flight
        self.refusal = _Refusal.of(overloaded(in_flight.refused(Bound.PROCESS)))
        self.record = metrics.http_request_of("POST", RUNS_PATH, 503)
        self.refused = 0  # since the last warning
        self.logged_at = float("-inf")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != RUNS_PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        if not self.in_flight.full():
            # When the run's request reached the gateway: its time to first event counts
            # from here (routes_runs, metrics.run_first_event).
            scope[RECEIVED] = started
            await self.app(scope, receive, send)
            return
        rid = _request_id(scope)
        # The request's body is left unread: uvicorn discards it and keeps the connection.
        await self.refusal.send(rid, send)
        self.record(time.perf_counter() - started)
        self.refused += 1
        if started - self.logged_at >= LOG_EVERY_SECONDS:
            log.warning(
                "refusing runs: this gateway's bound of runs in flight is reached",
                extra={"fields": {"bound": self.in_flight.limit, "refused": self.refused}},
            )
            self.refused = 0
            self.logged_at = started
