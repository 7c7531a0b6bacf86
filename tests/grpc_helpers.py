"""Run a service's real grpc.aio server on port 0 inside a test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc

from shared.server import Builder, GrpcServer
from shared.settings import Settings


@asynccontextmanager
async def running_service(name: str, build: Builder, settings: Settings) -> AsyncIterator[str]:
    """Start service `name` on 127.0.0.1:0; yields its address ("127.0.0.1:PORT")."""
    parts = await build(settings)
    server = GrpcServer(name, parts, grace_seconds=settings.grace_seconds)
    port = await server.start("127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop()


@asynccontextmanager
async def channel(address: str) -> AsyncIterator[grpc.aio.Channel]:
    ch = grpc.aio.insecure_channel(address)
    try:
        yield ch
    finally:
        await ch.close()


def owner_md(owner: str, *, admin: bool = False) -> tuple[tuple[str, str], ...]:
    from shared.identity import call_metadata

    return call_metadata(owner, admin=admin)
