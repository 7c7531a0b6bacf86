"""Fixtures of the gateway tests: real gRPC peers on port 0, the gateway on uvicorn port 0."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from services.gateway.app import create_app
from services.gateway.auth import issue_token
from services.gateway.clients import Clients, open_clients
from shared.settings import Settings
from tests.conftest import USES_POSTGRES, drop_schemas, make_settings
from tests.gateway.peers import FakeHistory, FakeMemory, FakeOrchestrator, parts_for
from tests.grpc_helpers import running_service


@dataclass
class Peers:
    orchestrator: FakeOrchestrator
    history: FakeHistory
    memory: FakeMemory
    addrs: dict[str, str]


@asynccontextmanager
async def serve_app(app: FastAPI) -> AsyncIterator[str]:
    """The app on uvicorn (real HTTP) at 127.0.0.1:<free port>; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@pytest.fixture(scope="module")
async def base_settings(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Settings]:
    # One Settings per module: its gateway tables (quota overrides, usage, API keys) and
    # quota counters, dropped after it on PostgreSQL + Redis.
    prefix = f"g{uuid.uuid4().hex[:12]}_"
    yield make_settings(tmp_path_factory.mktemp("gateway"), prefix)
    if USES_POSTGRES:
        await drop_schemas(prefix)


@pytest.fixture(scope="module")
async def peers(base_settings: Settings) -> AsyncIterator[Peers]:
    """One set of peers per test module: tests use their own owners, threads and runs."""
    settings = base_settings
    fakes: dict[str, Any] = {
        "orchestrator": FakeOrchestrator(),
        "history": FakeHistory(),
        "memory": FakeMemory(),
        "scheduler": None,
    }
    async with AsyncExitStack() as stack:
        addrs = {}
        for name, servicer in fakes.items():

            async def build(_: Settings, name: str = name, servicer: Any = servicer) -> Any:
                return parts_for(name, servicer)

            addrs[name] = await stack.enter_async_context(running_service(name, build, settings))
        yield Peers(fakes["orchestrator"], fakes["history"], fakes["memory"], addrs)


def gateway_settings(settings: Settings, addrs: dict[str, str], **overrides: Any) -> Settings:
    values = {f"{name}_addr": addr for name, addr in addrs.items()}
    values.update({"rpc_timeout_seconds": 2.0, "run_timeout_seconds": 30.0})
    values.update(overrides)
    return settings.model_copy(update=values)


@asynccontextmanager
async def app_client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """A gateway of its own with `settings` (its own channels), and an HTTP client to it."""
    clients = open_clients(settings)
    try:
        async with (
            serve_app(create_app(settings, clients)) as url,
            httpx.AsyncClient(base_url=url, timeout=10) as http,
        ):
            yield http
    finally:
        await clients.close()


@pytest.fixture(scope="module")
def gw_settings(base_settings: Settings, peers: Peers) -> Settings:
    return gateway_settings(base_settings, peers.addrs)


@pytest.fixture(scope="module")
async def clients(gw_settings: Settings) -> AsyncIterator[Clients]:
    c = open_clients(gw_settings)
    yield c
    await c.close()


@pytest.fixture(scope="module")
async def base_url(gw_settings: Settings, clients: Clients) -> AsyncIterator[str]:
    async with serve_app(create_app(gw_settings, clients)) as url:
        yield url


@pytest.fixture(scope="module")
async def http(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        yield client


@pytest.fixture
def token(gw_settings: Settings) -> str:
    return issue_token(gw_settings, "alice")


@pytest.fixture
def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def bearer(settings: Settings, sub: str, *, admin: bool = False) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(settings, sub, admin=admin)}"}


def run_body(
    thread_id: str = "t-1",
    run_id: str = "r-1",
    text: str = "hi",
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "threadId": thread_id,
        "runId": run_id,
        "messages": [{"id": f"{run_id}-u", "role": "user", "content": text}],
    }
    body.update(extra)
    return body
