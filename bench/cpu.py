"""Where a chat run's CPU goes: each service's (and PostgreSQL's and Redis's) CPU time per
run under load, from /proc, while the same client processes as `make bench` drive it.

    python -m bench.cpu [--backends embedded,postgres] [--concurrency 32] [--duration 10]
                        [--out results]

Writes <out>/cpu-per-run.json and prints a markdown table. The load clients' own CPU is
reported apart: on a 2-core machine they share the cores with the suite.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.suite import load, start_suite

ROOT = Path(__file__).resolve().parent.parent
# Database and event-log servers, counted by process name (every process of that name).
SERVERS = ("postgres", "redis-server")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds so far of a process, all its threads (clock-tick resolution)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ServerSampler:
    """CPU of the server processes (every PostgreSQL backend, Redis) over a window. Backends
    come and go with pooled connections, so /proc is read every `interval`: a process that
    ends counts with its last reading, one that starts counts from zero."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.first: dict[int, tuple[str, float]] = {}
        self.last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self, initial: bool) -> None:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                name = (entry / "comm").read_text().strip()
                if name not in SERVERS:
                    continue
                seconds = cpu_seconds(pid)
            except OSError:
                continue  # gone meanwhile
            if pid not in self.first:
                self.first[pid] = (name, seconds if initial else 0.0)
            self.last[pid] = seconds

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._read(initial=False)

    def __enter__(self) -> ServerSampler:
        self._read(initial=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._read(initial=False)

    def seconds(self) -> dict[str, float]:
        out = dict.fromkeys(SERVERS, 0.0)
        for pid, (name, start) in self.first.items():
            out[name] += self.last[pid] - start
        return out


def measure(backend: str, concurrency: int, duration: float, processes: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-cpu-{backend}-"))
    prefix = f"benchcpu{uuid.uuid4().hex[:6]}_"
    suite = start_suite(backend, tmp, prefix)
    try:
        load(suite, concurrency, 2, processes)  # warm-up
        before = {name: cpu_seconds(p.pid) for name, p in suite.procs.items()}
        clients_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        with ServerSampler() as servers:
            result = load(suite, concurrency, duration, processes)
        after = {name: cpu_seconds(p.pid) for name, p in suite.procs.items()}
        clients_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if backend == "postgres":
            after.update(servers.seconds())
            before.update(dict.fromkeys(SERVERS, 0.0))
    finally:
        suite.stop()
        if backend == "postgres":
            import asyncio

            from tests.conftest import drop_schemas

            asyncio.run(drop_schemas(prefix))
        shutil.rmtree(tmp, ignore_errors=True)
    runs = max(result["runs"], 1)
    per_run = {
        name: round((after[name] - before[name]) / runs * 1000, 2)
        for name in before
        if after[name] - before[name] > 0
    }
    clients = (clients_after.ru_utime + clients_after.ru_stime) - (
        clients_before.ru_utime + clients_before.ru_stime
    )
    return {
        "backend": backend,
        "concurrency": concurrency,
        "runs": result["runs"],
        "runs_per_s": result["runs_per_s"],
        "cpu_ms_per_run": dict(sorted(per_run.items(), key=lambda kv: -kv[1])),
        "suite_cpu_ms_per_run": round(sum(per_run.values()), 2),
        "load_clients_cpu_ms_per_run": round(clients / runs * 1000, 2),
        # The same clients' CPU while they drive load: the part that competes with the suite
        # (the figure above also counts each client process's start and imports).
        "load_clients_cpu_ms_per_run_in_window": round(result["client_cpu_s"] / runs * 1000, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu")
    parser.add_argument("--backends", default="embedded,postgres")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--processes", type=int, default=2, help="client processes")
    parser.add_argument("--out", default=str(ROOT / "results"))
    args = parser.parse_args()
    results = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average_before": os.getloadavg(),
        "backends": [
            measure(b, args.concurrency, args.duration, args.processes)
            for b in args.backends.split(",")
        ],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu-per-run.json").write_text(json.dumps(results, indent=2) + "\n")
    for b in results["backends"]:
        print(
            f"{b['backend']} c={b['concurrency']}: {b['runs_per_s']} runs/s; CPU ms per run: "
            + ", ".join(f"{k} {v}" for k, v in b["cpu_ms_per_run"].items())
            + f"; suite {b['suite_cpu_ms_per_run']}, "
            + f"load clients {b['load_clients_cpu_ms_per_run']}"
            + f" ({b['load_clients_cpu_ms_per_run_in_window']} in the load window)"
        )


if __name__ == "__main__":
    main()
