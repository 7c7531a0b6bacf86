"""gRPC client channels: round-robin over every address a name resolves to, keepalive,
retries (via service config) only for idempotent methods, and a deadline on every call.
While tracing is on (shared/telemetry.py) a channel also carries the trace context of every
call; a channel opened while tracing is off carries no interceptor at all.

A peer hosted by this very process (`--target`, shared/inproc.py) is reached in process
instead: same stubs, metadata, deadlines, statuses and server interceptors, no socket."""

from __future__ import annotations

import json
from collections.abc import Sequence

import grpc

from shared import inproc, telemetry
from shared.transport import KEEPALIVE_CLIENT_OPTIONS, MAX_MESSAGE_BYTES

# The longest pause between two connection attempts to a peer that is down (+-20% jitter).
RECONNECT_BACKOFF_MS = 250
# The longest one connection attempt may take.
CONNECT_TIMEOUT_MS = 2_000
# How long an idempotent call whose peer could not be reached waits for its channel to
# connect again before it fails (the backoff, its jitter and one connection, with margin):
# a call made while the peer is coming back goes to it instead of failing. Longer would
# ride out more of a restart, but delay every error while a peer is down for good.
RECONNECT_WAIT_SECONDS = 1.0


def _service_config(idempotent_services: Sequence[str]) -> str:
    config: dict[str, object] = {"loadBalancingConfig": [{"round_robin": {}}]}
    if idempotent_services:
        config["methodConfig"] = [
            {
                "name": [{"service": s} for s in idempotent_services],
                "retryPolicy": {
                    "maxAttempts": 3,
                    "initialBackoff": "0.05s",
                    "maxBackoff": "0.5s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    return json.dumps(config)


def open_channel(
    address: str, *, idempotent_services: Sequence[str] = (), peer: str = ""
) -> grpc.aio.Channel:
    """A channel to `address` ("host:port" or "dns:///name:port"), or in process to the
    service `peer` when this process hosts it.

    `idempotent_services` lists full service names whose every method may be retried on
    UNAVAILABLE; only services whose writes carry client-chosen ids qualify (in process
    nothing is retried: an UNAVAILABLE there is the peer's own answer, not a lost packet).
    """
    if peer and inproc.hosted(peer):
        # Duck-typed: it has the multi-callables the generated stubs open, not the whole
        # surface of grpc.aio.Channel.
        return inproc.InProcessChannel(peer)  # type: ignore[return-value]
    target = address if "://" in address or address.startswith("dns:") else f"dns:///{address}"
    return grpc.aio.insecure_channel(
        target,
        interceptors=telemetry.client_interceptors() if telemetry.enabled() else None,
        options=[
            ("grpc.service_config", _service_config(idempotent_services)),
            ("grpc.enable_retries", 1),
            *KEEPALIVE_CLIENT_OPTIONS,
            # A peer that is down (restarting) is tried again every 0.1 s at first, then
            # never more than RECONNECT_BACKOFF_MS apart (gRPC's defaults: 1 s growing to
            # 120 s; 5 s here before), so a restarted peer is used again within ~0.3 s of
            # listening, not after a backoff grown while it was down (issue 17: 1.6-3.2 s).
            # A refused connection costs the peer nothing; the floor of each is 100 ms.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
            # Despite its name, gRPC core's minimum time one connection attempt may take
            # (the default 20 s); at 100 ms a slow handshake under load was cut off.
            ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
    )
