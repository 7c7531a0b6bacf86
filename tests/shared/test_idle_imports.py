"""An idle process of target all, embedded, with no outside tools, webhooks, embeddings or
network model configured, holds none of the libraries only those features use (issue 24:
its idle RSS). Each is imported where its feature starts; this keeps a top-level import
from coming back unnoticed. Started in a child process: this one has imported them all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from services.launcher import free_port
from shared.settings import GRPC_SERVICES

ROOT = Path(__file__).resolve().parents[2]

# Library -> the feature that imports it.
FEATURE_ONLY = {
    "mcp": "outside tools (AGENTMESH_TOOLS_FILE)",
    "httpx2": "outside tools (an MCP server over HTTP)",
    "redis": "the Redis event log and quota store",
    "numpy": "embeddings (SQLite vector search, the embedder)",
    "httpx": "webhooks, embeddings, an openai model card",
    "httpcore": "webhooks, embeddings, an openai model card",
    "snowballstemmer": "the first memory written or searched",
}

_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from services import targets
    from shared.settings import get_settings

    async def main():
        host = targets.Host(targets.ALL_TARGETS, get_settings())
        await host.start()
        try:
            loaded = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))
        finally:
            await host.stop()
        print(json.dumps(loaded))

    asyncio.run(main())
    """
)


def test_idle_target_all_imports_no_feature_only_library(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTMESH_")}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "protos")]),
            "AGENTMESH_DATA_DIR": str(tmp_path / "data"),
            "AGENTMESH_JWT_SECRET": "idle-imports-test-secret-0123456789",
            "AGENTMESH_DATABASE_URL": "",
            "AGENTMESH_EVENT_LOG_URL": "memory://",
            "AGENTMESH_LOG_LEVEL": "WARNING",
            "AGENTMESH_PORT": str(free_port()),
            **{f"AGENTMESH_{n.upper()}_ADDR": f"127.0.0.1:{free_port()}" for n in GRPC_SERVICES},
        }
    )
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *FEATURE_ONLY],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == [], {name: FEATURE_ONLY[name] for name in loaded}
