"""A whole suite whose deployment has outside tools: the notes MCP server (stdio), the PyPI
time server, and a profile `chat_outside` (router off) allowing `notes.*` and `time.*`."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from services.launcher import Suite
from tests.e2e.conftest import make_suite, parse_sse, run_body, token
from tests.tools.conftest import notes_stdio, time_server

PROFILE = "chat_outside"


@contextmanager
def outside_tools_suite(
    tmp: Path, servers: list[dict[str, Any]] | None = None, **env: str
) -> Iterator[Suite]:
    """The suite, started (and stopped after); `servers` replace the notes and time ones."""
    tools_file = tmp / "tools.yaml"
    servers = servers or [notes_stdio(), time_server()]
    tools_file.write_text(yaml.safe_dump({"mcp_servers": servers}))
    profiles_file = tmp / "profiles.yaml"
    profile = {
        "name": PROFILE,
        "enable_router": False,
        "executor": "worker",
        "tool_policy": {"allowlist": [f"{s['name']}.*" for s in servers]},
    }
    profiles_file.write_text(yaml.safe_dump({"profiles": [profile]}))
    suite = make_suite(
        tmp,
        f"o{uuid.uuid4().hex[:10]}_",
        AGENTMESH_TOOLS_FILE=str(tools_file),
        AGENTMESH_PROFILES_FILE=str(profiles_file),
        **env,
    )
    try:
        suite.start(timeout=90)
        wait_for_tool_servers(suite, [s["name"] for s in servers])
        yield suite
    finally:
        suite.stop()


def wait_for_tool_servers(suite: Suite, names: list[str], within: float = 120.0) -> None:
    """Until /readyz says each MCP server listed its tools. The suite is ready before that:
    on a loaded machine the executor's first handshake with a stdio server can time out (it
    tries again in the background), and a run meanwhile finds its tools not registered."""
    deadline = time.monotonic() + within
    while True:
        sources = httpx.get(f"{suite.gateway_url}/readyz", timeout=10).json().get("toolSources")
        states = {s["name"]: s["state"] for s in (sources or {}).get("sources", [])}
        if all(states.get(f"mcp:{name}") == "connected" for name in names):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the tool servers were not connected within {within} s: {sources}")
        time.sleep(0.2)


def chat(suite: Suite, owner: str, thread: str, run_id: str, text: str) -> list[dict[str, Any]]:
    body = run_body(thread, run_id, text, forwardedProps={"agentmesh": {"profile": PROFILE}})
    resp = httpx.post(
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=body,
        headers={"Authorization": f"Bearer {token(owner)}"},
        timeout=300,
    )
    assert resp.status_code == 200, resp.text
    return [json.loads(json.dumps(e)) for e in parse_sse(resp.content)]
