"""Exit 0 when PostgreSQL and Redis of the test configuration answer, 1 otherwise."""

from __future__ import annotations

import os
import socket
import sys


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


if __name__ == "__main__":
    pg = reachable(os.environ.get("AGENTMESH_TEST_PG_HOST", "127.0.0.1"), 5432)
    rd = reachable(os.environ.get("AGENTMESH_TEST_REDIS_HOST", "127.0.0.1"), 6379)
    sys.exit(0 if pg and rd else 1)
