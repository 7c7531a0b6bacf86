"""What both ends of a gRPC connection agree on: the message size limit and keepalive. Read
by the server bootstrap (shared/server.py), the client channels (shared/clients.py) and the
in-process channel (shared/inproc.py), none of which needs another to know them."""

from __future__ import annotations

# Large enough for a context of many messages; the gateway bounds client input well below.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
MAX_CONNECTION_AGE_MS = 5 * 60 * 1000
MAX_CONNECTION_AGE_GRACE_MS = 10 * 60 * 1000

# Keepalive, both ends from one period so they cannot disagree: every client channel pings
# its server after KEEPALIVE_TIME_MS without traffic (a dead peer is then found in seconds,
# not at the next call), also while no call is open. A gRPC server counts a ping that comes
# sooner than its min_ping_interval_without_data_ms (default 5 min), or with no call open
# unless it permits that, as a strike, and after max_ping_strikes answers GOAWAY
# too_many_pings: the next call on that connection failed. So the servers accept pings at
# half the clients' period (room for timer jitter) and keep gRPC's strike allowance
# against clients that ping faster than that.
KEEPALIVE_TIME_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 10_000
KEEPALIVE_CLIENT_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    # gRPC's default (2) stops a client's pings after two without data: 0 keeps pinging.
    ("grpc.http2.max_pings_without_data", 0),
)
KEEPALIVE_SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_TIME_MS // 2),
    ("grpc.http2.max_ping_strikes", 2),
)
