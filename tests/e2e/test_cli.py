"""The `agentmesh` command against the real suite: readable output by default, `--json` for
scripts, errors as the API gave them, and the documented exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Callable, Iterator

import jwt
import pytest

from agentmesh_client import Client
from agentmesh_client.cli import (
    EXIT_AUTH,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from services.launcher import ROOT, Suite, free_port
from tests.e2e.client_helpers import chat, private_suite
from tests.e2e.conftest import SECRET, token

pytestmark = pytest.mark.e2e

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def owner() -> str:
    return f"term-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def agentmesh(suite: Suite, owner: str) -> Run:
    """`agentmesh ARGS...` as the owner (AGENTMESH_URL / AGENTMESH_TOKEN), its output captured."""

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        values = {
            **os.environ,
            "AGENTMESH_URL": suite.gateway_url,
            "AGENTMESH_TOKEN": token(owner),
            "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'protos'}",
            **env,
        }
        return subprocess.run(
            [sys.executable, "-m", "agentmesh_client", *args],
            capture_output=True, text=True, env=values, timeout=120, cwd="/",
        )  # fmt: skip

    return run


def test_run_streams_text_to_stdout_and_steps_to_stderr(agentmesh: Run) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    done = agentmesh("run", "Hello from a terminal", "--thread", thread)
    assert done.returncode == EXIT_OK, done.stderr
    assert done.stdout == 'You said: "Hello from a terminal". This is turn 1 of our conversation.\n'
    err = done.stderr.splitlines()
    assert err[:4] == ["[router] started", err[1], "[worker] started", err[3]], err
    assert err[1].startswith("[router] done in ") and err[1].endswith(" ms")
    assert err[-2].startswith("[run] success in ") and "tokens " in err[-2]
    assert err[-1].startswith("[run] run-") and err[-1].endswith(f"on thread {thread}")

    history = agentmesh("history", thread)
    assert history.returncode == EXIT_OK
    lines = history.stdout.splitlines()
    assert lines[0].endswith("user: Hello from a terminal") and "assistant: You said" in lines[1]
    threads = agentmesh("threads")
    assert thread in threads.stdout and threads.stdout.startswith("THREAD")


def test_json_output_is_the_api_answer(agentmesh: Run) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    done = agentmesh(
        "run", 'use the memory_search tool with {"query": "x"}', "--thread", thread, "--json"
    )
    assert done.returncode == EXIT_OK, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
    assert any(e["type"] == "TOOL_CALL_RESULT" and e["content"] == "[]" for e in events)
    assert done.stderr == ""
    listed = json.loads(agentmesh("--json", "threads").stdout)
    assert thread in [t["id"] for t in listed["threads"]]
    history = json.loads(agentmesh("history", thread, "--json").stdout)
    assert [m["role"] for m in history["messages"]] == ["user", "assistant", "tool", "assistant"]


def test_jobs_create_trigger_and_runs(agentmesh: Run, suite: Suite, owner: str) -> None:
    with Client(suite.gateway_url, token(owner)) as am:
        chat(am, f"t-{uuid.uuid4().hex[:8]}", "I love oolong")
    created = agentmesh(
        "jobs", "create", "--title", "Tea facts", "--daily", "08:30", "--timezone", "Europe/London",
        "--prompt", "Find durable facts", "--tool", "memory_write", "--json",
    )  # fmt: skip
    assert created.returncode == EXIT_OK, created.stderr
    job = json.loads(created.stdout)
    assert (job["schedule"], job["timezone"]) == (
        {"type": "daily", "localTime": "08:30"},
        "Europe/London",
    )
    listed = agentmesh("jobs", "list")
    assert "Tea facts" in listed.stdout and "Europe/London" in listed.stdout
    triggered = agentmesh("jobs", "trigger", job["id"], "--wait", "60")
    assert triggered.returncode == EXIT_OK, triggered.stdout + triggered.stderr
    assert "succeeded" in triggered.stdout and "manual" in triggered.stdout
    runs = json.loads(agentmesh("jobs", "runs", job["id"], "--json").stdout)["runs"]
    assert [(r["state"], r["attempt"]) for r in runs] == [("succeeded", 1)]
    memories = agentmesh("memories", "list")
    assert "oolong" in memories.stdout and runs[0]["runId"] in memories.stdout
    [memory] = json.loads(agentmesh("memories", "list", "--query", "oolong", "--json").stdout)[
        "memories"
    ]
    edited = agentmesh("memories", "edit", memory["id"], "--content", "User loves sencha",
                       "--kind", "preference", "--version", str(memory["version"]))  # fmt: skip
    assert edited.returncode == EXIT_OK, edited.stderr
    assert edited.stdout == (
        f"{memory['id']}: version {memory['version'] + 1}, preference: User loves sencha\n"
    )
    stale = agentmesh("memories", "edit", memory["id"], "--content", "User loves matcha",
                      "--version", str(memory["version"]))  # fmt: skip
    assert stale.returncode == EXIT_FAILED and "ABORTED" in stale.stderr, stale.stderr
    assert agentmesh("memories", "edit", memory["id"]).returncode == EXIT_USAGE
    with Client(suite.gateway_url, token(owner)) as am:
        assert am.get_memory(memory["id"]).content == "User loves sencha"
    assert agentmesh("memories", "forget", memory["id"]).returncode == EXIT_OK
    assert json.loads(agentmesh("memories", "list", "--json").stdout)["memories"] == []
    paused = agentmesh("jobs", "pause", job["id"])
    assert "status    paused" in paused.stdout


def test_a_refused_request_prints_the_api_error_and_exits_1(agentmesh: Run) -> None:
    done = agentmesh(
        "jobs", "create", "--title", "x", "--daily", "25:00", "--prompt", "p",
    )  # fmt: skip
    assert done.returncode == EXIT_FAILED
    assert done.stderr.startswith("error: 400 INVALID_ARGUMENT: schedule.localTime:")
    assert "[schedule.localTime: " in done.stderr and "request id: " in done.stderr
    refused = agentmesh("run", "hi", "--thread", "automation:nope", "--json")
    assert refused.returncode == EXIT_FAILED
    body = json.loads(refused.stderr)
    assert (body["status"], body["error"]["reason"]) == (409, "AUTOMATION_THREAD")


def test_a_refused_token_exits_4(agentmesh: Run) -> None:
    done = agentmesh("threads", AGENTMESH_TOKEN="not-a-token")
    assert done.returncode == EXIT_AUTH
    assert "401 UNAUTHENTICATED" in done.stderr
    missing = agentmesh("threads", AGENTMESH_TOKEN="")
    assert missing.returncode == EXIT_AUTH and "no token" in missing.stderr
    admin_only = agentmesh("audit", "--owner", "x")
    assert admin_only.returncode == EXIT_AUTH and "403 PERMISSION_DENIED" in admin_only.stderr


def test_health_says_ready_and_an_unreachable_gateway_exits_3(agentmesh: Run) -> None:
    done = agentmesh("health")
    assert done.returncode == EXIT_OK
    assert done.stdout == "gateway: ok\nservices: ready\n"
    nowhere = agentmesh("threads", "--url", f"http://127.0.0.1:{free_port()}")
    assert nowhere.returncode == EXIT_UNREACHABLE
    assert "cannot reach the gateway" in nowhere.stderr


def test_bad_usage_exits_2(agentmesh: Run) -> None:
    assert agentmesh("jobs", "create", "--daily", "08:00").returncode == EXIT_USAGE
    assert agentmesh("nonsense").returncode == EXIT_USAGE
    assert agentmesh("token", "--sub", "no spaces allowed").returncode == EXIT_USAGE


def test_token_prints_a_development_token_the_gateway_accepts(agentmesh: Run, suite: Suite) -> None:
    done = agentmesh("token", "--sub", "bob", "--admin", AGENTMESH_JWT_SECRET=SECRET)
    assert done.returncode == EXIT_OK
    printed = done.stdout.strip()
    claims = jwt.decode(printed, SECRET, algorithms=["HS256"])
    assert (claims["sub"], claims["scope"]) == ("bob", "admin")
    assert agentmesh("threads", AGENTMESH_TOKEN=printed).returncode == EXIT_OK


def test_make_install_installs_the_agentmesh_command() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["agentmesh"] == "agentmesh_client.cli:entry"
    assert "agentmesh_client" in project["tool"]["setuptools"]["packages"]
    from agentmesh_client.cli import entry

    assert callable(entry)


@pytest.fixture(scope="module")
def slow_suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    """A suite whose scripted model takes 0.05 s a token: a run lasts long enough to stop."""
    slow = {"AGENTMESH_SCRIPTED_TOKEN_LATENCY": "0.05"}
    with private_suite(tmp_path_factory.mktemp("slow"), **slow) as suite:
        yield suite


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_a_run_cancels_it(slow_suite: Suite, owner: str) -> None:
    env = {
        **os.environ,
        "AGENTMESH_URL": slow_suite.gateway_url,
        "AGENTMESH_TOKEN": token(owner),
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'protos'}",
    }
    thread = f"t-{uuid.uuid4().hex[:8]}"
    command = ["run", " ".join(["word"] * 200), "--thread", thread]
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentmesh_client", *command],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        # As at a terminal: a test run started in the background (a shell without job
        # control) ignores SIGINT, and a Python started so keeps ignoring it.
        preexec_fn=_default_sigint,
    )  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.read(8)  # the reply has started streaming
    assert first
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "cancelled: state cancelled" in err
    with Client(slow_suite.gateway_url, token(owner)) as am:
        [run_id] = {m.run_id for m in am.history(thread).messages}
        assert am.get_run(run_id or "").state == "cancelled"


def test_runs_register_and_audit(agentmesh: Run, suite: Suite, owner: str) -> None:
    with Client(suite.gateway_url, token(owner)) as am:
        run_id = chat(am, f"t-{uuid.uuid4().hex[:8]}", "Hi")
    shown = agentmesh("runs", "get", run_id)
    assert shown.returncode == EXIT_OK
    fields = dict(line.split(None, 1) for line in shown.stdout.splitlines() if " " in line)
    assert (fields["state"], fields["profile"], fields["router"]) == (
        "succeeded",
        "chat_default",
        "on",
    )
    events = agentmesh("runs", "events", run_id, "--json")
    assert json.loads(events.stdout.splitlines()[-1])["type"] == "RUN_FINISHED"
    reg = json.loads(agentmesh("register", "--timezone", "Europe/Berlin", "--json").stdout)
    assert reg["ownerId"] == owner and reg["jobs"][0]["timezone"] == "Europe/Berlin"
    audit = agentmesh("audit", "--owner", owner, AGENTMESH_TOKEN=token("auditor", admin=True))
    assert audit.returncode == EXIT_OK
    assert "user: Hi" in audit.stdout and "assistant: You said" in audit.stdout
