"""The launcher's port picking: the e2e fixtures start several suites in one test run, each
service on its own free port; `make run PORT=... GRPC_PORT_BASE=... MODEL_PORT=...` moves the
suite and the local model server. A process that exits while starting says why (its log's
last lines); the local model server gets a clean environment of its own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from services.launcher import (
    ALL_SERVICES,
    LOCAL_MODEL_PORT,
    ROOT,
    LocalModelServer,
    Suite,
    _arguments,
    free_port,
    free_ports,
    launch_ports,
    port_in_use,
)
from shared.settings import DEFAULT_PORTS


def test_free_port_never_hands_out_a_port_twice() -> None:
    # The OS offers a closed probe's port again (about 7% of 2,000 probes here): two services
    # given one port would collide when the second starts.
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)


def test_free_port_hands_out_no_port_an_outgoing_connection_may_take() -> None:
    # The kernel takes the source port of every outgoing connection (to PostgreSQL, to Redis,
    # between services, of any process on the machine) from its ephemeral range: a port handed
    # out from it can be taken before the service it was handed to binds it.
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = [free_port() for _ in range(50)]
    assert [p for p in ports if low <= p <= high] == []


def test_free_port_hands_another_process_none_of_the_ports_this_one_holds() -> None:
    # Another test run on the machine (a second pass, another checkout) asks for ports while
    # this one's are handed out but not yet bound.
    mine = {free_port() for _ in range(500)}
    theirs = subprocess.run(
        [sys.executable, "-c", "from services.launcher import free_port\n"
         "print(*(free_port() for _ in range(500)))"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'protos'}"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()  # fmt: skip
    assert len(set(theirs)) == 500
    assert mine.isdisjoint(int(p) for p in theirs)


def test_free_ports_are_consecutive_and_free() -> None:
    first = free_ports(6)
    assert first == list(range(first[0], first[0] + 6))
    assert not any(port_in_use(p) for p in first)
    assert set(first).isdisjoint(free_ports(6))


def test_make_run_ports_default_to_the_documented_ones() -> None:
    assert launch_ports() == DEFAULT_PORTS


def test_make_run_moves_the_gateway_and_the_grpc_services_as_asked() -> None:
    ports = launch_ports(gateway=9080, grpc_base=51051)
    assert ports == {
        "gateway": 9080,
        "orchestrator": 51051,
        "router": 51052,
        "executor": 51053,
        "memory": 51054,
        "history": 51055,
        "scheduler": 51056,
    }
    assert launch_ports(gateway=9080)["orchestrator"] == 50051


@pytest.mark.parametrize(
    ("gateway", "grpc_base", "option"),
    [
        (0, None, "--port"),
        (70000, None, "--port"),
        (None, 65533, "--grpc-port-base"),
        (50053, None, "--port"),
        (None, 8078, "--port"),
    ],
)
def test_make_run_refuses_ports_out_of_range_or_shared(
    gateway: int | None, grpc_base: int | None, option: str
) -> None:
    with pytest.raises(ValueError, match=option):
        launch_ports(gateway, grpc_base)


def test_the_embedding_port_may_not_be_one_of_the_suites(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        _arguments(["--embedding-port", str(DEFAULT_PORTS["memory"])])
    assert "--embedding-port: 50054 is the memory's port" in capsys.readouterr().err
    assert _arguments([]).embedding_port == 50058
    assert _arguments(["--no-embedding"]).embedding_port is None


@pytest.mark.parametrize("embedding", [True, False], ids=["default", "no-embedding"])
def test_the_launcher_serves_the_gateway_and_the_services_on_the_ports_given(
    tmp_path: Path, embedding: bool
) -> None:
    """By default with the local embedding model beside the suite, on its own port, and
    memory search hybrid (as /readyz says); --no-embedding: lexical-only, degraded."""
    gateway, base, embedding_port = free_port(), free_ports(6)[0], free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTMESH_")}
    env.update(AGENTMESH_DATA_DIR=str(tmp_path), PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'protos'}")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.launcher",
            "--port",
            str(gateway),
            "--grpc-port-base",
            str(base),
            *(["--embedding-port", str(embedding_port)] if embedding else ["--no-embedding"]),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line.decode())
            if "console:" in lines[-1] or proc.poll() is not None:
                break
        assert any("agentmesh is running" in line for line in lines), "".join(lines)
        ready = httpx.get(f"http://127.0.0.1:{gateway}/readyz", timeout=5)
        assert ready.status_code == 200
        search = ready.json()["memorySearch"]
        if embedding:
            # The memory service checks its model within its first health probe.
            deadline = time.monotonic() + 10
            while search["mode"] != "hybrid" and time.monotonic() < deadline:
                time.sleep(0.2)
                search = httpx.get(f"http://127.0.0.1:{gateway}/readyz", timeout=5).json()
                search = search["memorySearch"]
            assert search == {"status": "ready", "mode": "hybrid"}
            assert port_in_use(embedding_port)
        else:
            assert (search["status"], search["mode"]) == ("degraded", "lexical")
            assert not port_in_use(embedding_port)
        # The console's link signs in the development user: its page, and its token's fragment.
        url = lines[-1].split("console:", 1)[1].strip()
        page, _, fragment = url.partition("#token=")
        assert page == f"http://127.0.0.1:{gateway}/"
        assert httpx.get(page, timeout=5).headers["content-type"].startswith("text/html")
        threads = httpx.get(
            f"{page}api/v1/agent/threads",
            headers={"Authorization": f"Bearer {fragment}"},
            timeout=5,
        )
        assert threads.status_code == 200, threads.text
        # The development user is registered: its daily memory job exists from the start.
        jobs = httpx.get(
            f"{page}api/v1/automation/jobs",
            headers={"Authorization": f"Bearer {fragment}"},
            timeout=5,
        )
        assert jobs.status_code == 200, jobs.text
        assert [j["executionProfile"]["name"] for j in jobs.json()["jobs"]] == [
            "automation_memory_default"
        ]
        assert all(port_in_use(base + i) for i in range(6))
        assert not port_in_use(DEFAULT_PORTS["gateway"]) or DEFAULT_PORTS["gateway"] == gateway
    finally:
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 0, out
    assert not port_in_use(embedding_port), "the embedding model outlived the launcher"


def test_the_launcher_starts_the_embedding_model_again_when_it_dies() -> None:
    """make run's loop: memory search is lexical-only while the model is gone, hybrid again
    once it is back, without restarting the suite."""
    from services.launcher import supervise_embedding
    from services.memory.embedding_server import LocalEmbeddingServer

    server = LocalEmbeddingServer()
    server.start()
    try:
        assert supervise_embedding(server)  # alive: left alone
        first = server.proc
        server.kill()
        assert not server.is_ready()
        assert supervise_embedding(server)
        assert server.proc is not first and server.is_ready()
        # Its port taken meanwhile: it cannot start; the launcher is told, to try later.
        server.kill()
        with socket.socket() as squatter:
            squatter.bind(("127.0.0.1", server.port))
            squatter.listen()
            assert not supervise_embedding(server)
    finally:
        server.stop()


# ---- why a process exited while starting; the local model server's environment and port -------


def test_a_service_that_exits_while_starting_says_why(tmp_path: Path) -> None:
    suite = Suite(
        ports={name: free_port() for name in ALL_SERVICES},
        env={"AGENTMESH_DATA_DIR": str(tmp_path), "AGENTMESH_DATABASE_POOL_SIZE": "0"},
        log_dir=tmp_path / "logs",
        services=("history",),
    )
    try:
        with pytest.raises(RuntimeError) as err:
            suite.start(timeout=60)
    finally:
        suite.stop()
    message = str(err.value)
    assert message.startswith("history exited with code 1 while starting")
    # Its log's last lines: the setting and what is wrong with it, and where the rest is.
    assert "database_pool_size" in message and "greater than or equal to 1" in message
    assert str(tmp_path / "logs" / "history.log") in message


# A stand-in for llama-cpp-python's server: like it (llama_cpp/server/__main__.py), it binds
# the port of the environment's PORT before its --port, and it answers /v1/models with the
# names of the environment variables it was given. Or, with --fail, it exits as a server
# whose model cannot be loaded does.
_STAND_IN = """
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
if sys.argv[2] == "--fail":
    print("ValueError: Model path does not exist: /nowhere.gguf", flush=True)
    sys.exit(1)
