"""The real services of one run in-process (history, memory, router, executor, orchestrator on
port 0), the gateway app over httpx's ASGI transport, and a JSON-lines log capture."""

from __future__ import annotations

import io
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass

import httpx

from services.executor.service import build as build_executor
from services.gateway.app import create_app
from services.gateway.auth import issue_token
from services.gateway.clients import Clients, open_clients
from services.history.service import build as build_history
from services.memory.service import build as build_memory
from services.orchestrator.service import build as build_orchestrator
from services.router.service import build as build_router
from shared import logs
from shared.settings import Settings
from tests.grpc_helpers import running_service


@dataclass
class Suite:
    addrs: dict[str, str]
    settings: Settings  # with every *_addr pointing at the running services


@asynccontextmanager
async def running_suite(settings: Settings) -> AsyncIterator[Suite]:
    """history, memory, router, executor, then the orchestrator that calls them."""
    async with AsyncExitStack() as stack:
        addrs: dict[str, str] = {}
        for name, build in (("history", build_history), ("memory", build_memory)):
            addrs[name] = await stack.enter_async_context(running_service(name, build, settings))
        peers = settings.model_copy(update={f"{n}_addr": a for n, a in addrs.items()})
        for name, build in (("router", build_router), ("executor", build_executor)):
            addrs[name] = await stack.enter_async_context(running_service(name, build, peers))
        peers = settings.model_copy(update={f"{n}_addr": a for n, a in addrs.items()})
        addrs["orchestrator"] = await stack.enter_async_context(
            running_service("orchestrator", build_orchestrator, peers)
        )
        yield Suite(addrs, settings.model_copy(update={f"{n}_addr": a for n, a in addrs.items()}))


@asynccontextmanager
async def gateway(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway app on its own channels to `settings`' services, over the ASGI transport."""
    clients: Clients = open_clients(settings)
    try:
        app = create_app(settings, clients)
        transport = httpx.ASGITransport(app=app)
        # The ASGI transport runs no lifespan: run it here (it opens the gateway's store).
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://gateway") as http,
        ):
            yield http
    finally:
        await clients.close()


def bearer(settings: Settings, owner: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(settings, owner)}"}


def run_body(thread_id: str, run_id: str, text: str) -> dict[str, object]:
    return {
        "threadId": thread_id,
        "runId": run_id,
        "messages": [{"id": f"{run_id}-u", "role": "user", "content": text}],
    }


@contextmanager
def json_log_lines(level: str = "DEBUG", *, contents: bool = False) -> Iterator[io.StringIO]:
    """Configure logging as a service does (shared.logs.configure) and collect every JSON
    line it writes; restores the previous logging set-up afterwards."""
    root = logging.getLogger()
    saved_handlers = root.handlers[:]
    saved_level = root.level
    saved_levels = {name: logging.getLogger(name).level for name in logs.LIBRARY_LOGGERS}
    buffer = io.StringIO()
    try:
        logs.configure("test", level, contents=contents)
        handler = logging.StreamHandler(buffer)
        handler.setFormatter(logs.JsonFormatter("test"))
        root.addHandler(handler)
        yield buffer
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        for name, value in saved_levels.items():
            logging.getLogger(name).setLevel(value)
        logs.set_contents_enabled(False)
