"""Tools from outside the executor: MCP servers (stdio and streamable HTTP, through the
official `mcp` SDK) and plain HTTP tools, as configured in AGENTMESH_TOOLS_FILE
(shared.tool_config).

Each is a Tool (services.executor.tools) named `<server>.<tool>`, its input schema offered
to the model. Every call is bounded in time (the source's timeout_seconds, else the
executor's tool timeout) and in result size (max_result_chars: a longer result is cut and
says so). A server that is down, slow or answers with an error gives the model an error
result (ToolError); the run goes on.

An MCP server's session is opened once and reused by every call; a transport failure drops
it, and the next call (or the background rediscovery) opens a new one. The session lives in
a task of its own (the SDK's transports are anyio context managers, entered and left in one
task); close() ends them all on shutdown.

Each source keeps a SourceStatus (connected, failed with its last error and when, when it is
tried again) that ListTools reports, so an operator sees a server that never answers; a
background task lists again, on a schedule, the servers that failed (backing off) and the
ones that answered (their tools may change), whether or not runs happen.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

import httpx
import httpx2
import mcp_types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from services.executor.tools import SourceState, SourceStatus, ToolContext, ToolError
from shared.tool_config import (
    NAMESPACE_RE,
    HttpToolConfig,
    McpServerConfig,
    OwnerPassing,
    ToolsConfig,
)
from shared.tools import matches

log = logging.getLogger("agentmesh.executor.tool_sources")

# How long opening an MCP session (spawn or connect, then initialize) may take.
CONNECT_TIMEOUT_SECONDS = 10.0
# A server whose tools could not be listed is tried again after this, doubling while it
# keeps failing, up to MAX_RETRY_SECONDS.
RETRY_SECONDS = 5.0
MAX_RETRY_SECONDS = 60.0
# A server that listed its tools lists them again this often (its tools may change).
RELIST_SECONDS = 60.0
# How often the background rediscovery looks for sources that are due.
REDISCOVER_TICK_SECONDS = 1.0


def bounded(text: str, max_chars: int) -> str:
    """A result within max_chars; a cut one says how much was left out."""
    if len(text) <= max_chars:
        return text
    cut = len(text) - max_chars
    return f"{text[:max_chars]}\n[result truncated: {cut} more characters]"


def with_owner(
    arguments: Mapping[str, Any], owner: OwnerPassing, context: ToolContext
) -> dict[str, Any]:
    """The call's arguments, with the owner id in them when the source takes it so (a value
    the model supplied under that name is replaced: the model never chooses the owner)."""
    out = dict(arguments)
    if owner.via == "argument":
        out[owner.name] = context.owner
    return out


def offered_schema(schema: Mapping[str, Any], owner: OwnerPassing) -> dict[str, Any]:
    """The schema the model sees: without the owner argument, which the executor fills."""
    out = dict(schema)
    if owner.via == "argument" and isinstance(out.get("properties"), dict):
        out["properties"] = {k: v for k, v in out["properties"].items() if k != owner.name}
        if isinstance(out.get("required"), list):
            out["required"] = [r for r in out["required"] if r != owner.name]
    return out


def _result_text(result: mcp_types.CallToolResult) -> str:
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        else:
            mime = getattr(block, "mime_type", "") or ""
            parts.append(f"[{block.type} {mime}]".replace(" ]", "]"))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


class McpServer:
    """One configured MCP server: its session (opened on demand, reused, reopened after a
    failure) and the tools it listed."""

    def __init__(self, config: McpServerConfig, default_timeout: float) -> None:
        self.config = config
        self.timeout = config.timeout_seconds or default_timeout
        self.tools: dict[str, McpTool] = {}
        self._session: ClientSession | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._listed_at = 0.0
        self._retry_after = 0.0
        self._listing: asyncio.Task[None] | None = None
        self._closed = False
        self.status = SourceStatus(f"mcp:{config.name}")

    # -- the session --

    async def session(self) -> ClientSession:
        async with self._lock:
            if self._closed:
                raise ToolError(f"MCP server {self.config.name!r} is shut down")
            if self._session is not None and self._holder is not None and not self._holder.done():
                return self._session
            await self._drop()
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[ClientSession] = loop.create_future()
            self._stop = asyncio.Event()
            self._holder = asyncio.create_task(self._hold(ready, self._stop))
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                    self._session = await asyncio.shield(ready)
            except TimeoutError:
                # Its holder fails it once dropped; nobody awaits it any more.
                ready.add_done_callback(lambda f: f.cancelled() or f.exception())
                await self._drop()
                raise ToolError(f"MCP server {self.config.name!r} did not answer in time") from None
            except Exception as exc:
                await self._drop()
                self._warn("mcp: cannot open a session", exc)
                raise ToolError(f"MCP server {self.config.name!r} is unavailable") from None
            return self._session

    async def _hold(self, ready: asyncio.Future[ClientSession], stop: asyncio.Event) -> None:
        """Own the transport and the session from open to close, in this one task."""
        try:
            async with AsyncExitStack() as stack:
                cfg = self.config
                if cfg.transport == "stdio":
                    params = StdioServerParameters(
                        command=cfg.command, args=cfg.args, env=cfg.env or None, cwd=cfg.cwd
                    )
                    read, write = await stack.enter_async_context(stdio_client(params))
                else:
                    client = await stack.enter_async_context(
                        httpx2.AsyncClient(headers=cfg.headers, timeout=self.timeout)
                    )
                    read, write = await stack.enter_async_context(
                        streamable_http_client(cfg.url, http_client=client)
                    )
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                if not ready.done():
                    ready.set_result(session)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(
                    exc if isinstance(exc, Exception) else ConnectionError("closed")
                )
            if not isinstance(exc, Exception):
                raise
            self._warn("mcp: session ended", exc)

    async def _drop(self) -> None:
        """End the current session (if any) and wait for its task."""
        self._session = None
        holder, self._holder = self._holder, None
        if holder is None:
            return
        self._stop.set()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                await asyncio.shield(holder)
        except (TimeoutError, Exception):
            holder.cancel()

    def _warn(self, what: str, exc: BaseException) -> None:
        log.warning(what, extra={"fields": {"server": self.config.name, "error": repr(exc)[:300]}})

    async def broken(self) -> None:
        async with self._lock:
            await self._drop()

    async def close(self) -> None:
        if self._listing is not None:
            self._listing.cancel()
        async with self._lock:
            self._closed = True
            await self._drop()

    # -- the tools --

    async def list_tools(self) -> None:
        """(Re)list the server's tools; on failure keep what was listed before."""
        self._listed_at = time.monotonic()
        try:
            session = await self.session()
            listed: list[mcp_types.Tool] = []
            cursor: str | None = None
            async with asyncio.timeout(self.timeout):
                while True:
                    params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    page = await session.list_tools(params=params)
                    listed.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
        except (ToolError, TimeoutError, MCPError, OSError) as exc:
            self._warn("mcp: cannot list tools", exc)
            if not isinstance(exc, ToolError | MCPError):
                await self.broken()
            self._failed(_listing_error(exc))
            return
        self.tools = {t.name: McpTool(self, t) for t in listed if _valid_tool_name(t.name)}
        self.status.succeeded(len(self.tools))

    def _failed(self, error: str) -> None:
        """Records a failed attempt; the server is tried again after its backoff."""
        delay = self.status.failed(
            error, retry_seconds=RETRY_SECONDS, max_retry_seconds=MAX_RETRY_SECONDS
        )
        self._retry_after = time.monotonic() + delay

    def due(self) -> bool:
        """Whether the tools should be listed again: a failed server once its backoff has
        passed, one that answered every RELIST_SECONDS; never while a listing runs."""
        if self._closed or (self._listing is not None and not self._listing.done()):
            return False
        now = time.monotonic()
        if self.status.state is SourceState.CONNECTED:
            return now - self._listed_at >= RELIST_SECONDS
        return now >= self._retry_after

    def relist(self) -> asyncio.Task[None]:
        """List the tools again in a task of its own (at most one at a time)."""
        self._listing = asyncio.create_task(self.list_tools())
        return self._listing

    async def call(self, name: str, arguments: dict[str, Any], context: ToolContext) -> str:
        owner = self.config.owner
        meta: Any = {owner.name: context.owner} if owner.via == "meta" else None
        session = await self.session()
        try:
            async with asyncio.timeout(self.timeout):
                result = await session.call_tool(
                    name, with_owner(arguments, owner, context), meta=meta
                )
        except TimeoutError:
            raise ToolError(f"MCP server {self.config.name!r} did not answer in time") from None
        except MCPError as exc:
            if exc.code != mcp_types.CONNECTION_CLOSED:
                raise ToolError(
                    f"MCP server {self.config.name!r} refused the call: {exc}"
                ) from None
            await self.broken()
            self._failed("closed the connection during a call")
            raise ToolError(f"MCP server {self.config.name!r} closed the connection") from None
        except Exception as exc:
            # The transport failed: the next call opens a new session.
            await self.broken()
            self._warn("mcp: call failed", exc)
            self._failed(f"a call failed: {type(exc).__name__}")
            raise ToolError(f"MCP server {self.config.name!r} is unavailable") from None
        text = bounded(_result_text(result), self.config.max_result_chars)
        if result.is_error:
            raise ToolError(text or "the tool reported an error")
        return text


