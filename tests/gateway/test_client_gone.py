"""A client that drops its connection in the middle of sending a body."""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

import pytest

from services.gateway.auth import issue_token
from shared.settings import Settings


async def _drop_mid_upload(base_url: str, path: str, token: str) -> None:
    """Send the headers of a 10,000-byte JSON body, 10 bytes of it, then close."""
    url = urlsplit(base_url)
    _, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {token}\r\n"
        'Content-Type: application/json\r\nContent-Length: 10000\r\n\r\n{"threadId"'.encode()
    )
    await writer.drain()
    await asyncio.sleep(0.2)  # the gateway is reading the body
    writer.close()
    await writer.wait_closed()
    await asyncio.sleep(0.3)  # it notices


@pytest.mark.parametrize("path", ["/api/v1/agent/runs", "/api/v1/automation/jobs"])
async def test_a_client_dropping_its_upload_is_logged_once_without_a_traceback(
    base_url: str, gw_settings: Settings, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    with caplog.at_level(logging.DEBUG):
        await _drop_mid_upload(base_url, path, issue_token(gw_settings, "alice"))
    ours = [r for r in caplog.records if r.name.startswith(("agentmesh", "uvicorn"))]
    assert not [r for r in ours if r.levelno >= logging.ERROR], [r.getMessage() for r in ours]
    assert not [r for r in ours if r.exc_info], [r.getMessage() for r in ours]
    gone = [r for r in ours if "disconnected" in r.getMessage()]
    assert len(gone) == 1, [r.getMessage() for r in ours]
    assert gone[0].levelno in (logging.INFO, logging.WARNING)