class Models(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [], "env": sorted(os.environ)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
port = int(os.getenv("PORT", sys.argv[1]))
HTTPServer((os.getenv("HOST", "127.0.0.1"), port), Models).serve_forever()
"""


class StandInServer(LocalModelServer):
    def __init__(self, port: int, log_path: Path, *, fail: bool = False) -> None:
        super().__init__(port, log_path=log_path)
        self.fail = fail

    def command(self) -> list[str]:
        return [sys.executable, "-c", _STAND_IN, str(self.port), "--fail" if self.fail else "-"]


def test_the_local_model_server_listens_on_its_own_port_whatever_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What `make run MODEL=local PORT=18400` gives the launcher: make exports PORT (the
    # gateway's) into the recipe's environment, and llama-cpp-python's server reads PORT,
    # HOST, CONFIG_FILE and every setting's name (MODEL, N_CTX, API_KEY, ...) from it.
    gateway = free_port()
    for name, value in {
        "PORT": str(gateway),
        "HOST": "0.0.0.0",
        "API_KEY": "secret",
        "N_CTX": "64",
        "CONFIG_FILE": "/nowhere.json",
        "AGENTMESH_DATABASE_URL": "postgresql://u:p@db/agentmesh",
    }.items():
        monkeypatch.setenv(name, value)
    server = StandInServer(free_port(), tmp_path / "model-server.log")
    try:
        server.start(timeout=20)
        assert not port_in_use(gateway)
        given = set(httpx.get(f"{server.base_url}/models", timeout=5).json()["env"])
    finally:
        server.stop()
    assert not given & {"PORT", "HOST", "API_KEY", "N_CTX", "CONFIG_FILE", "PYTHONPATH"}
    assert not any(name.startswith("AGENTMESH_") for name in given)
    assert "PATH" in given


def test_the_local_model_server_that_exits_while_starting_says_why(tmp_path: Path) -> None:
    server = StandInServer(free_port(), tmp_path / "model-server.log", fail=True)
    with pytest.raises(RuntimeError) as err:
        server.start(timeout=20)
    message = str(err.value)
    assert message.startswith("the model server exited with code 1 while starting")
    assert "Model path does not exist" in message and str(server.log_path) in message


def test_make_run_takes_the_local_model_server_s_port() -> None:
    assert _arguments(["--model", "local"]).model_port == LOCAL_MODEL_PORT
    assert _arguments(["--model", "local", "--model-port", "18457"]).model_port == 18457
    # Without the local model its port is nobody's: the gateway may have it.
    assert _arguments(["--port", str(LOCAL_MODEL_PORT)]).ports["gateway"] == LOCAL_MODEL_PORT


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["--model-port", "0"], "--model-port: 0 is not a port"),
        (["--model-port", "70000"], "--model-port: 70000 is not a port"),
        (["--port", "9080", "--model-port", "9080"], "--model-port: 9080 is the gateway's port"),
        (["--model-port", "50053"], "--model-port: 50053 is the executor's port"),
        (["--port", "50057"], "--model-port: 50057 is the gateway's port"),
    ],
)
def test_make_run_refuses_a_model_port_out_of_range_or_taken(
    argv: list[str], why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        _arguments(["--model", "local", *argv])
    assert why in capsys.readouterr().err
