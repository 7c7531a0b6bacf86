"""`make bench`: the suite's throughput, latency and memory, next to the machine's floor.

    python -m bench [--backends embedded,postgres] [--concurrency 1,8,32,128] [--duration 10]
                    [--repeats 3] [--processes 2] [--long-words 10000] [--memory-runs 20000]
                    [--history] [--scheduler] [--profile] [--breakdown] [--no-shedding]
                    [--out results]

Each number is the median of --repeats runs, with min and max. Writes results/bench-<time>.json,
results/latest.md (the table for docs/performance.md) and results/latest.png (latency
percentiles and throughput against concurrency).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import floor, shedding, skeleton
from bench.stats import median_of_runs
from bench.suite import load, long_stream, rss_mb, start_suite

ROOT = Path(__file__).resolve().parent.parent


def machine() -> dict[str, Any]:
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def _median_metric(samples: list[dict[str, Any]], path: tuple[str, ...]) -> dict[str, float]:
    values = []
    for s in samples:
        v: Any = s
        for key in path:
            v = v[key]
        values.append(float(v))
    return median_of_runs(values)


def level(concurrency: int, samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians (min, max) of repeated loads (bench.suite.load) at one concurrency."""
    result = {
        "concurrency": concurrency,
        "runs_per_s": _median_metric(samples, ("runs_per_s",)),
        "first_event_p50_ms": _median_metric(samples, ("first_event", "p50_ms")),
        "first_event_p99_ms": _median_metric(samples, ("first_event", "p99_ms")),
        "run_finished_p50_ms": _median_metric(samples, ("run_finished", "p50_ms")),
        "run_finished_p99_ms": _median_metric(samples, ("run_finished", "p99_ms")),
        "errors": sum(s["errors"] for s in samples),
        "error_samples": [e for s in samples for e in s["error_samples"]][:3],
    }
    if "suite_cpu_ms_per_run" in samples[0]:
        result["cpu_ms_per_run"] = _median_metric(samples, ("suite_cpu_ms_per_run",))
        result["cpu_ms_per_run_by_process"] = {
            name: _median_metric(samples, ("cpu_ms_per_run", name))
            for name in samples[0]["cpu_ms_per_run"]
        }
    return result


