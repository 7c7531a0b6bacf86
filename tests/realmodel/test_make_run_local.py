"""`make run MODEL=local PORT=... MODEL_PORT=...` as make runs it: the launcher with the
gateway's port in PORT of its environment (make exports a command line's variables into the
recipe's), the local model server on its own port, and a chat run answered by the model."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from services.launcher import ROOT, free_port, free_ports, port_in_use
from tests.e2e.conftest import parse_sse, run_body
from tests.realmodel.conftest import assert_well_formed, new_id, streamed_text

pytestmark = pytest.mark.realmodel


def test_make_run_model_local_with_port_set_serves_the_gateway_and_the_model_on_their_ports(
    tmp_path: Path,
) -> None:
    gateway, model = free_port(), free_port()
    base = free_ports(6)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTMESH_")}
    env.update(
        AGENTMESH_DATA_DIR=str(tmp_path),
        PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'protos'}",
        # What make puts in the recipe's environment for `make run PORT=...`.
        PORT=str(gateway),
        MODEL_PORT=str(model),
        MODEL="local",
    )
    command = [
        sys.executable, "-m", "services.launcher",
        "--port", str(gateway), "--grpc-port-base", str(base),
        "--model", "local", "--model-port", str(model),
    ]  # fmt: skip
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        for line in proc.stdout:
            lines.append(line.decode())
            if "token:" in lines[-1] or proc.poll() is not None:
                break
        out = "".join(lines)
        assert "agentmesh is running" in out, out
        assert f"model:     smollm2-local at http://127.0.0.1:{model}/v1" in out, out
        models = httpx.get(f"http://127.0.0.1:{model}/v1/models", timeout=5)
        assert models.status_code == 200 and models.json()["data"], models.text
        assert httpx.get(f"http://127.0.0.1:{gateway}/readyz", timeout=5).status_code == 200
        token = lines[-1].split("token:", 1)[1].strip()
        resp = httpx.post(
            f"http://127.0.0.1:{gateway}/api/v1/agent/runs",
            json=run_body(new_id("t"), new_id("r"), "Say hello in one short sentence."),
            headers={"Authorization": f"Bearer {token}"},
            timeout=300,
        )
        assert resp.status_code == 200, resp.text
        events = parse_sse(resp.content)
        assert_well_formed(events)
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
        assert streamed_text(events).strip()
    finally:
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 0, out
    assert not port_in_use(model) and not port_in_use(gateway), out
