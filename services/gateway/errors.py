"""Every error the gateway answers: one JSON shape, one gRPC-status -> HTTP-status table.

{"error": {"code": "INVALID_ARGUMENT", "message": "...", "requestId": "...",
           "details": [{"field": "threadId", "description": "..."}]}}
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from starlette.responses import JSONResponse

from shared.errors import bounded_violations, clip, from_rpc_error
from shared.logs import request_id_var

log = logging.getLogger("agentmesh.gateway")

HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    # A peer's CANCELLED is its own doing (it stopped, e.g. shutting down): retry later.
    grpc.StatusCode.CANCELLED: 503,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}

# Codes whose peer message may be shown to the caller; the others get a generic one
# (an INTERNAL message of a peer is for its logs, not for the caller).
_CLIENT_FACING = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)


# An HTTP answer is not bound by gRPC's trailers: room for the gateway's own longer messages
# (a 410 names two URLs), still bounded.
MAX_MESSAGE_BYTES = 1024


class ApiError(Exception):
    """An error answered to the HTTP caller as JSON."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        violations: Sequence[tuple[str, str]] = (),
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        # Bounded like a service's error (shared.errors): an answer never grows with the
        # input it refuses, and never carries text UTF-8 cannot encode.
        message = clip(message, MAX_MESSAGE_BYTES)
        super().__init__(message)
        # More members of the error object (e.g. activeRunId of a busy thread).
        self.extra = dict(extra or {})
        self.status = status
        self.code = code
        self.message = message
        self.violations = bounded_violations(violations)
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        rid = request_id_var.get()
        if rid:
            error["requestId"] = rid
        if self.violations:
            error["details"] = [{"field": f, "description": d} for f, d in self.violations]
        error.update(self.extra)
        return {"error": error}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def invalid(field: str, description: str) -> ApiError:
    return ApiError(
        400, "INVALID_ARGUMENT", f"{field}: {description}", violations=[(field, description)]
    )


def unauthenticated(message: str) -> ApiError:
    return ApiError(401, "UNAUTHENTICATED", message, headers={"WWW-Authenticate": "Bearer"})


def store_unavailable() -> ApiError:
    """The gateway's own database failed: 503, worded without the driver's text (its SQL and
    parameters are for the log, not the caller)."""
    return ApiError(
        503,
        "UNAVAILABLE",
        "the gateway's database cannot be reached; try again shortly",
        headers={"Retry-After": "1"},
    )


def internal() -> ApiError:
    return ApiError(500, "INTERNAL", f"internal error (request id {request_id_var.get()})")


_SNAKE = re.compile(r"_([a-z0-9])")


def camel_field(path: str) -> str:
    """A proto field path ("messages[0].thread_id") as JSON ("messages[0].threadId")."""
    return _SNAKE.sub(lambda m: m.group(1).upper(), path)


def from_rpc(
    err: grpc.RpcError,
    service: str,
    *,
    camel_fields: bool = False,
    renames: Mapping[str, str] | None = None,
) -> ApiError:
    """The HTTP answer for a failed call to `service`. `renames` maps a proto field to the
    name the caller used for it (e.g. profile_name -> forwardedProps.agentmesh.profile)."""
    code: grpc.StatusCode = err.code()
    status = HTTP_STATUS.get(code, 500)
    if code in _CLIENT_FACING:
        domain = from_rpc_error(err)
        renames = renames or {}
        message = domain.message
        violations = []
        for f, d in domain.violations:
            name = renames.get(f) or (camel_field(f) if camel_fields else f)
            if f in renames and message.startswith(f"{f}:"):
                message = f"{name}:{message[len(f) + 1 :]}"
            violations.append((name, d))
        # A service's own reason (ErrorInfo, e.g. VERSION_MISMATCH) says more than the code;
        # the code's default reason says nothing the code does not.
        extra = {} if domain.reason == type(domain).default_reason else {"reason": domain.reason}
        return ApiError(status, code.name, message, violations=violations, extra=extra)
    if code is grpc.StatusCode.CANCELLED:
        # The gateway never reports its own cancels (their caller is gone): this one is the
        # peer's, which stopped before answering.
        log.warning("%s cancelled the call", service, extra={"fields": {"service": service}})
        return ApiError(
            status, "UNAVAILABLE", f"the {service} service stopped before answering; retry later"
        )
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        log.warning(
            "%s unreachable", service, extra={"fields": {"code": code.name, "service": service}}
        )
        what = "is unavailable" if code is grpc.StatusCode.UNAVAILABLE else "did not answer in time"
        return ApiError(status, code.name, f"the {service} service {what}; retry later")
    detail = err.details()
    log.error("%s failed", service, extra={"fields": {"code": code.name, "detail": detail}})
    if status == 500:
        return internal()
    return ApiError(status, code.name, f"the {service} service could not answer ({code.name})")
