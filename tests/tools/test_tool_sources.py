"""Tools from outside (MCP servers, HTTP tools) in the worker's tool loop, against real
servers started by the tests, driven by the scripted model ("use the <name> tool with {...}")."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from services.executor import tool_sources
from services.executor.agents.base import StepRequest
from services.executor.agents.worker import WorkerAgent
from services.executor.events import StepItem, StepResult
from services.executor.tool_sources import ToolSources
from services.executor.tools import SourceState, ToolRegistry
from services.launcher import free_port
from shared.domain import ExecutorKind
from shared.messages import Msg, ToolResultBlock, ToolResultState, user
from shared.model.scripted import ScriptedModel
from shared.profiles import ExecutionProfile, ToolPolicy
from shared.tool_config import parse_tools_config
from tests.tools.conftest import PYTHON, ROOT, HttpToolServer, notes_stdio, time_server


def profile(*allowlist: str) -> ExecutionProfile:
    return ExecutionProfile(
        name="outside_tools",
        enable_router=False,
        executor=ExecutorKind.WORKER,
        tool_policy=ToolPolicy(allowlist=tuple(allowlist)),
    )


def step(said: str, allow: Sequence[str], *, owner: str = "alice") -> StepRequest:
    return StepRequest(
        run_id="run-1",
        thread_id="thread-1",
        owner=owner,
        executor=ExecutorKind.WORKER,
        profile=profile(*allow),
        context=(),
        input=user(said),
        tools=tuple(allow),
        client_tools=(),
        time_zone="UTC",
        reply_message_id="reply-1",
    )


@asynccontextmanager
async def sources(config: dict[str, Any], timeout: float = 10) -> AsyncIterator[ToolSources]:
    s = ToolSources(parse_tools_config(config), timeout)
    await s.start()
    try:
        yield s
    finally:
        await s.close()


async def run(s: ToolSources, said: str, allow: Sequence[str], **kw: Any) -> list[StepItem]:
    agent = WorkerAgent(
        ScriptedModel(), ToolRegistry((), s), max_tool_rounds=2, tool_timeout_seconds=10
    )
    return [item async for item in agent.run(step(said, allow, **kw))]


def results(items: list[StepItem]) -> list[ToolResultBlock]:
    return [
        b for i in items if isinstance(i, Msg) for b in i.content if isinstance(b, ToolResultBlock)
    ]


def ended_normally(items: list[StepItem]) -> bool:
    return isinstance(items[-1], StepResult) and items[-1].finished_reason == "stop"


async def test_stdio_mcp_tools_are_namespaced_offered_with_their_schema_and_run() -> None:
    async with sources({"mcp_servers": [notes_stdio()]}) as s:
        names = {t.name: t for t in s.tools()}
        assert {"notes.add_note", "notes.list_notes"} <= set(names)
        # The owner argument is the executor's: the model is not offered it.
        assert set(names["notes.add_note"].parameters["properties"]) == {"text"}
        items = await run(s, 'use the notes.add_note tool with {"text": "buy tea"}', ["notes.*"])
        [result] = results(items)
        assert result.state is ToolResultState.SUCCESS and result.output == "saved note 1"
        assert ended_normally(items)


async def test_the_owner_reaches_the_mcp_tool_and_the_model_cannot_choose_another() -> None:
    async with sources({"mcp_servers": [notes_stdio()]}) as s:
        said = 'use the notes.add_note tool with {"text": "secret", "owner_id": "bob"}'
        await run(s, said, ["notes.*"], owner="alice")
        [bobs] = results(await run(s, "use the notes.list_notes tool", ["notes.*"], owner="bob"))
        [alices] = results(
            await run(s, "use the notes.list_notes tool", ["notes.*"], owner="alice")
        )
        assert bobs.output == "no notes"
        assert alices.output == "secret"


async def test_streamable_http_mcp_server_session_is_reused_across_calls(
    notes_http_url: str,
) -> None:
    server = {
        "name": "notes",
        "transport": "http",
        "url": notes_http_url,
        "owner": {"via": "argument", "name": "owner_id"},
    }
    async with sources({"mcp_servers": [server]}) as s:
        [mcp] = s.servers
        first = await mcp.session()
        await run(s, 'use the notes.add_note tool with {"text": "one"}', ["notes.add_note"])
        [listed] = results(await run(s, "use the notes.list_notes tool", ["notes.list_notes"]))
        assert listed.output == "one"
        assert await mcp.session() is first


async def test_off_the_shelf_time_server_from_pypi_answers() -> None:
    async with sources({"mcp_servers": [time_server()]}) as s:
        items = await run(
            s, 'use the time.get_current_time tool with {"timezone": "Europe/Berlin"}', ["time.*"]
        )
        [result] = results(items)
        assert result.state is ToolResultState.SUCCESS
        assert json.loads(str(result.output))["timezone"] == "Europe/Berlin"


async def test_a_tool_outside_the_allowlist_pattern_is_not_run() -> None:
    async with sources({"mcp_servers": [notes_stdio()]}) as s:
        items = await run(s, 'use the notes.add_note tool with {"text": "x"}', ["notes.list_*"])
        [result] = results(items)
        assert result.state is ToolResultState.DENIED
        [listed] = results(await run(s, "use the notes.list_notes tool", ["notes.*"]))
        assert listed.output == "no notes"


async def test_slow_mcp_tool_is_cut_at_its_timeout_and_the_run_goes_on() -> None:
    async with sources({"mcp_servers": [notes_stdio(timeout_seconds=0.5)]}) as s:
        items = await asyncio.wait_for(
            run(s, 'use the notes.slow tool with {"seconds": 30}', ["notes.*"]), 20
        )
        [result] = results(items)
        assert result.state is ToolResultState.ERROR and "in time" in str(result.output)
        assert ended_normally(items)


async def test_mcp_error_result_reaches_the_model_as_an_error() -> None:
    async with sources({"mcp_servers": [notes_stdio()]}) as s:
        items = await run(s, 'use the notes.fail tool with {"why": "testing"}', ["notes.*"])
        [result] = results(items)
        assert result.state is ToolResultState.ERROR and "failed on purpose: testing" in str(
            result.output
        )
        assert ended_normally(items)


async def test_large_result_is_cut_to_max_result_chars_and_says_so() -> None:
    async with sources({"mcp_servers": [notes_stdio(max_result_chars=1000)]}) as s:
        [result] = results(await run(s, 'use the notes.big tool with {"size": 50000}', ["notes.*"]))
        text = str(result.output)
        assert text.startswith("x" * 1000) and "49000 more characters" in text and len(text) < 1100


async def test_a_server_that_dies_mid_call_gives_an_error_then_is_reconnected() -> None:
    async with sources({"mcp_servers": [notes_stdio()]}) as s:
        items = await asyncio.wait_for(run(s, "use the notes.crash tool", ["notes.*"]), 30)
        [crashed] = results(items)
        assert crashed.state is ToolResultState.ERROR
        assert ended_normally(items)
        [again] = results(await run(s, "use the notes.list_notes tool", ["notes.*"]))
        assert again.state is ToolResultState.SUCCESS


async def test_an_unreachable_http_mcp_server_registers_nothing_and_does_not_hang() -> None:
    dead = {"name": "gone", "transport": "http", "url": f"http://127.0.0.1:{free_port()}/mcp"}
    async with sources({"mcp_servers": [dead]}) as s:
        assert s.tools() == []
        items = await asyncio.wait_for(run(s, "use the gone.anything tool", ["gone.*"]), 30)
        [result] = results(items)
        assert result.state is ToolResultState.DENIED  # not registered: never reached
        assert ended_normally(items)


async def test_shutdown_ends_the_stdio_server_process() -> None:
    s = ToolSources(parse_tools_config({"mcp_servers": [notes_stdio()]}), 10)
    await s.start()
    [server] = s.servers
    assert server.tools
    await s.close()
    with pytest.raises(Exception, match="shut down"):
        await server.session()


def http_tool(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "crm.lookup_order",
        "description": "Look up an order of the user.",
        "url": url,
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        "owner": {"via": "header", "name": "X-Agentmesh-Owner"},
        **extra,
    }


async def test_http_tool_gets_the_arguments_and_the_owner_header(
    http_tool_server: HttpToolServer,
) -> None:
    async with sources({"http_tools": [http_tool(f"{http_tool_server.url}/orders")]}) as s:
        items = await run(
            s, 'use the crm.lookup_order tool with {"order_id": "A7"}', ["crm.*"], owner="carol"
        )
        [result] = results(items)
        assert json.loads(str(result.output)) == {"owner": "carol", "order": {"order_id": "A7"}}
        assert http_tool_server.seen == [
            {"path": "/orders", "body": {"order_id": "A7"}, "owner": "carol"}
        ]


async def test_http_tool_error_status_and_timeout_are_error_results(
    http_tool_server: HttpToolServer,
) -> None:
    config = {
        "http_tools": [
            http_tool(f"{http_tool_server.url}/fail"),
            http_tool(f"{http_tool_server.url}/slow", name="crm.slow", timeout_seconds=0.5),
        ]
    }
    async with sources(config) as s:
        [failed] = results(await run(s, "use the crm.lookup_order tool", ["crm.*"]))
        assert failed.state is ToolResultState.ERROR and "HTTP 503" in str(failed.output)
        items = await run(s, 'use the crm.slow tool with {"seconds": 5}', ["crm.*"])
        [slow] = results(items)
        assert slow.state is ToolResultState.ERROR and "in time" in str(slow.output)
        assert ended_normally(items)


async def test_an_mcp_tool_marked_requires_approval_waits_for_one_and_does_not_run() -> None:
    config = {"mcp_servers": [notes_stdio(requires_approval=["notes.add_*"])]}
    async with sources(config) as s:
        items = await run(s, 'use the notes.add_note tool with {"text": "x"}', ["notes.*"])
        assert results(items) == []
        end = items[-1]
        assert isinstance(end, StepResult)
        assert [a.tool_name for a in end.approvals] == ["notes.add_note"]
        [listed] = results(await run(s, "use the notes.list_notes tool", ["notes.*"]))
        assert listed.output == "no notes"  # nothing was added


async def test_the_owner_can_reach_an_mcp_tool_in_the_request_meta() -> None:
    server = notes_stdio(owner={"via": "meta", "name": "agentmesh/owner"})
    async with sources({"mcp_servers": [server]}) as s:
        [result] = results(await run(s, "use the notes.whoami tool", ["notes.*"], owner="hana"))
        assert result.output == "hana"


# ---- sources as operators see them ---------------------------------------------------------


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seconds instead of the production waits (10 s handshake, 5 s first retry)."""
    monkeypatch.setattr(tool_sources, "CONNECT_TIMEOUT_SECONDS", 0.5)
    monkeypatch.setattr(tool_sources, "RETRY_SECONDS", 0.2)
    monkeypatch.setattr(tool_sources, "REDISCOVER_TICK_SECONDS", 0.05)