def _listing_error(exc: BaseException) -> str:
    """A failed listing as its status says it: what went wrong, never a call's data."""
    if isinstance(exc, ToolError):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return "did not list its tools in time"
    if isinstance(exc, MCPError):
        return f"refused to list its tools: {exc}"
    return f"connection failed: {exc}"


def _valid_tool_name(name: str) -> bool:
    """An MCP tool's own name must fit the namespaced rule (shared.tool_config)."""
    return bool(NAMESPACE_RE.match(name))


class McpTool:
    """One tool of an MCP server, as the executor offers and runs it."""

    def __init__(self, server: McpServer, tool: mcp_types.Tool) -> None:
        cfg = server.config
        self.server = server
        self.remote_name = tool.name
        self.name = f"{cfg.name}.{tool.name}"
        self.description = tool.description or ""
        self.parameters: Mapping[str, Any] = offered_schema(tool.input_schema, cfg.owner)
        self.timeout_seconds = server.timeout
        approval = cfg.requires_approval
        self.requires_approval = (
            approval if isinstance(approval, bool) else matches(approval, self.name)
        )
        self.source = f"mcp:{cfg.name}"

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        return await self.server.call(self.remote_name, dict(arguments), context)


class HttpTool:
    """A plain HTTP tool: the arguments are POSTed (or PUT) as JSON to its URL; a 2xx
    answer's body is the result, anything else an error result."""

    def __init__(
        self, config: HttpToolConfig, default_timeout: float, client: httpx.AsyncClient
    ) -> None:
        self.config = config
        self.name = config.name
        self.description = config.description
        self.parameters: Mapping[str, Any] = offered_schema(config.parameters, config.owner)
        self.timeout_seconds = config.timeout_seconds or default_timeout
        self.requires_approval = config.requires_approval
        self.source = "http"
        self._client = client
        self.status = SourceStatus(f"http:{config.name}")

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        cfg = self.config
        headers = dict(cfg.headers)
        if cfg.owner.via == "header":
            headers[cfg.owner.name] = context.owner
        try:
            response = await self._client.request(
                cfg.method,
                cfg.url,
                json=with_owner(arguments, cfg.owner, context),
                headers=headers,
                timeout=self.timeout_seconds,
            )
        except httpx.TimeoutException:
            self.status.failed("did not answer in time")
            raise ToolError("the tool did not answer in time") from None
        except httpx.HTTPError as exc:
            log.warning(
                "http tool: unreachable",
                extra={"fields": {"tool": self.name, "error": repr(exc)[:300]}},
            )
            self.status.failed(f"unreachable: {type(exc).__name__}")
            raise ToolError("the tool's server is unavailable") from None
        # Any answer, an error status included, is the server answering.
        self.status.succeeded(1)
        text = bounded(response.text, cfg.max_result_chars)
        if response.status_code >= 400:
            raise ToolError(f"the tool answered HTTP {response.status_code}: {bounded(text, 500)}")
        return text