def skeleton_median(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The pipeline's own floor (bench/skeleton.py) at c=1 and c=32, --repeats times."""
    runs = [
        skeleton.measure([1, 32], args.duration, args.processes)["runs"]
        for _ in range(args.repeats)
    ]
    return [level(c, [r[i] for r in runs]) for i, c in enumerate((1, 32))]


def skeleton_lines(results: dict[str, Any]) -> list[str]:
    """The skeleton's table (absent from results written before it was measured)."""
    if "skeleton" not in results:
        return []
    lines = [
        "",
        "Skeleton: the suite's five processes and its calls and messages with nothing inside "
        "(canned bytes; no database, event log, protobuf, interceptors or authentication; "
        "`python -m bench.skeleton`), driven by the same clients: the ceiling of this "
        "architecture on this machine.",
        "",
        "| concurrency | runs/s | first event p50 / p99 (ms) | RUN_FINISHED p50 / p99 (ms) "
        "| CPU ms per run, all 5 processes | by process |",
        "|---|---|---|---|---|---|",
    ]
    for lv in results["skeleton"]:
        rps = lv["runs_per_s"]
        by_process = ", ".join(
            f"{name} {cpu['median']}" for name, cpu in lv["cpu_ms_per_run_by_process"].items()
        )
        lines.append(
            f"| {lv['concurrency']} | {rps['median']} ({rps['min']}–{rps['max']}) "
            f"| {lv['first_event_p50_ms']['median']} / {lv['first_event_p99_ms']['median']} "
            f"| {lv['run_finished_p50_ms']['median']} / {lv['run_finished_p99_ms']['median']} "
            f"| {lv['cpu_ms_per_run']['median']} | {by_process} |"
        )
    return lines


def targets_lines(results: dict[str, Any]) -> list[str]:
    """The issue-24 targets (bench/targets.py), when measured."""
    if "targets" not in results:
        return []
    from bench import targets

    return [
        "",
        "Targets (issue 24): target `all` (every service in one process) against the peer, "
        "LangGraph's dev server (in-memory, a two-node scripted graph, bench/peer.py), the same "
        "clients, alternating, a fresh server per cell; one process per service on PostgreSQL "
        "+ Redis against the skeleton; an open-loop run at 50% of target all's saturation.",
        "",
        *targets.markdown(results["targets"]).splitlines(),
    ]


def profile_orchestrator(suite: Any, out_dir: Path, seconds: int, processes: int) -> str | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        return None
    target = out_dir / "orchestrator-profile.svg"
    proc = subprocess.Popen(
        [
            spy,
            "record",
            "-p",
            str(suite.procs["orchestrator"].pid),
            "-d",
            str(seconds),
            "-o",
            str(target),
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    load(suite, 32, seconds, processes)
    proc.wait(timeout=seconds + 30)
    return str(target) if target.exists() else None


def bench_backend(backend: str, args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-{backend}-"))
    prefix = f"bench{uuid.uuid4().hex[:8]}_"
    suite = start_suite(backend, tmp, prefix)
    result: dict[str, Any] = {"backend": backend}
    try:
        time.sleep(1.0)
        result["rss_idle_mb"] = rss_mb(suite)
        load(suite, 8, 2, args.processes)  # warm-up
        levels = []
        for c in args.concurrency:
            samples = [load(suite, c, args.duration, args.processes) for _ in range(args.repeats)]
            levels.append(level(c, samples))
            print(f"[{backend}] c={c}: {levels[-1]['runs_per_s']['median']} runs/s", flush=True)
        result["levels"] = levels
        streams = [long_stream(suite, args.long_words) for _ in range(args.repeats)]
        result["long_stream"] = {
            "words": args.long_words,
            "events_per_s": median_of_runs([s["events_per_s"] for s in streams]),
            "events": streams[0]["events"],
        }
        print(
            f"[{backend}] long stream: {result['long_stream']['events_per_s']['median']} events/s",
            flush=True,
        )
        if args.memory_runs:
            before = rss_mb(suite)
            done = 0
            started = time.perf_counter()
            while done < args.memory_runs:
                r = load(suite, 32, 10, args.processes)
                done += r["runs"]
            after = rss_mb(suite)
            result["rss_growth"] = {
                "runs": done,
                "seconds": round(time.perf_counter() - started, 1),
                "before_mb": before,
                "after_mb": after,
                "growth_pct": {
                    n: round((after[n] - before[n]) / before[n] * 100, 1) for n in before
                },
            }
            print(
                f"[{backend}] rss growth after {done} runs: {result['rss_growth']['growth_pct']}",
                flush=True,
            )
        if args.profile:
            result["profile"] = profile_orchestrator(suite, out_dir, 15, args.processes)
    finally:
        suite.stop()
        if backend == "postgres":
            from tests.conftest import drop_schemas

            asyncio.run(drop_schemas(prefix))
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def floor_median(repeats: int) -> dict[str, Any]:
    import uvloop

    samples = [uvloop.run(floor.measure()) for _ in range(repeats)]
    return {
        "grpc_unary_rtt_p50_ms": median_of_runs(
            [s["grpc"]["unary_rtt"]["p50_ms"] for s in samples]
        ),
        "grpc_unary_rps_c32": median_of_runs([s["grpc"]["unary_rps_c32"] for s in samples]),
        "grpc_stream_msgs_per_s": median_of_runs([s["grpc"]["stream_msgs_per_s"] for s in samples]),
        "sse_first_event_p50_ms": median_of_runs(
            [s["sse"]["first_event"]["p50_ms"] for s in samples]
        ),
        "sse_events_per_s": median_of_runs([s["sse"]["events_per_s"] for s in samples]),
        # CPU (client + server process) of each, and the run lower bound it implies.
        **{
            f"{kind}_{key}": median_of_runs([s[kind][key] for s in samples])
            for kind, key in (
                ("grpc", "unary_cpu_ms_per_call"),
                ("grpc", "unary_cpu_ms_per_call_c32"),
                ("grpc", "stream_cpu_ms_per_msg"),
                ("sse", "cpu_ms_per_request"),
                ("sse", "cpu_ms_per_request_c32"),
                ("sse", "cpu_ms_per_event"),
            )
        },
        "run_cpu_ms_lower_bound": median_of_runs(
            [s["run_lower_bound"]["cpu_ms_per_run"] for s in samples]
        ),
        "runs_per_s_ceiling": median_of_runs(
            [s["run_lower_bound"]["runs_per_s_ceiling"] for s in samples]
        ),
    }


def floor_cpu_lines(fl: dict[str, Any], cores: int) -> list[str]:
    """The floor's CPU costs and the ceiling of runs/s they alone set (absent from results
    written before the floor measured CPU)."""
    if "run_cpu_ms_lower_bound" not in fl:
        return []
    return [
        "",
        f"Floor CPU (client + server process): bare gRPC unary "
        f"{fl['grpc_unary_cpu_ms_per_call']['median']} ms per call "
        f"({fl['grpc_unary_cpu_ms_per_call_c32']['median']} at c=32), server stream "
        f"{fl['grpc_stream_cpu_ms_per_msg']['median']} ms per message; bare SSE "
        f"{fl['sse_cpu_ms_per_request']['median']} ms per 1-event request "
        f"({fl['sse_cpu_ms_per_request_c32']['median']} at c=32), "
        f"{fl['sse_cpu_ms_per_event']['median']} ms per event of a long stream.",
        "",
        f"Lower bound of CPU per chat run, from the floor alone (no database, no event log, no "
        f"application code): a run makes at least {floor.RPCS_PER_RUN} gRPC calls (StartRun "
        f"stream, BeginRun, Route, Execute stream, FinishRun; a stream counted as one call, "
        f"its messages not at all) and {floor.SSE_REQUESTS_PER_RUN} HTTP SSE request, so at "
        f"the floor's CPU per call (the cheaper of c=1 and c=32) at least "
        f"{fl['run_cpu_ms_lower_bound']['median']} ms per run, and this machine's {cores} "
        f"cores cannot serve more than {fl['runs_per_s_ceiling']['median']} runs/s.",
    ]


def markdown(results: dict[str, Any]) -> str:
    fl = results["floor"]
    medians = {key: value["median"] for key, value in fl.items() if isinstance(value, dict)}
    lines = [
        f"Machine: {results['machine']['cpus']} cores ({results['machine']['cpu']}), "
        f"{results['machine']['memory_gb']} GB, Python {results['machine']['python']}. "
        f"Command: `{results['command']}`. Medians of {results['repeats']} runs (min–max).",
        "",
        f"Floor: bare gRPC unary round trip p50 {fl['grpc_unary_rtt_p50_ms']['median']} ms, "
        f"{medians['grpc_unary_rps_c32']} calls/s at c=32, "
        f"server stream {medians['grpc_stream_msgs_per_s']} msgs/s; "
        f"bare SSE {medians['sse_events_per_s']} events/s, "
        f"first event p50 {medians['sse_first_event_p50_ms']} ms.",
        *floor_cpu_lines(fl, results["machine"]["cpus"]),
        *skeleton_lines(results),
        *targets_lines(results),
        "",
        "| backend | concurrency | runs/s | first event p50 / p99 (ms) "
        "| RUN_FINISHED p50 / p99 (ms) | per-run cost in bare gRPC round trips | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    rtt = fl["grpc_unary_rtt_p50_ms"]["median"]
    for b in results["backends"]:
        for lv in b["levels"]:
            rps = lv["runs_per_s"]
            finished = lv["run_finished_p50_ms"]["median"]
            round_trips = round(finished / rtt, 1) if lv["concurrency"] == 1 else ""
            lines.append(
                f"| {b['backend']} | {lv['concurrency']} "
                f"| {rps['median']} ({rps['min']}–{rps['max']}) "
                f"| {lv['first_event_p50_ms']['median']} / {lv['first_event_p99_ms']['median']} "
                f"| {finished} / {lv['run_finished_p99_ms']['median']} "
                f"| {round_trips} "
                f"| {lv['errors']} |"
            )
    lines += [
        "",
        "| backend | long stream events/s (ratio to bare SSE) | idle RSS MB (max service) "
        "| RSS growth after runs |",
        "|---|---|---|---|",
    ]
    for b in results["backends"]:
        ls = b["long_stream"]["events_per_s"]
        growth = b.get("rss_growth", {})
        worst = max(growth.get("growth_pct", {"-": 0}).items(), key=lambda kv: kv[1])
        idle = max(b["rss_idle_mb"].items(), key=lambda kv: kv[1])
        growth_text = f"{worst[1]}% ({worst[0]}) after {growth['runs']} runs" if growth else ""
        lines.append(
            f"| {b['backend']} "
            f"| {ls['median']} ({round(ls['median'] / medians['sse_events_per_s'], 2)}) "
            f"| {idle[1]} ({idle[0]}) | {growth_text} |"
        )
    for shed in results.get("shedding", []):
        lines += ["", *shedding.lines(shed)]
    return "\n".join(lines) + "\n"


def chart(results: dict[str, Any], target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, thr) = plt.subplots(1, 2, figsize=(11, 4))
    for b in results["backends"]:
        cs = [lv["concurrency"] for lv in b["levels"]]
        for key, style in (
            ("first_event_p50_ms", "-"),
            ("first_event_p99_ms", "--"),
            ("run_finished_p50_ms", "-."),
            ("run_finished_p99_ms", ":"),
        ):
            lat.plot(
                cs,
                [lv[key]["median"] for lv in b["levels"]],
                style,
                marker="o",
                label=f"{b['backend']} {key.replace('_ms', '')}",
            )
        thr.plot(
            cs, [lv["runs_per_s"]["median"] for lv in b["levels"]], marker="o", label=b["backend"]
        )
    lat.set_xscale("log", base=2)
    lat.set_yscale("log")
    lat.set_xlabel("concurrent runs")
    lat.set_ylabel("ms")
    lat.set_title("latency")
    lat.legend(fontsize=6)
    thr.set_xscale("log", base=2)
    thr.set_xlabel("concurrent runs")
    thr.set_ylabel("runs/s")
    thr.set_title("throughput")
    thr.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(target, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--backends", default="embedded,postgres")
    parser.add_argument("--concurrency", default="1,8,32,128")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--processes", type=int, default=2, help="client processes")
    parser.add_argument("--long-words", type=int, default=10_000)
    parser.add_argument("--memory-runs", type=int, default=20_000)
    parser.add_argument(
        "--history", action="store_true", help="also the 1,000,000-message history benchmark"
    )
    parser.add_argument(
        "--scheduler", action="store_true", help="also the 100,000-job scheduler benchmark"
    )
    parser.add_argument(
        "--profile", action="store_true", help="py-spy profile of the orchestrator under load"
    )
    parser.add_argument(
        "--shedding",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="load shedding at 2x the saturation load (bench.shedding, each backend; its "
        "table and target ratios go in latest.md)",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also where a run's time goes on PostgreSQL + Redis: CPU per run by service at "
        "c=32 (bench.cpu) and the timeline of every RPC from the suite's traces at c=1 and c=32 "
        "(bench.spans)",
    )
    parser.add_argument(
        "--no-targets",
        dest="targets",
        action="store_false",
        help="leave out the issue-24 targets (bench.targets: target all against the LangGraph "
        "peer, split against the skeleton, the open-loop run)",
    )
    parser.add_argument("--out", default=str(ROOT / "results"))
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    results: dict[str, Any] = {
        "machine": machine(),
        "command": 'make bench BENCH_ARGS="' + " ".join(sys.argv[1:]) + '"',
        "repeats": args.repeats,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    results["floor"] = floor_median(args.repeats)
    print("floor:", json.dumps(results["floor"]), flush=True)
    results["skeleton"] = skeleton_median(args)
    print("skeleton:", json.dumps(results["skeleton"]), flush=True)
    results["backends"] = [bench_backend(b, args, out_dir) for b in args.backends.split(",") if b]
    if args.targets:
        from bench import targets

        results["targets"] = targets.measure(
            targets.arguments(
                ["--duration", str(args.duration), "--repeats", str(args.repeats),
                 "--processes", str(args.processes), "--out", str(out_dir)]
            )
        )  # fmt: skip
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'protos'}")
    if args.history:
        subprocess.run(
            [sys.executable, "-m", "bench.history", "--messages", "1000000", "--threads", "10000"],
            cwd=ROOT,
            env=env,
            check=False,
        )
    if args.scheduler:
        subprocess.run(
            [sys.executable, "-m", "bench.scheduler", "--jobs", "100000", "--replicas", "2"],
            cwd=ROOT,
            env=env,
            check=False,
        )
    if args.shedding:
        results["shedding"] = []
        for backend in args.backends.split(","):
            target = out_dir / f"shedding-{backend}.json"
            target.unlink(missing_ok=True)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.shedding",
                    "--backend",
                    backend,
                    "--duration",
                    str(args.duration),
                    "--processes",
                    str(args.processes),
                    "--out",
                    str(out_dir),
                ],
                cwd=ROOT,
                env=env,
                check=False,
            )
            if target.exists():
                results["shedding"].append(json.loads(target.read_text()))
    if args.breakdown:
        for command in (
            ["bench.cpu", "--backends", "postgres"],
            ["bench.spans", "--backend", "postgres"],
            ["bench.spans", "--backend", "postgres", "--concurrency", "32"],
        ):
            subprocess.run(
                [sys.executable, "-m", *command, "--out", str(out_dir)],
                cwd=ROOT,
                env=env,
                check=False,
            )

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (out_dir / f"bench-{stamp}.json").write_text(json.dumps(results, indent=2))
    (out_dir / "latest.json").write_text(json.dumps(results, indent=2))
    table = markdown(results)
    (out_dir / "latest.md").write_text(table)
    chart(results, out_dir / "latest.png")
    print(table)


if __name__ == "__main__":
    main()
