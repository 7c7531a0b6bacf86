"""The official AG-UI client (@ag-ui/client HttpAgent, Node) consumes the gateway's stream."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

from tests.gateway.test_runs_stream import CHAT_ORDER

SCRIPT = Path(__file__).with_name("agui_client_check.mjs")
NODE = shutil.which("node") or "node"


async def run_check(
    base_url: str,
    token: str,
    thread_id: str,
    run_id: str,
    text: str,
) -> tuple[int, dict[str, Any], str]:
    proc = await asyncio.create_subprocess_exec(
        NODE,
        str(SCRIPT),
        f"{base_url}/api/v1/agent/runs",
        token,
        thread_id,
        run_id,
        text,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, json.loads(out.decode().strip().splitlines()[-1]), err.decode()


async def test_agui_client_consumes_a_chat_run(base_url: str, token: str) -> None:
    code, result, stderr = await run_check(base_url, token, "t-node", "r-node", "hello")
    assert code == 0, (result, stderr)
    assert result["ok"] is True
    assert result["eventTypes"] == CHAT_ORDER
    assert result["stepNames"] == ["router", "worker"]
    assert result["text"] == "Hello, Lin.\nBye"


async def test_agui_client_consumes_tool_reasoning_and_custom_events(
    base_url: str,
    token: str,
) -> None:
    code, result, stderr = await run_check(base_url, token, "tools-node", "r-node-2", "remember")
    assert code == 0, (result, stderr)
    assert {
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "REASONING_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_END",
        "CUSTOM",
    } <= set(result["eventTypes"])
    assert result["stepNames"] == ["memory"]


async def test_agui_client_check_fails_on_a_run_error(base_url: str, token: str) -> None:
    code, result, _ = await run_check(base_url, token, "fail-mid-node", "r-node-3", "hello")
    assert code != 0
    assert result["ok"] is False and "OUTCOME_UNKNOWN" in result["error"]
    assert result["eventTypes"][-1] == "RUN_ERROR"
