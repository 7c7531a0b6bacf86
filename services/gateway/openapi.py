"""The gateway's OpenAPI document, made to say what the server does.

FastAPI's generated document is corrected in one place: every error status an operation can
answer is documented with the one error body (services/gateway/errors.py), its 422 (which
the gateway never answers: validation errors are 400) is gone, and the `$defs` of the body
schemas that the routes declare by hand (they read their bodies themselves, strictly) are
moved to `components/schemas` so that every `$ref` resolves.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

from services.gateway import jobs


class ErrorDetail(BaseModel):
    field: str = Field(description="the field at fault, as the caller wrote it")
    description: str


class ErrorObject(BaseModel):
    # Some errors add members (e.g. activeRunId and activeRunState of a busy thread).
    model_config = ConfigDict(extra="allow")

    code: str = Field(description="UPPER_SNAKE, e.g. INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE")
    message: str
    requestId: str | None = Field(default=None, description="also in X-Request-ID")
    details: list[ErrorDetail] | None = None


class ErrorBody(BaseModel):
    """The body of every error answer."""

    error: ErrorObject


_DESCRIPTIONS = {
    400: "The request is not valid (the details name the field)",
    401: "No bearer token, or one that is not valid",
    403: "The token lacks the scope this endpoint needs",
    404: "No such resource for this owner",
    409: "The resource's state forbids this now (busy thread, stale version, finished run)",
    410: "The run's events are no longer kept; read its history (the body says where)",
    413: "The request body is larger than AGENTMESH_MAX_REQUEST_BYTES",
    429: "Too many requests or a request too large for a service to take; retry later",
    503: "A service the gateway needs is unavailable; retry later",
    504: "A service the gateway needs did not answer in time; retry later",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route for these error statuses, each with the error body."""
    return {s: {"model": ErrorBody, "description": _DESCRIPTIONS[s]} for s in statuses}


# What any /api operation may answer: bad input, no token, a service busy, down or slow.
COMMON = errors(400, 401, 429, 503, 504)

# Bodies the job routes read themselves. PUT: a whole job and the version it replaces.
# PATCH: a JSON Merge Patch (RFC 7386) of the job's own fields onto the stored job, with the
# version it is based on; null removes an optional field.
_JOB = jobs.JobIn.model_json_schema(by_alias=True)
# JobIn's own rule for `version` (bounds included), so the document follows the server.
_VERSION = {
    **{k: v for k, v in _JOB["properties"]["version"].items() if k not in ("default", "title")},
    "description": "the version this update is based on",
}
JOB_PUT = {**_JOB, "title": "JobPut", "required": [*_JOB.get("required", []), "version"]}
JOB_PATCH = {
    "title": "JobPatch",
    "type": "object",
    "required": ["version"],
    "properties": {
        "version": _VERSION,
        **{
            name: {"description": "merged onto the job's (null removes it)"}
            for name in jobs.INPUT_FIELDS
        },
    },
}


def json_body(schema: dict[str, Any]) -> dict[str, Any]:
    """The `openapi_extra=` of a route that reads a required JSON body of `schema`."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _hoist_defs(node: Any, into: dict[str, Any]) -> Any:
    """`node` with its `$defs` moved into `into` and their references rewritten."""
    if isinstance(node, dict):
        for name, schema in node.pop("$defs", {}).items():
            into.setdefault(name, _hoist_defs(schema, into))
        out = {k: _hoist_defs(v, into) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            out["$ref"] = "#/components/schemas/" + ref.removeprefix("#/$defs/")
        return out
    if isinstance(node, list):
        return [_hoist_defs(v, into) for v in node]
    return node


def exact(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` without 422 answers and with every `$defs` reference resolvable."""
    schemas: dict[str, Any] = doc.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            operation.get("responses", {}).pop("422", None)
    hoisted: dict[str, Any] = {}
    doc["paths"] = _hoist_defs(doc.get("paths", {}), hoisted)
    for name, schema in hoisted.items():
        schemas.setdefault(name, schema)
    return doc


def install(app: FastAPI) -> None:
    """Serve the corrected document at the app's openapi_url."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = exact(
                get_openapi(
                    title=app.title,
                    version=app.version,
                    openapi_version=app.openapi_version,
                    description=app.description,
                    routes=app.routes,
                )
            )
        return app.openapi_schema

    # FastAPI's documented way to replace the schema it generates.
    app.openapi = openapi  # type: ignore[method-assign]
