"""A run stream that waits (a queued run, a long tool call) carries SSE comment heartbeats,
so proxies that close idle streams keep it open; strict clients skip them."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from services.gateway.app import create_app
from services.gateway.auth import issue_token
from services.gateway.clients import open_clients
from services.gateway.sse import HEARTBEAT
from shared.settings import Settings
from tests.gateway.conftest import Peers, gateway_settings, run_body, serve_app
from tests.gateway.peers import WAIT_SECONDS
from tests.gateway.sse_client import parse_frames
from tests.gateway.test_agui_client import run_check
from tests.gateway.test_runs_stream import CHAT_ORDER

INTERVAL = 0.2


@pytest.fixture(scope="module")
def hb_settings(base_settings: Settings, peers: Peers) -> Settings:
    return gateway_settings(base_settings, peers.addrs, sse_heartbeat_seconds=INTERVAL)


@pytest.fixture(scope="module")
async def hb_url(hb_settings: Settings) -> AsyncIterator[str]:
    clients = open_clients(hb_settings)
    try:
        async with serve_app(create_app(hb_settings, clients)) as url:
            yield url
    finally:
        await clients.close()


async def _chunks(url: str, settings: Settings, thread_id: str) -> list[tuple[float, bytes]]:
    """The body's chunks as they arrive, each with its arrival time."""
    headers = {"Authorization": f"Bearer {issue_token(settings, 'alice')}"}
    out: list[tuple[float, bytes]] = []
    body = run_body(thread_id)
    async with (
        httpx.AsyncClient(base_url=url, timeout=10) as http,
        http.stream("POST", "/api/v1/agent/runs", json=body, headers=headers) as resp,
    ):
        assert resp.status_code == 200
        async for chunk in resp.aiter_raw():
            out.append((time.monotonic(), chunk))
    return out


async def test_a_waiting_run_stream_carries_comment_heartbeats_between_its_events(
    hb_url: str, hb_settings: Settings
) -> None:
    chunks = await _chunks(hb_url, hb_settings, "wait-1")
    raw = b"".join(c for _, c in chunks)
    beats = raw.count(HEARTBEAT)
    # WAIT_SECONDS of silence at INTERVAL: about five; timer slack on a busy machine.
    assert beats >= WAIT_SECONDS / INTERVAL - 2, raw
    # Only while it waits: no heartbeat after the run's end, none between quick events.
    assert raw.endswith(b"\n\n") and not raw.endswith(HEARTBEAT)
    assert raw.index(HEARTBEAT) > raw.index(b'"STEP_STARTED"')
    # The gaps between the chunks stay near the interval (what a proxy's idle timer sees).
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(chunks)]
    assert max(gaps) < WAIT_SECONDS, gaps
    assert [e["type"] for e in parse_frames(raw)] == CHAT_ORDER


async def test_a_quick_run_stream_carries_no_heartbeat(
    base_url: str, gw_settings: Settings
) -> None:
    raw = b"".join(c for _, c in await _chunks(base_url, gw_settings, "t-quick"))
    assert HEARTBEAT not in raw


async def test_the_agui_client_accepts_a_stream_with_heartbeats(
    hb_url: str, hb_settings: Settings
) -> None:
    token = issue_token(hb_settings, "alice")
    code, result, stderr = await run_check(hb_url, token, "wait-node", "r-wait-node", "hello")
    assert code == 0, (result, stderr)
    assert result["ok"] is True
    assert result["eventTypes"] == CHAT_ORDER
