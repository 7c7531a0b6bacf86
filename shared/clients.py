"""gRPC client channels: round-robin over every address a name resolves to, keepalive,
retries (via service config) only for idempotent methods, and a deadline on every call.
While tracing is on (shared/telemetry.py) a channel also carries the trace context of every
call; a channel opened while tracing is off carries no interceptor at all."""

from __future__ import annotations

import json
from collections.abc import Sequence

import grpc

from shared import telemetry
from shared.server import KEEPALIVE_CLIENT_OPTIONS, MAX_MESSAGE_BYTES


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


def open_channel(address: str, *, idempotent_services: Sequence[str] = ()) -> grpc.aio.Channel:
    """A channel to `address` ("host:port" or "dns:///name:port").

    `idempotent_services` lists full service names whose every method may be retried on
    UNAVAILABLE; only services whose writes carry client-chosen ids qualify.
    """
    target = address if "://" in address or address.startswith("dns:") else f"dns:///{address}"
    return grpc.aio.insecure_channel(
        target,
        interceptors=telemetry.client_interceptors() if telemetry.enabled() else None,
        options=[
            ("grpc.service_config", _service_config(idempotent_services)),
            ("grpc.enable_retries", 1),
            *KEEPALIVE_CLIENT_OPTIONS,
            # A peer that was down (starting, restarting) is tried again within 0.1 s, and
            # never more than 5 s apart (gRPC's defaults: 1 s, growing to 120 s), so calls
            # do not keep failing fast for minutes after it came back.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 5_000),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
    )