async def eventually(check: Callable[[], bool], seconds: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "not within the time"
        await asyncio.sleep(0.05)


async def test_a_server_that_never_answers_the_handshake_is_failed_and_retried_in_the_background(
    quick_retries: None,
) -> None:
    silent = {
        "name": "silent",
        "transport": "stdio",
        "command": PYTHON,
        "args": ["-c", "import time; time.sleep(600)"],
    }
    async with sources({"mcp_servers": [silent]}) as s:
        [status] = s.statuses()
        assert status.name == "mcp:silent" and status.state is SourceState.FAILED
        assert status.last_error == "MCP server 'silent' did not answer in time"
        assert status.consecutive_failures == 1 and status.last_error_at is not None
        assert status.next_attempt_at is not None and status.next_attempt_at > status.last_error_at
        # Tried again without any run asking, each wait longer than the one before.
        await eventually(lambda: status.consecutive_failures >= 3)
        assert status.last_success_at is None and s.tools() == []


async def test_an_http_mcp_server_started_after_the_executor_is_found_without_any_run(
    quick_retries: None,
) -> None:
    port = free_port()
    late = {"name": "notes", "transport": "http", "url": f"http://127.0.0.1:{port}/mcp"}
    async with sources({"mcp_servers": [late]}) as s:
        [status] = s.statuses()
        assert status.state is SourceState.FAILED and s.tools() == []
        proc = subprocess.Popen(
            [PYTHON, "-m", "tests.tools.notes_mcp_server", "http", str(port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            await eventually(lambda: status.state is SourceState.CONNECTED, seconds=60)
            assert {t.name for t in s.tools()} >= {"notes.add_note", "notes.list_notes"}
            assert status.tool_count == len(s.tools()) and status.consecutive_failures == 0
            assert status.last_success_at is not None and status.next_attempt_at is None
        finally:
            proc.terminate()
            proc.wait(10)


async def test_an_http_tools_status_follows_its_last_call(http_tool_server: HttpToolServer) -> None:
    config = {
        "http_tools": [
            http_tool(f"{http_tool_server.url}/fail"),
            http_tool(f"http://127.0.0.1:{free_port()}/", name="crm.gone"),
        ]
    }
    async with sources(config) as s:
        assert [(x.name, x.state) for x in s.statuses()] == [
            ("http:crm.lookup_order", SourceState.PENDING),
            ("http:crm.gone", SourceState.PENDING),
        ]
        await run(s, "use the crm.lookup_order tool", ["crm.*"])
        await run(s, "use the crm.gone tool", ["crm.*"])
        answered, gone = s.statuses()
        # A 503 is the server answering: reachable, the error is the call's.
        assert answered.state is SourceState.CONNECTED and answered.last_success_at is not None
        assert gone.state is SourceState.FAILED and gone.last_error.startswith("unreachable")
        assert gone.next_attempt_at is None  # tried again at its next call


async def test_a_connected_server_that_goes_away_is_shown_failed_without_any_run(
    quick_retries: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33 item 8: a server that listed its tools is listed again on a schedule
    (RELIST_SECONDS), not only when runs happen, so its state follows the server."""
    monkeypatch.setattr(tool_sources, "RELIST_SECONDS", 0.3)
    port = free_port()
    proc = subprocess.Popen(
        [PYTHON, "-m", "tests.tools.notes_mcp_server", "http", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = {"name": "notes", "transport": "http", "url": f"http://127.0.0.1:{port}/mcp"}
    try:
        async with sources({"mcp_servers": [server]}, timeout=2) as s:
            [status] = s.statuses()
            await eventually(lambda: status.state is SourceState.CONNECTED, seconds=60)
            listed = status.last_success_at
            # Listed again while connected, with no run asking.
            await eventually(lambda: status.last_success_at != listed)
            proc.terminate()
            proc.wait(10)
            await eventually(lambda: status.state is SourceState.FAILED)
            assert status.last_error and status.last_error_at is not None
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)
