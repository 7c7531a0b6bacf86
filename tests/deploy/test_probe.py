"""services.probe: the containers' health check, against real servers."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc

from services import probe
from services.launcher import free_port
from shared.server import GrpcServer, ServiceParts

ROOT = Path(__file__).resolve().parents[2]
_SERVICE = "agentmesh.test.Probed"


def _parts() -> ServiceParts:
    async def call(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return b"ok"

    def register(server: grpc.aio.Server) -> None:
        handler = grpc.method_handlers_generic_handler(
            _SERVICE, {"Call": grpc.unary_unary_rpc_method_handler(call)}
        )
        server.add_generic_rpc_handlers((handler,))

    return ServiceParts(register=register, service_names=[_SERVICE])


@asynccontextmanager
async def _grpc_server() -> AsyncIterator[tuple[GrpcServer, str]]:
    server = GrpcServer("probed", _parts(), grace_seconds=0.5)
    port = await server.start("127.0.0.1", 0)
    try:
        yield server, f"127.0.0.1:{port}"
    finally:
        await server.stop()


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = {"/healthz": 200, "/readyz": 503}.get(self.path, 404)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _http_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def _run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    full_env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'protos'}", **(env or {})}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.probe",
        *args,
        cwd=ROOT,
        env=full_env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert out == b""
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_serving_server_passes_for_the_server_and_each_service() -> None:
    async with _grpc_server() as (_, address):
        assert await asyncio.to_thread(probe.check_grpc, address) is None
        assert await asyncio.to_thread(probe.check_grpc, address, _SERVICE) is None


async def test_draining_server_fails_as_not_serving() -> None:
    async with _grpc_server() as (server, address):
        # The first step of GrpcServer.stop(): what the probe sees during the drain grace.
        await server.health.enter_graceful_shutdown()
        reason = await asyncio.to_thread(probe.check_grpc, address)
    assert reason == f"{address}: server is NOT_SERVING"


async def test_stopped_server_fails_as_unavailable() -> None:
    async with _grpc_server() as (_, address):
        pass
    reason = await asyncio.to_thread(probe.check_grpc, address)
    assert reason is not None and reason.startswith(f"{address}: UNAVAILABLE")


async def test_unknown_service_name_fails_as_not_found() -> None:
    async with _grpc_server() as (_, address):
        reason = await asyncio.to_thread(probe.check_grpc, address, "agentmesh.nope.v1.Nope")
    assert reason is not None and reason.startswith(f"{address}: NOT_FOUND")


async def test_silent_peer_fails_within_the_timeout() -> None:
    # Accepts TCP connections (kernel backlog) but never speaks HTTP/2.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        reason = await asyncio.to_thread(probe.check_grpc, address, "", 0.5)
        elapsed = time.monotonic() - started
    assert reason is not None and reason.startswith(f"{address}: DEADLINE_EXCEEDED")
    assert elapsed < 2.0


async def test_cli_exits_zero_silently_when_serving() -> None:
    async with _grpc_server() as (_, address):
        code, err = await _run_cli(address, _SERVICE)
    assert (code, err) == (0, "")


async def test_cli_exits_nonzero_with_one_line_reason_when_unreachable() -> None:
    address = f"127.0.0.1:{free_port()}"
    code, err = await _run_cli(address, "--timeout", "1")
    assert code == 1
    assert err.startswith(f"unhealthy: {address}: UNAVAILABLE")
    assert err.count("\n") == 1


async def test_self_probes_the_service_named_by_the_environment() -> None:
    async with _grpc_server() as (_, address):
        port = address.rsplit(":", 1)[1]
        code, err = await _run_cli("--self", env={"SERVICE": "history", "AGENTMESH_PORT": port})
    assert (code, err) == (0, "")


async def test_self_without_a_known_service_fails_with_the_reason() -> None:
    code, err = await _run_cli("--self", env={"SERVICE": ""})
    assert code == 1
    assert "SERVICE must name one of" in err


async def test_http_probe_passes_on_2xx_and_fails_on_other_status() -> None:
    with _http_server() as base:
        assert await asyncio.to_thread(probe.check_http, f"{base}/healthz") is None
        reason = await asyncio.to_thread(probe.check_http, f"{base}/readyz")
    assert reason == f"{base}/readyz: HTTP 503"


async def test_http_probe_fails_when_unreachable() -> None:
    url = f"http://127.0.0.1:{free_port()}/healthz"
    code, err = await _run_cli("--http", url, "--timeout", "1")
    assert code == 1
    assert err.startswith(f"unhealthy: {url}: ") and err.count("\n") == 1
