"""The gateway's API documentation: the OpenAPI document and the /docs and /redoc pages."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012


def _asset_urls(html: str) -> list[str]:
    """Every URL a page loads: src, href and spec-url attributes, and url: '...' in its script."""
    pattern = r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|\burl\s*:\s*["']([^"']+)["']"""
    return [a or b for a, b in re.findall(pattern, html)]


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_docs_pages_load_only_assets_the_gateway_serves(
    http: httpx.AsyncClient, page: str
) -> None:
    resp = await http.get(page)
    assert resp.status_code == 200
    urls = _asset_urls(resp.text)
    # The page's script (and Swagger UI's style sheet), its favicon, and the document.
    assert any(u.endswith(".js") for u in urls), urls
    assert "/openapi.json" in urls, urls
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url}"
        asset = await http.get(url)
        assert asset.status_code == 200, url
        assert asset.content, url
    assert "cdn" not in resp.text.lower()


@pytest.fixture(scope="module")
async def document(http: httpx.AsyncClient) -> dict[str, Any]:
    resp = await http.get("/openapi.json")
    assert resp.status_code == 200
    doc: dict[str, Any] = resp.json()
    return doc


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if method in {"get", "put", "post", "patch", "delete"}
    ]


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_the_openapi_document_is_valid_openapi(document: dict[str, Any]) -> None:
    validate(document)  # raises, naming the first violation


def test_every_ref_of_the_openapi_document_resolves(document: dict[str, Any]) -> None:
    resolver = (
        Registry().with_resource("", Resource.from_contents(document, DRAFT202012)).resolver()
    )
    refs = set(_refs(document))
    assert refs and all(r.startswith("#/components/schemas/") for r in refs), refs
    for ref in refs:
        assert resolver.lookup(ref).contents, ref


def test_the_openapi_document_never_mentions_422(document: dict[str, Any]) -> None:
    # Validation errors are 400 with the error body; FastAPI's 422 never comes.
    assert "422" not in json.dumps(document)
    assert "HTTPValidationError" not in json.dumps(document)


def test_every_api_operation_documents_its_errors_with_the_error_body(
    document: dict[str, Any],
) -> None:
    error = "#/components/schemas/ErrorBody"
    for method, path, op in _operations(document):
        if not path.startswith("/api/"):
            continue
        responses = op["responses"]
        for status in ("400", "401", "429", "503", "504"):
            assert status in responses, (method, path, status)
        for status, answer in responses.items():
            if status.startswith(("4", "5")):
                schema = answer["content"]["application/json"]["schema"]
                assert schema == {"$ref": error}, (method, path, status)


@pytest.mark.parametrize(
    ("method", "path", "statuses"),
    [
        ("POST", "/api/v1/agent/runs", {"409", "413"}),
        ("GET", "/api/v1/agent/runs/{run_id}/events", {"404", "410"}),
        ("POST", "/api/v1/agent/runs/{run_id}:cancel", {"404", "409"}),
        ("GET", "/api/v1/admin/audit", {"403"}),
        ("GET", "/api/v1/agent/threads/{thread_id}/history", {"404"}),
        ("POST", "/api/v1/automation/jobs", {"413"}),
        ("PUT", "/api/v1/automation/jobs/{job_id}", {"404", "409", "413"}),
        ("PATCH", "/api/v1/automation/jobs/{job_id}", {"404", "409", "413"}),
        ("DELETE", "/api/v1/memories/{memory_id}", {"404"}),
        ("POST", "/api/v1/users", {"413"}),
    ],
)
def test_operations_document_the_errors_they_answer(
    document: dict[str, Any], method: str, path: str, statuses: set[str]
) -> None:
    assert statuses <= set(document["paths"][path][method.lower()]["responses"])


@pytest.mark.parametrize("method", ["put", "patch"])
def test_job_updates_declare_their_body_with_the_version(
    document: dict[str, Any], method: str
) -> None:
    op = document["paths"]["/api/v1/automation/jobs/{job_id}"][method]
    body = op["requestBody"]
    assert body["required"] is True
    schema = body["content"]["application/json"]["schema"]
    assert "version" in schema["required"] and "version" in schema["properties"]


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/api/v1/automation/jobs/j-1", "DELETE, GET, PATCH, PUT"),
        ("/api/v1/automation/jobs/j-1:pause", "POST"),
        ("/api/v1/automation/jobs", "GET, POST"),
    ],
)
async def test_a_405_allows_every_method_the_resource_serves(
    http: httpx.AsyncClient, auth: dict[str, str], path: str, allowed: str
) -> None:
    resp = await http.options(path, headers=auth)
    assert resp.status_code == 405
    assert resp.headers["allow"] == allowed
    assert resp.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
