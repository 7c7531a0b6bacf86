"""The gateway's API documentation: the OpenAPI document and the /docs and /redoc pages."""

from __future__ import annotations

import re

import httpx
import pytest


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
