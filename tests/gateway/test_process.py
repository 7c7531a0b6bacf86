"""`python -m services.gateway` as a real process: serves, and on SIGTERM lets an open run
stream finish within the grace period before it exits."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import httpx

from services.gateway.auth import issue_token
from services.launcher import free_port
from shared.settings import Settings
from tests.gateway.conftest import Peers, run_body
from tests.gateway.sse_client import parse_frames
from tests.gateway.test_runs_stream import CHAT_ORDER


async def test_sigterm_lets_an_open_stream_finish_then_exits(
    base_settings: Settings,
    peers: Peers,
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "AGENTMESH_PORT": str(port),
        "AGENTMESH_GRACE_SECONDS": "10",
        "AGENTMESH_JWT_SECRET": base_settings.jwt_secret,
        "AGENTMESH_LOG_LEVEL": "WARNING",
    }
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "protos")])
    env.update({f"AGENTMESH_{name.upper()}_ADDR": addr for name, addr in peers.addrs.items()})
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.gateway",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=10) as c:
            deadline = time.monotonic() + 20
            while True:
                try:
                    if (await c.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the gateway did not start"
                await asyncio.sleep(0.1)
            headers = {"Authorization": f"Bearer {issue_token(base_settings, 'proc')}"}
            # "slow-" runs take about two seconds (0.2 s per event).
            async with c.stream(
                "POST", "/api/v1/agent/runs", json=run_body(thread_id="slow-1"), headers=headers
            ) as resp:
                assert resp.status_code == 200
                chunks = resp.aiter_raw()
                raw = await chunks.__anext__()
                proc.send_signal(signal.SIGTERM)
                async for chunk in chunks:
                    raw += chunk
        assert [e["type"] for e in parse_frames(raw)] == CHAT_ORDER
        assert await asyncio.wait_for(proc.wait(), timeout=15) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
