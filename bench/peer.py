"""The peer of `make bench`: LangGraph's dev server (`langgraph dev`, in-memory runtime)
serving a two-node graph (router -> worker, a scripted reply: bench/peer_graph/), in its own
venv (.venv-peer, `make bench-peer`; never the suite's venv).

Its environment makes no outbound calls: no LangSmith tracing or API key, no CLI analytics,
no license key (so no metadata loop), no browser, no reload watcher. Its logs are at WARNING,
as the suite's are in the bench.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PEER_VENV = ROOT / ".venv-peer"
GRAPH_DIR = Path(__file__).resolve().parent / "peer_graph"

# The environment variables of the peer that would reach out to a network service.
_OUTBOUND = ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY", "LANGGRAPH_CLOUD_LICENSE_KEY",
             "LANGSMITH_CONTROL_PLANE_API_KEY", "OTEL_EXPORTER_OTLP_ENDPOINT",
             "HTTP_PROXY", "HTTPS_PROXY")  # fmt: skip


def available(venv: Path = PEER_VENV) -> bool:
    return (venv / "bin" / "langgraph").is_file()


def peer_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _OUTBOUND}
    env.update(
        {
            "LANGSMITH_TRACING": "false",
            "LANGCHAIN_TRACING_V2": "false",
            "LANGSMITH_TRACING_V2": "false",
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "OTEL_SDK_DISABLED": "true",
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("PYTHONPATH", None)
    return env


class LangGraphServer:
    """One fresh `langgraph dev` on 127.0.0.1:`port`, in a scratch folder of its own (its
    in-memory runtime persists there)."""

    def __init__(self, port: int, *, venv: Path = PEER_VENV, log_path: Path | None = None):
        self.port = port
        self.venv = venv
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.workdir: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> None:
        if not available(self.venv):
            raise RuntimeError(f"{self.venv}/bin/langgraph is missing (run `make bench-peer`)")
        self.workdir = Path(tempfile.mkdtemp(prefix="bench-peer-"))
        for name in ("graph.py", "langgraph.json"):
            shutil.copy(GRAPH_DIR / name, self.workdir / name)
        log = open(self.log_path, "ab") if self.log_path else None  # the child keeps its copy
        try:
            self.proc = subprocess.Popen(
                [str(self.venv / "bin" / "langgraph"), "dev", "--config", "langgraph.json",
                 "--host", "127.0.0.1", "--port", str(self.port), "--no-browser", "--no-reload"],
                cwd=self.workdir,
                env=peer_env(),
                stdout=log or subprocess.DEVNULL,
                stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        finally:
            if log is not None:
                log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"langgraph dev exited with code {self.proc.returncode}")
            try:
                if httpx.get(f"{self.url}/ok", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("langgraph dev did not become ready in time")
            time.sleep(0.2)

    def pids(self) -> list[int]:
        """The server's process and its descendants (whatever it spawned)."""
        if self.proc is None:
            return []
        found = [self.proc.pid]
        for pid in found:
            try:
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                continue
            found.extend(int(c) for c in children)
        return found

    def stop(self, grace: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
