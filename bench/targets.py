"""The issue-24 targets, measured in one run on this machine (part of `make bench`):

- target `all`, embedded, against the peer (LangGraph dev server, bench/peer.py), the same
  load clients, alternating, a fresh server per cell: unloaded run (RUN_FINISHED) p50, idle
  RSS of the whole suite, runs/s at concurrency 32 as a ratio to the peer's thread runs (each
  stores its thread, as each agentmesh run does; the ratio to its stateless runs beside),
  first-event p99, server CPU per run;
- one process per service on PostgreSQL + Redis against the skeleton (bench/skeleton.py),
  alternating: runs/s at concurrency 32 as a ratio, CPU per run summed over every process
  (PostgreSQL and Redis included, bench/cpu.py);
- an open-loop run of target `all` (Poisson arrivals at 50% of its measured saturation):
  first-event p99 below saturation.

    python -m bench.targets [--duration 10] [--repeats 3] [--processes 2] [--no-peer]
                            [--no-split] [--out results]

Each figure is the median of --repeats cells, with min and max. Writes <out>/targets.json
and <out>/targets.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import peer
from bench.stats import median_of_runs
from services.launcher import free_port

# The load clients (bench.suite, bench.cpu, bench.skeleton) need aiohttp, the bench extra:
# imported where they are used, so the verdicts and the report import without it.

ROOT = Path(__file__).resolve().parent.parent

# The targets (issue 24): name -> (how the figure is compared, bound).
TARGETS: dict[str, tuple[str, float]] = {
    "all_unloaded_run_p50_ms": ("<=", 8.0),
    "all_idle_rss_mb": ("<=", 150.0),
    "all_c32_runs_per_s_vs_peer": (">=", 2.0),
    "all_c32_first_event_p99_ms": ("<=", 100.0),
    "split_c32_runs_per_s_vs_skeleton": (">=", 0.6),
    "split_cpu_ms_per_run": ("<=", 12.0),
    "open_loop_first_event_p99_ms": ("<=", 50.0),
}


def _rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return round(total / 1024, 1)


def _cpu_s(pids: list[int]) -> float:
    from bench import cpu

    total = 0.0
    for pid in pids:
        try:
            total += cpu.cpu_seconds(pid)
        except OSError:
            continue
    return total


def _cell(
    base: str, pids: Callable[[], list[int]], concurrency: int, args: argparse.Namespace, api: str
) -> dict[str, Any]:
    """One measurement on a fresh server: idle RSS, a warm-up, the load and its CPU."""
    from bench.suite import load

    time.sleep(1.0)
    rss = _rss_mb(pids())
    load(base, 8, 2, args.processes, api=api)  # warm-up
    before = _cpu_s(pids())
    result = load(base, concurrency, args.duration, args.processes, api=api)
    result["server_cpu_ms_per_run"] = round(
        (_cpu_s(pids()) - before) * 1000 / max(result["runs"], 1), 2
    )
    result["idle_rss_mb"] = rss
    return result


def agentmesh_cell(concurrency: int, args: argparse.Namespace) -> dict[str, Any]:
    from bench.suite import start_suite

    tmp = Path(tempfile.mkdtemp(prefix="bench-targets-"))
    suite = start_suite("embedded", tmp, f"t{uuid.uuid4().hex[:8]}_", shape="all")
    try:
        return _cell(
            suite.gateway_url,
            lambda: [p.pid for p in suite.procs.values()],
            concurrency,
            args,
            "agentmesh",
        )
    finally:
        suite.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def peer_cell(concurrency: int, args: argparse.Namespace, api: str) -> dict[str, Any]:
    server = peer.LangGraphServer(free_port())
    server.start()
    try:
        return _cell(server.url, server.pids, concurrency, args, api)
    finally:
        server.stop()


def _summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    def m(get: Callable[[dict[str, Any]], float]) -> dict[str, float]:
        return median_of_runs([float(get(c)) for c in cells])

    return {
        "runs_per_s": m(lambda c: c["runs_per_s"]),
        "first_event_p50_ms": m(lambda c: c["first_event"]["p50_ms"]),
        "first_event_p99_ms": m(lambda c: c["first_event"]["p99_ms"]),
        "run_finished_p50_ms": m(lambda c: c["run_finished"]["p50_ms"]),
        "run_finished_p99_ms": m(lambda c: c["run_finished"]["p99_ms"]),
        "server_cpu_ms_per_run": m(lambda c: c["server_cpu_ms_per_run"]),
        "idle_rss_mb": m(lambda c: c["idle_rss_mb"]),
        "errors": sum(c["errors"] for c in cells),
        "error_samples": [e for c in cells for e in c["error_samples"]][:3],
    }


def _ratios(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, float]:
    """Cell by cell (the same repeat: neighbours in time), then the median."""
    return median_of_runs(
        [a["runs_per_s"] / b["runs_per_s"] for a, b in zip(ours, theirs, strict=True)]
    )


def versus_peer(args: argparse.Namespace) -> dict[str, Any]:
    """agentmesh against the peer's thread runs ("peer", the like-for-like anchor: each run
    stores its thread, as each agentmesh run does), with the peer's stateless runs
    ("peer_stateless", lighter work) beside as a figure; the three alternate in order."""
    from bench.suite import LANGGRAPH, LANGGRAPH_THREADS

    peer_api = {"peer": LANGGRAPH_THREADS, "peer_stateless": LANGGRAPH}
    levels: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for repeat in range(args.repeats):
        for i, c in enumerate((1, 32)):
            cells = levels.setdefault(c, {"agentmesh": [], "peer": [], "peer_stateless": []})
            order = ["agentmesh", "peer", "peer_stateless"]
            shift = (repeat + i) % len(order)
            for who in order[shift:] + order[:shift]:
                if who != "agentmesh" and not args.peer:
                    continue
                if who == "agentmesh":
                    cell = agentmesh_cell(c, args)
                else:
                    cell = peer_cell(c, args, peer_api[who])
                cells[who].append(cell)
                print(
                    f"[targets] {who} c={c}: {cell['runs_per_s']} runs/s, first p99 "
                    f"{cell['first_event']['p99_ms']} ms, "
                    f"run p50 {cell['run_finished']['p50_ms']} ms",
                    flush=True,
                )
    out: dict[str, Any] = {}
    for c, cells in levels.items():
        out[str(c)] = {who: _summary(v) for who, v in cells.items() if v}
        if cells["peer"]:
            out[str(c)]["runs_per_s_ratio"] = _ratios(cells["agentmesh"], cells["peer"])
            out[str(c)]["runs_per_s_ratio_vs_stateless"] = _ratios(
                cells["agentmesh"], cells["peer_stateless"]
            )
    return out


def split_versus_skeleton(args: argparse.Namespace) -> dict[str, Any]:
    from bench import cpu, skeleton

    ours: list[dict[str, Any]] = []
    floor: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        for who in ("split", "skeleton") if repeat % 2 == 0 else ("skeleton", "split"):
            if who == "split":
                ours.append(cpu.measure("postgres", 32, args.duration, args.processes))
            else:
                floor.append(skeleton.measure([32], args.duration, args.processes)["runs"][0])
            last = (ours if who == "split" else floor)[-1]
            print(f"[targets] {who} c=32: {last['runs_per_s']} runs/s", flush=True)
    return {
        "split_runs_per_s": median_of_runs([o["runs_per_s"] for o in ours]),
        "skeleton_runs_per_s": median_of_runs([f["runs_per_s"] for f in floor]),
        "runs_per_s_ratio": _ratios(ours, floor),
        "cpu_ms_per_run": median_of_runs([o["suite_cpu_ms_per_run"] for o in ours]),
        "cpu_ms_per_run_by_process": {
            name: median_of_runs([o["cpu_ms_per_run"].get(name, 0.0) for o in ours])
            for name in ours[0]["cpu_ms_per_run"]
        },
    }


def open_loop_all(saturation: float, args: argparse.Namespace) -> dict[str, Any]:
    from bench.suite import load, open_loop, start_suite

    rate = saturation / 2
    samples = []
    for _ in range(args.repeats):
        tmp = Path(tempfile.mkdtemp(prefix="bench-open-"))
        suite = start_suite("embedded", tmp, f"o{uuid.uuid4().hex[:8]}_", shape="all")
        try:
            time.sleep(1.0)
            load(suite, 8, 2, args.processes)  # warm-up
            samples.append(open_loop(suite, rate, args.duration, args.processes))
        finally:
            suite.stop()
            shutil.rmtree(tmp, ignore_errors=True)
        print(
            f"[targets] open loop at {rate:.1f}/s: first p99 "
            f"{samples[-1]['first_event']['p99_ms']} ms",
            flush=True,
        )
    return {
        "rate_per_s": round(rate, 1),
        "first_event_p50_ms": median_of_runs([s["first_event"]["p50_ms"] for s in samples]),
        "first_event_p99_ms": median_of_runs([s["first_event"]["p99_ms"] for s in samples]),
        "run_finished_p99_ms": median_of_runs([s["run_finished"]["p99_ms"] for s in samples]),
        "errors": sum(s["errors"] for s in samples),
    }


def verdicts(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target's measured median (min, max), bound and whether it is met."""
    vp = results.get("versus_peer", {})
    figures: dict[str, dict[str, float] | None] = {
        "all_unloaded_run_p50_ms": vp.get("1", {}).get("agentmesh", {}).get("run_finished_p50_ms"),
        "all_idle_rss_mb": vp.get("1", {}).get("agentmesh", {}).get("idle_rss_mb"),
        "all_c32_runs_per_s_vs_peer": vp.get("32", {}).get("runs_per_s_ratio"),
        "all_c32_first_event_p99_ms": vp.get("32", {})
        .get("agentmesh", {})
        .get("first_event_p99_ms"),
        "split_c32_runs_per_s_vs_skeleton": results.get("split", {}).get("runs_per_s_ratio"),
        "split_cpu_ms_per_run": results.get("split", {}).get("cpu_ms_per_run"),
        "open_loop_first_event_p99_ms": results.get("open_loop", {}).get("first_event_p99_ms"),
    }
    out = {}
    for name, figure in figures.items():
        if figure is None:
            continue
        op, bound = TARGETS[name]
        met = figure["median"] <= bound if op == "<=" else figure["median"] >= bound
        out[name] = {**figure, "target": f"{op} {bound}", "met": met}
    return out


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| target | measured median (min-max) | bound | met |",
        "|---|---|---|---|",
    ]
    for name, v in results["verdicts"].items():
        lines.append(
            f"| {name} | {v['median']} ({v['min']}-{v['max']}) | {v['target']} "
            f"| {'yes' if v['met'] else 'no'} |"
        )
    vp = results.get("versus_peer", {})
    if vp:
        lines += [
            "",
            "| concurrency | server | runs/s | first event p50 / p99 (ms) "
            "| RUN_FINISHED p50 / p99 (ms) | server CPU ms per run | idle RSS MB |",
            "|---|---|---|---|---|---|---|",
        ]
        for c, by in vp.items():
            for who, name in _SERVERS.items():
                if who not in by:
                    continue
                s = by[who]
                lines.append(
                    f"| {c} | {name} | {s['runs_per_s']['median']} "
                    f"({s['runs_per_s']['min']}-{s['runs_per_s']['max']}) "
                    f"| {s['first_event_p50_ms']['median']} / {s['first_event_p99_ms']['median']} "
                    f"| {s['run_finished_p50_ms']['median']} / "
                    f"{s['run_finished_p99_ms']['median']} "
                    f"| {s['server_cpu_ms_per_run']['median']} | {s['idle_rss_mb']['median']} |"
                )
    return "\n".join(lines) + "\n"


_SERVERS = {
    "agentmesh": "agentmesh (target all, embedded)",
    "peer": "langgraph dev, thread runs",
    "peer_stateless": "langgraph dev, stateless runs",
}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    if args.peer and not peer.available():
        raise SystemExit("the peer's venv is missing: run `make bench-peer` (or pass --no-peer)")
    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    results["versus_peer"] = versus_peer(args)
    saturation = results["versus_peer"]["32"]["agentmesh"]["runs_per_s"]["median"]
    results["open_loop"] = open_loop_all(saturation, args)
    if args.split:
        results["split"] = split_versus_skeleton(args)
    results["verdicts"] = verdicts(results)
    return results


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.targets",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--processes", type=int, default=2, help="client processes")
    parser.add_argument("--no-peer", dest="peer", action="store_false")
    parser.add_argument("--no-split", dest="split", action="store_false")
    parser.add_argument("--out", default=str(ROOT / "results"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    results = measure(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "targets.json").write_text(json.dumps(results, indent=2))
    table = markdown(results)
    (out / "targets.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