class ToolSources:
    """Every outside source of one executor: started with it, closed with it."""

    def __init__(self, config: ToolsConfig, default_timeout: float) -> None:
        self._http = httpx.AsyncClient()
        self.servers = [McpServer(s, default_timeout) for s in config.mcp_servers]
        self.http_tools = [HttpTool(t, default_timeout, self._http) for t in config.http_tools]
        self._rediscovery: asyncio.Task[None] | None = None

    def tools(self) -> Sequence[McpTool | HttpTool]:
        return [*self.http_tools, *(t for s in self.servers for t in s.tools.values())]

    def statuses(self) -> list[SourceStatus]:
        """Every configured source's state, MCP servers first, in configuration order."""
        return [*(s.status for s in self.servers), *(t.status for t in self.http_tools)]

    async def start(self) -> None:
        """List every MCP server's tools (a server down now is tried again later), then
        keep rediscovering in the background."""
        await asyncio.gather(*(s.list_tools() for s in self.servers))
        if self.servers:
            self._rediscovery = asyncio.create_task(self._rediscover_forever())

    async def _rediscover_forever(self) -> None:
        while True:
            await asyncio.sleep(REDISCOVER_TICK_SECONDS)
            self.refresh()

    def refresh(self) -> None:
        """In the background, list again the servers that are due (never blocks a step:
        their tools appear for the steps after)."""
        for server in self.servers:
            if server.due():
                server.relist()

    async def close(self) -> None:
        if self._rediscovery is not None:
            self._rediscovery.cancel()
        await asyncio.gather(*(s.close() for s in self.servers), return_exceptions=True)
        await self._http.aclose()
