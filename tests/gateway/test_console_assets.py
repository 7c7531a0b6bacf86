"""The console's static route: what it serves, with which headers, and what it never serves."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from services.gateway.console import ASSETS, CSP, ConsoleAssets
from tests.gateway.conftest import serve_app


def _imports(js: str) -> list[str]:
    """The modules an ES module imports (static `import ... from "x"` and `import "x"`)."""
    return re.findall(
        r"""(?:^|[\s;}])(?:import|export)\s[^"';]*?from\s*["']([^"']+)["']""", js
    ) + re.findall(r"""(?:^|[\s;])import\s*["']([^"']+)["']""", js)


async def test_root_is_the_console_page_with_its_security_headers(http: httpx.AsyncClient) -> None:
    resp = await http.get("/")
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "text/html; charset=utf-8"
    assert resp.headers["content-security-policy"] == CSP
    assert "script-src 'self'" in CSP and "default-src 'none'" in CSP
    assert resp.headers["cache-control"] == "no-cache"
    assert resp.headers["x-content-type-options"] == "nosniff"
    assert resp.headers["etag"]
    assert '<script type="module" src="/console/app.js">' in resp.text


async def test_every_asset_the_console_loads_is_served_from_this_origin(
    http: httpx.AsyncClient,
) -> None:
    """index.html's links and every module's imports, followed to the end: all answer 200
    with their type, and none leaves the gateway (no CDN)."""
    page = (await http.get("/")).text
    # Everything but the in-page navigation (#/chat, ...).
    todo = [u for u in re.findall(r"""(?:src|href)="([^"]+)\"""", page) if not u.startswith("#")]
    seen: set[str] = set()
    types = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
             ".svg": "image/svg+xml"}  # fmt: skip
    while todo:
        url = todo.pop()
        if url in seen:
            continue
        seen.add(url)
        assert url.startswith("/console/"), f"the console loads {url} from elsewhere"
        resp = await http.get(url)
        assert resp.status_code == 200, url
        assert resp.headers["content-type"] == types[Path(url).suffix], url
        assert resp.headers["content-security-policy"] == CSP, url
        if url.endswith(".js"):
            base = url.rsplit("/", 1)[0]
            for spec in _imports(resp.text):
                assert spec.startswith("./"), f"{url} imports {spec}, not a file of the console"
                todo.append(f"{base}/{spec[2:]}")
    assert "/console/vendor/ag-ui-client.js" in seen
    assert {"/console/chat.js", "/console/automation.js", "/console/memories.js"} <= seen


async def test_an_unchanged_asset_is_answered_304(http: httpx.AsyncClient) -> None:
    first = await http.get("/console/app.js")
    again = await http.get("/console/app.js", headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["etag"] == first.headers["etag"]


async def test_head_of_the_page_has_no_body(http: httpx.AsyncClient) -> None:
    resp = await http.head("/")
    assert resp.status_code == 200
    assert resp.content == b""
    assert resp.headers["content-type"] == "text/html; charset=utf-8"


async def test_writing_to_an_asset_is_405_naming_the_methods(http: httpx.AsyncClient) -> None:
    resp = await http.post("/console/app.js", content=b"x")
    assert resp.status_code == 405
    assert resp.headers["allow"] == "GET, HEAD"
    assert resp.json()["error"]["code"] == "METHOD_NOT_ALLOWED"


async def _raw_get(base_url: str, target: str) -> tuple[int, bytes]:
    """GET `target` exactly as written (httpx would normalise `..` away before sending)."""
    host, port = urlsplit(base_url).hostname, urlsplit(base_url).port
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    raw = await reader.read()
    writer.close()
    status = int(raw.split(b" ", 2)[1])
    return status, raw.split(b"\r\n\r\n", 1)[1]


@pytest.mark.parametrize(
    "target",
    [
        "/console/../console.py",
        "/console/../../../shared/settings.py",
        "/console/%2e%2e/console.py",
        "/console/..%2fconsole.py",
        "/console/%2e%2e%2f%2e%2e%2fapp.py",
        "/console/vendor/../../app.py",
        "/console/..%5cconsole.py",
        "/console//etc/passwd",
        "/console/%2fetc%2fpasswd",
        "/console/app.js%00.py",
        "/console/vendor",
        "/console/",
        "/console/nothing.js",
    ],
)
async def test_nothing_outside_the_assets_is_served(base_url: str, target: str) -> None:
    status, body = await _raw_get(base_url, target)
    assert status in (400, 404), (target, status)
    assert b"BaseSettings" not in body and b"import" not in body and b"root:" not in body
    assert body.startswith(b'{"error"'), body[:200]


@pytest.fixture
async def assets_app(tmp_path: Path) -> object:
    """ConsoleAssets over a folder of our own: a page, a file of an unknown type and a
    symlink that points out of the folder."""
    folder = tmp_path / "assets"
    folder.mkdir()
    (folder / "page.html").write_text("<p>ok</p>")
    (folder / "notes.py").write_text("SECRET = 1")
    (tmp_path / "outside.html").write_text("<p>outside</p>")
    (folder / "link.html").symlink_to(tmp_path / "outside.html")
    app = Starlette(routes=[Mount("/a", ConsoleAssets(directory=folder))])
    # A Starlette app where serve_app's annotation says FastAPI.
    async with serve_app(app) as url:  # type: ignore[arg-type]
        yield url


async def test_only_known_types_inside_the_folder_are_served(assets_app: str) -> None:
    async with httpx.AsyncClient(base_url=assets_app) as c:
        assert (await c.get("/a/page.html")).status_code == 200
        assert (await c.get("/a/notes.py")).status_code == 404
        assert (await c.get("/a/link.html")).status_code == 404


def test_the_asset_folder_holds_only_servable_files() -> None:
    """Every committed console file has a type the route serves (a stray file would be a 404)."""
    from services.gateway.console import MEDIA_TYPES

    files = [p for p in ASSETS.rglob("*") if p.is_file()]
    assert files
    assert all(p.suffix in MEDIA_TYPES for p in files), [
        p for p in files if p.suffix not in MEDIA_TYPES
    ]


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_the_api_docs_may_load_nothing_from_elsewhere(
    http: httpx.AsyncClient, page: str
) -> None:
    """ReDoc's bundle shows a logo from cdn.redoc.ly: the pages' policy keeps them to this
    origin (the browser test sees no request leave)."""
    from services.gateway.console import DOCS_CSP

    resp = await http.get(page)
    assert resp.status_code == 200
    assert resp.headers["content-security-policy"] == DOCS_CSP
    assert "img-src 'self' data:;" in DOCS_CSP and "https:" not in DOCS_CSP
