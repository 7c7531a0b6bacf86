"""`python -m services.gateway` serves HTTP on settings.host:listen_port("gateway");
`python -m services.gateway token --sub ALICE [--admin] [--ttl SECONDS]` prints a
development bearer token signed with AGENTMESH_JWT_SECRET; `python -m services.gateway
migrate` only applies the migrations of the gateway's own tables (it also applies them when
it starts)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import socket
import sys
from collections.abc import Iterator
from typing import Any

import uvicorn

from services.gateway.auth import DEFAULT_TTL_SECONDS, issue_token
from shared import heap, logs
from shared.settings import Settings, get_settings


class _Server(uvicorn.Server):
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        # The app, its clients and every module exist now: out of the collector's walks.
        heap.freeze_start_up()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            try:
                yield
            finally:
                # uvicorn re-raises the captured SIGTERM/SIGINT after a graceful shutdown, so
                # the process would die by the signal; a clean shutdown exits 0 instead.
                self._captured_signals.clear()


class EmbeddedServer(uvicorn.Server):
    """The gateway inside a process of several targets (services/targets.py), which handles
    the signals itself and stops it with should_exit."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def uvicorn_config(app: Any, settings: Settings) -> uvicorn.Config:
    from services.gateway.protocol import http_protocol

    # uvloop is optional (not on every platform).
    loop = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.listen_port("gateway"),
        loop=loop,
        # A request the HTTP parser refuses gets the JSON error body too.
        http=http_protocol(),
        # SIGTERM/SIGINT: stop accepting, let open streams finish within the grace, then close.
        # uvicorn annotates an int, and waits with asyncio.wait_for: a float is kept as it is.
        timeout_graceful_shutdown=settings.grace_seconds,  # type: ignore[arg-type]
        log_config=None,
        access_log=False,
        proxy_headers=False,
    )


def _serve() -> None:
    from services.gateway.app import create_app

    settings = get_settings()
    logs.configure("gateway", settings.log_level)
    _Server(uvicorn_config(create_app(settings), settings)).run()


async def _migrate() -> None:
    from services.gateway.store import GatewayStore

    store = await GatewayStore.open(get_settings())
    await store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.gateway")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("serve", help="serve HTTP (the default)")
    sub.add_parser("migrate", help="apply the migrations of the gateway's tables, then exit")
    token = sub.add_parser("token", help="print a development bearer token")
    token.add_argument("--sub", required=True, help="the owner id (token subject)")
    token.add_argument("--admin", action="store_true", help="add the admin scope")
    token.add_argument("--ttl", type=int, default=DEFAULT_TTL_SECONDS, help="lifetime in seconds")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "token":
        try:
            print(issue_token(get_settings(), args.sub, admin=args.admin, ttl_seconds=args.ttl))
        except ValueError as exc:
            parser.error(str(exc))
        return
    if args.command == "migrate":
        asyncio.run(_migrate())
        return
    _serve()


if __name__ == "__main__":
    main()
