"""A health probe for containers (no grpc_health_probe binary can be downloaded into the image).

    python -m services.probe HOST:PORT [SERVICE]   grpc.health.v1 Check ("" = the whole server)
    python -m services.probe --http URL             GET URL (the gateway's /healthz or /readyz)
    python -m services.probe --self                 this container's own service: $SERVICE names it,
                                                    the port is AGENTMESH_PORT or its default port

Exit 0 only when the answer is SERVING (gRPC) or a 2xx status (HTTP); otherwise exit 1 with a
one-line reason on stderr. Every check gives up after --timeout seconds.
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shared.settings import DEFAULT_PORTS, Settings

DEFAULT_TIMEOUT_SECONDS = 2.0


def _one_line(text: str) -> str:
    return " ".join(text.split())


def check_grpc(
    address: str, service: str = "", timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> str | None:
    """None when `service` at `address` answers SERVING; otherwise why not, in one line."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            # types-grpcio-health-checking declares HealthStub without its methods.
            reply = stub.Check(  # type: ignore[attr-defined]
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.RpcError as exc:
            code = exc.code()
            name = code.name if code is not None else "UNKNOWN"
            return _one_line(f"{address}: {name}: {exc.details() or 'no details'}")
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        return f"{address}: {service or 'server'} is {status}"
    return None


def check_http(url: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> str | None:
    """None when GET `url` answers 2xx; otherwise why not, in one line."""
    if not url.startswith(("http://", "https://")):
        return f"{url}: not an http(s) URL"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        return f"{url}: HTTP {exc.code}"
    except (OSError, http.client.HTTPException, ValueError) as exc:
        # URLError (refused, DNS), timeouts, a peer that is not speaking HTTP, a malformed URL.
        reason = getattr(exc, "reason", exc)
        return _one_line(f"{url}: {reason or type(exc).__name__}")
    if not 200 <= status < 300:
        return f"{url}: HTTP {status}"
    return None


def check_self(timeout: float = DEFAULT_TIMEOUT_SECONDS) -> str | None:
    """The container's own service, named by $SERVICE (the image's HEALTHCHECK uses this)."""
    service = os.environ.get("SERVICE", "")
    if service not in DEFAULT_PORTS:
        return f"SERVICE must name one of {', '.join(sorted(DEFAULT_PORTS))}, not {service!r}"
    try:
        port = Settings().listen_port(service)
    except ValueError as exc:  # pydantic's ValidationError: e.g. AGENTMESH_PORT=abc
        return _one_line(f"settings: {exc}")
    if service == "gateway":
        # Ready, not merely alive: compose starts nothing after an unready gateway anyway,
        # and `docker ps` then shows which peer is missing.
        return check_http(f"http://127.0.0.1:{port}/readyz", timeout)
    return check_grpc(f"127.0.0.1:{port}", "", timeout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.probe", description="Exit 0 when the target is SERVING."
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("address", nargs="?", help="HOST:PORT of a gRPC server")
    target.add_argument("--http", metavar="URL", help="an HTTP health URL (e.g. /readyz)")
    target.add_argument("--self", action="store_true", help="this container's $SERVICE")
    parser.add_argument("service", nargs="?", default="", help="gRPC service name ('' = server)")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_SECONDS, help="seconds (default 2)"
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.service and not args.address:
        parser.error("a gRPC service name goes with HOST:PORT only")
    if args.http:
        reason = check_http(args.http, args.timeout)
    elif args.self:
        reason = check_self(args.timeout)
    else:
        reason = check_grpc(args.address, args.service, args.timeout)
    if reason is not None:
        print(f"unhealthy: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
