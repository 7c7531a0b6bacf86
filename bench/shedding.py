"""Load shedding under overload: the suite with a bound of runs in flight
(AGENTMESH_MAX_RUNS_IN_FLIGHT = --bound), driven at the saturation load and at twice it,
by two definitions of "twice".

    python -m bench.shedding [--backend embedded|postgres] [--bound 16] [--duration 10]
                             [--repeats 3] [--shape split|all] [--pin|--no-pin]
                             [--processes 2] [--pause 0.05] [--out results]

Saturation: --bound clients in a closed loop (each sends its next run when the last ended):
the suite full and nothing refused; its throughput T and first-event latency are the
reference. Twice it, two ways:

- closed loop: 2 x --bound clients, the refused ones sending again after --pause (a client
  that honoured Retry-After: 1 would offer less). This offers more than 2x: a refused
  client is answered in milliseconds and sends again, so the offered rate (runs and
  refusals per second) is several times T, and grows as refusals get faster;
- open loop: runs arriving as a Poisson process of 2 x T per second whatever is answered
  (a refused run is not sent again), each timed from its scheduled arrival (no coordinated
  omission): an offered load of twice the measured saturation throughput.

Each refused request (503 + Retry-After) is timed to its answer (target: p99 <= 50 ms), and
the accepted runs' first-event p99 at 2x is compared with the one at saturation (target: no
worse). Both as ratios to their target (<= 1 is met), for both definitions. The first event
is timed twice: by the clients, and by the gateway (its agentmesh_run_first_event_seconds,
from the request's arrival to the event sent), since on one machine the clients share the
cores and their own delays grow with what they send. The three levels run in turn
--repeats times; a level's p99 rests on about ten runs, so each verdict is the median of
the repeats' ratios. Writes results/shedding-<backend>.json.

Shape and cores: one process per service (`--shape split`, the default), or every service
in one process (`--shape all`, what `make run` starts). With `--pin` (the default; the
machine needs two or more CPUs) the process hosting the gateway runs on CPU 0 with its
threads, and every other process, the load clients with the suite's other services, on the
other CPUs. The door that refuses is then never waiting for a core that a load client
holds, as with a gateway deployed on its own (one Deployment per service) and the load
generated elsewhere; one process (`--shape all`) is then the whole suite on CPU 0 and the
clients alone on the others. With `--no-pin` the kernel places every process on any core.

The default bound, 16, is about where this suite's throughput stops growing on the 2-core
development machine (scripted model, embedded: c=16 153 runs/s, c=32 155-172 runs/s at
twice the first-event p99): admitting more than the cores can serve only queues the
admitted runs behind each other, and leaves no CPU to answer the refusals.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.stats import median_of_runs, summary_ms
from services.launcher import Suite

ROOT = Path(__file__).resolve().parent.parent

# The load clients (bench.suite, bench.cpu: aiohttp, a bench extra) are imported where they
# are used, so that the report's functions below import with the dev extras alone (tests).

# Targets (issue 17): refused p99 at 2x the saturation load, and the accepted runs'
# first-event p99 at 2x against the one at the saturation load.
REFUSED_P99_TARGET_MS = 50.0


class _Seen:
    """What one client process saw: accepted runs' first events and refusals (seconds), and
    errors."""

    def __init__(self) -> None:
        from bench.suite import token

        self.auth = f"Bearer {token('shed-' + uuid.uuid4().hex[:6])}"
        self.firsts: list[float] = []
        self.refused: list[float] = []
        self.errors: list[str] = []

    async def attempt(self, client: Any, url: str, late: float = 0.0) -> bool:
        """One POST /runs, timed from `late` seconds before it was sent; whether it was
        refused (503)."""
        body = {
            "threadId": f"s-{uuid.uuid4().hex[:12]}",
            "runId": f"r-{uuid.uuid4().hex[:12]}",
            "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": "Hello"}],
        }
        started = time.perf_counter() - late
        first = 0.0
        tail = b""
        try:
            async with client.post(url, json=body, headers={"Authorization": self.auth}) as resp:
                if resp.status == 503:
                    await resp.read()
                    self.refused.append(time.perf_counter() - started)
                    return True
                if resp.status != 200:
                    self.errors.append(f"HTTP {resp.status}: {(await resp.read())[:120]!r}")
                    return False
                async for chunk in resp.content.iter_any():
                    if not first:
                        first = time.perf_counter() - started
                    tail = (tail + chunk)[-4096:]
        except Exception as err:  # counted, not fatal
            self.errors.append(f"{type(err).__name__}: {err}"[:200])
            return False
        if b'"RUN_FINISHED"' not in tail:
            self.errors.append("run did not finish: " + tail[-200:].decode(errors="replace"))
            return False
        self.firsts.append(first)
        return False

    def result(self, began: float, ended: float, **more: Any) -> dict[str, Any]:
        return {
            "firsts": self.firsts,
            "refused": self.refused,
            "errors": self.errors,
            "began": began,
            "ended": ended,
            **more,
        }


def _client_cpus(cpus: set[int] | None) -> None:
    """Keep this client process on `cpus` (None: wherever the kernel puts it)."""
    if cpus:
        os.sched_setaffinity(0, cpus)


def _closed_process(
    url: str, concurrency: int, duration: float, pause: float, cpus: set[int] | None, out: Any
) -> None:
    import uvloop

    _client_cpus(cpus)

    from bench.suite import http_client

    async def main() -> dict[str, Any]:
        seen = _Seen()
        async with http_client(concurrency + 4, timeout=120) as client:
            deadline = time.perf_counter() + duration

            async def worker() -> None:
                while time.perf_counter() < deadline:
                    if await seen.attempt(client, url):
                        await asyncio.sleep(pause)

            began = time.time()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return seen.result(began, time.time())

    out.send(uvloop.run(main()))
    out.close()


def _open_process(
    url: str, rate: float, duration: float, seed: int, cpus: set[int] | None, out: Any
) -> None:
    import uvloop

    _client_cpus(cpus)

    from bench.suite import http_client, poisson_arrivals

    async def main() -> dict[str, Any]:
        seen = _Seen()
        async with http_client(4096, timeout=120) as client:
            began = time.time()
            lates = await poisson_arrivals(
                rate, duration, seed, lambda late: seen.attempt(client, url, late)
            )
            return seen.result(began, began + duration, lates=lates)

    out.send(uvloop.run(main()))
    out.close()


def _level(results: list[dict[str, Any]], elapsed: float, **more: Any) -> dict[str, Any]:
    firsts = [x for r in results for x in r["firsts"]]
    refused = [x for r in results for x in r["refused"]]
    errors = [x for r in results for x in r["errors"]]
    sent = len(firsts) + len(refused) + len(errors)
    return {
        **more,
        "runs": len(firsts),
        "runs_per_s": round(len(firsts) / elapsed, 1),
        "offered_per_s": round(sent / elapsed, 1),
        "first_event": summary_ms(firsts),
        "refused": summary_ms(refused),
        "refused_per_s": round(len(refused) / elapsed, 1),
        "errors": len(errors),
        "error_samples": errors[:3],
    }


def measure(
    url: str,
    concurrency: int,
    duration: float,
    processes: int,
    pause: float,
    cpus: set[int] | None = None,
) -> dict[str, Any]:
    """A closed loop of `concurrency` clients over the client processes (on `cpus`)."""
    from bench.suite import run_clients

    procs = max(1, min(processes, concurrency))
    per = [concurrency // procs + (1 if i < concurrency % procs else 0) for i in range(procs)]
    results = run_clients(_closed_process, [(url, n, duration, pause, cpus) for n in per])
    elapsed = max(r["ended"] for r in results) - min(r["began"] for r in results)
    return _level(results, elapsed, model="closed", concurrency=concurrency)


def measure_open(
    url: str, rate: float, duration: float, processes: int, cpus: set[int] | None = None
) -> dict[str, Any]:
    """Poisson arrivals of `rate` runs/s over the client processes (on `cpus`)."""
    from bench.suite import run_clients

    procs = max(1, processes)
    results = run_clients(
        _open_process, [(url, rate / procs, duration, 2000 + i, cpus) for i in range(procs)]
    )
    return _level(
        results,
        duration,
        model="open",
        rate_per_s=round(rate, 1),
        # How late the generator sent its arrivals (counted in every latency above).
        send_lateness=summary_ms([x for r in results for x in r["lates"]]),
    )


FIRST_EVENT_METRIC = "agentmesh_run_first_event_seconds"


def first_event_buckets(gateway_url: str) -> dict[float, float]:
    """The gateway's histogram of accepted runs' time to first event (shared/metrics.py),
    cumulative counts by upper bound, from its GET /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{gateway_url}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    out: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{FIRST_EVENT_METRIC}_bucket":
                out[float(sample.labels["le"])] = sample.value
    return out


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The q-quantile (ms) of what was observed between two scrapes of a histogram,
    interpolated linearly within its bucket (as PromQL's histogram_quantile); NaN if none."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return round(lower * 1000, 3)  # past the last finite bound: its bound
            share = (rank - below) / (count - below) if count > below else 1.0
            return round((lower + (bound - lower) * share) * 1000, 3)
        lower, below = bound, count
    return float("nan")


def with_cpu(suite: Suite, level: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`level()`, with the CPU seconds each of the suite's processes spent meanwhile (/proc:
    unlike latency on a shared machine, what a process spends is its own), and the accepted
    runs' time to first event as the gateway measured it (from the request's arrival to the
    event sent: without the load clients' own delays, which share the cores)."""
    from bench.cpu import cpu_seconds

    before = {name: cpu_seconds(p.pid) for name, p in suite.procs.items()}
    buckets = first_event_buckets(suite.gateway_url)
    measured = level()
    measured["cpu_s"] = {
        name: round(cpu_seconds(p.pid) - before[name], 3) for name, p in suite.procs.items()
    }
    after = first_event_buckets(suite.gateway_url)
    measured["server_first_event"] = {
        "n": int(after.get(float("inf"), 0.0) - buckets.get(float("inf"), 0.0)),
        "p50_ms": bucket_quantile(buckets, after, 0.5),
        "p99_ms": bucket_quantile(buckets, after, 0.99),
    }
    return measured


def gateway_cpu(result: dict[str, Any], process: str = "gateway") -> dict[str, float | None]:
    """The CPU per request answered (accepted runs and refusals alike), in ms, at each level,
    of the process hosting the gateway (`process`: in the one-process shape, the whole suite)."""
    out: dict[str, float | None] = {}
    for name, _ in _LEVELS:
        lv = result[name]
        answered = lv["runs"] + lv["refused"]["n"]
        out[name] = round(lv["cpu_s"][process] / answered * 1000, 3) if answered else None
    return out


def pinned(suite: Suite) -> set[int] | None:
    """Pin the process hosting the gateway (and its threads) to the first CPU and the suite's
    other processes to the rest; the CPUs left for the load clients (the rest), or None where
    nothing is pinned (one CPU)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    door, rest = {cpus[0]}, set(cpus[1:])
    gateway = suite.process_of("gateway")
    for key, proc in suite.procs.items():
        where = door if key == gateway else rest
        for task in os.listdir(f"/proc/{proc.pid}/task"):
            os.sched_setaffinity(int(task), where)
    return rest


def door_cpu(refusals: int) -> float:
    """CPU microseconds one refusal costs the gateway's door (services/gateway/shedding.py)
    in this process: its ASGI call with the bound reached, without uvicorn's parsing and
    the socket (which the door cannot change). CPU time, so a busy machine barely moves it."""
    from services.gateway.shedding import RUNS_PATH, ShedRuns
    from shared import metrics
    from shared.admission import InFlight

    metrics.enable()
    in_flight = InFlight(limit=1, per_owner=1)
    in_flight.acquire("holder")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("a refused run reaches no application")

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        return None

    door = ShedRuns(app, in_flight)
    headers = [(b"host", b"gateway"), (b"authorization", b"Bearer x"), (b"content-length", b"99")]
    scope = {"type": "http", "method": "POST", "path": RUNS_PATH, "headers": headers}

    async def refuse(n: int) -> float:
        began = time.process_time()
        for _ in range(n):
            await door(scope, receive, send)
        return time.process_time() - began

    asyncio.run(refuse(1000))  # warm
    return round(asyncio.run(refuse(refusals)) / refusals * 1e6, 2)


def ratios(saturation: dict[str, Any], overload: dict[str, Any]) -> dict[str, float | None]:
    """The two targets as ratios, <= 1 met: the refused p99 at 2x over 50 ms, and the
    accepted first-event p99 at 2x over the one at the saturation load."""
    refused = overload["refused"]["p99_ms"]
    at_2x, at_1x = overload["first_event"]["p99_ms"], saturation["first_event"]["p99_ms"]

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 2) if a == a and b == b and b > 0 else None  # NaN: nothing timed

    server = "server_first_event"
    return {
        "refused_p99_to_target": ratio(refused, REFUSED_P99_TARGET_MS),
        "accepted_p99_2x_to_1x": ratio(at_2x, at_1x),
        "accepted_server_p99_2x_to_1x": ratio(
            overload[server]["p99_ms"], saturation[server]["p99_ms"]
        ),
    }


def _verdict(value: float | None) -> str:
    return "not measured" if value is None else ("met" if value <= 1.0 else "not met")


_LEVELS = (
    ("saturation", "1x: closed loop, c=bound"),
    ("overload", "2x closed loop: c=2 x bound, refused send again after the pause"),
    ("overload_open", "2x open loop: Poisson arrivals at 2 x the 1x runs/s"),
)


def _level_rows(run: dict[str, Any], tag: str) -> list[str]:
    saturation = run["saturation"]["runs_per_s"]
    out = []
    for name, label in _LEVELS:
        if name not in run:
            continue
        lv = run[name]
        refused = lv["refused"]
        offered = lv.get("offered_per_s", float("nan"))
        times = round(offered / saturation, 2) if saturation else None
        server = lv.get("server_first_event", {"p50_ms": "-", "p99_ms": "-"})
        out.append(
            f"| {tag}{label} | {offered} ({times}) | {lv['runs_per_s']} "
            f"| {lv['first_event']['p50_ms']} / {lv['first_event']['p99_ms']} "
            f"| {server['p50_ms']} / {server['p99_ms']} "
            f"| {lv['refused_per_s']} | {refused['p50_ms']} / {refused['p99_ms']} "
            f"| {lv['errors']} |"
        )
    return out


RATIO_KEYS = ("refused_p99_to_target", "accepted_p99_2x_to_1x", "accepted_server_p99_2x_to_1x")


def ratio_summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float] | None]]:
    """Each target's ratio over the repeats, median (min-max): the verdict is the median's."""
    out: dict[str, dict[str, dict[str, float] | None]] = {}
    for key in ("ratios", "ratios_open"):
        out[key] = {}
        for name in RATIO_KEYS:
            values = [r[key][name] for r in runs if r.get(key, {}).get(name) is not None]
            out[key][name] = median_of_runs(values) if values else None
    return out


def _ratio_text(value: dict[str, float] | None) -> str:
    if value is None:
        return "not measured"
    spread = f" ({value['min']}-{value['max']})" if value["runs"] > 1 else ""
    return f"{value['median']}{spread}, {_verdict(value['median'])}"


def _pin_text(client_cpus: list[int] | None) -> str:
    if client_cpus is None:
        return "not pinned"
    return (
        f"the gateway's process on CPU 0, the clients and any other process on CPU "
        f"{','.join(map(str, client_cpus))}"
    )


def lines(result: dict[str, Any]) -> list[str]:
    runs = result.get("runs") or [result]  # a result of one run kept its levels at the top
    out = [
        f"Load shedding ({result['backend']}, AGENTMESH_MAX_RUNS_IN_FLIGHT={result['bound']}, "
        f"{result['duration']} s per level, closed-loop pause {result['pause']} s, "
        f"{len(runs)} repeat(s) of the three levels in turn; shape "
        f"{result.get('shape', 'split')}, {_pin_text(result.get('client_cpus'))}):",
        "",
        "| load | offered/s (x 1x runs/s) | accepted runs/s "
        "| accepted first event p50 / p99 (ms) | the same at the gateway p50 / p99 (ms) "
        "| refused/s | refused p50 / p99 (ms) | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, run in enumerate(runs):
        out += _level_rows(run, f"#{i + 1} " if len(runs) > 1 else "")
    out.append("")
    summary = result.get("ratio_summary") or ratio_summary(runs)
    for key, label in (("ratios", "closed loop"), ("ratios_open", "open loop")):
        r = summary.get(key)
        if not r:
            continue
        out.append(
            f"2x by the {label}, medians of the repeats: refused p99 / "
            f"{REFUSED_P99_TARGET_MS:g} ms {_ratio_text(r['refused_p99_to_target'])}; "
            f"accepted first-event p99 at 2x / at 1x {_ratio_text(r['accepted_p99_2x_to_1x'])} "
            f"(at the gateway {_ratio_text(r['accepted_server_p99_2x_to_1x'])})."
        )
    lates = [r["overload_open"]["send_lateness"] for r in runs if "overload_open" in r]
    if lates:
        out.append(
            "Open-loop arrivals sent late by p50 / p99 "
            + ", ".join(f"{late['p50_ms']} / {late['p99_ms']}" for late in lates)
            + " ms (counted in the clients' latencies, not in the gateway's)."
        )
    cpus = [r["gateway_cpu"] for r in runs if "gateway_cpu" in r]
    if cpus:
        cpu = cpus[-1]
        whose = "The suite's" if result.get("shape") == "all" else "Gateway"
        out.append(
            f"{whose} CPU per request answered (ms, last repeat): "
            + ", ".join(f"{label.split(':')[0]} {cpu[name]}" for name, label in _LEVELS)
            + f"; the door's own per refusal, in process: {result['door_cpu_us']} us."
        )
    out.append(
        f"Load average at the start {result['load_average']}. Command: `{result['command']}`."
    )
    return out


def main() -> None:
    from bench.suite import load, start_suite

    parser = argparse.ArgumentParser(
        prog="python -m bench.shedding", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--backend", default="embedded", choices=["embedded", "postgres"])
    parser.add_argument(
        "--bound", type=int, default=16, help="runs in flight taken (the saturation load)"
    )
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the three levels")
    parser.add_argument("--processes", type=int, default=2, help="client processes")
    parser.add_argument("--pause", type=float, default=0.05, help="seconds a refused client waits")
    parser.add_argument(
        "--shape", default="split", choices=["all", "split"], help="one per service, or one process"
    )
    parser.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the gateway's process on CPU 0, the load clients and the rest on the others",
    )
    parser.add_argument("--out", default=str(ROOT / "results"))
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-shed-{args.backend}-"))
    prefix = f"shed{uuid.uuid4().hex[:8]}_"
    bound = str(args.bound)
    suite = start_suite(
        args.backend,
        tmp,
        prefix,
        {"AGENTMESH_MAX_RUNS_IN_FLIGHT": bound, "AGENTMESH_MAX_RUNS_IN_FLIGHT_PER_OWNER": bound},
        shape=args.shape,
    )
    cpus = pinned(suite) if args.pin else None
    gateway_process = suite.process_of("gateway")
    result: dict[str, Any] = {
        "backend": args.backend,
        "bound": args.bound,
        "duration": args.duration,
        "pause": args.pause,
        "shape": args.shape,
        "client_cpus": sorted(cpus) if cpus else None,
        "load_average": round(os.getloadavg()[0], 1),
        "command": "python -m bench.shedding "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out"),
    }
    try:
        load(suite, 8, 2, args.processes)  # warm-up
        url = f"{suite.gateway_url}/api/v1/agent/runs"
        runs: list[dict[str, Any]] = []
        # The levels in turn, --repeats times: a p99 of one 10 s level rests on about ten
        # runs, so the verdicts are the medians of the repeats' ratios.
        for _ in range(args.repeats):
            run: dict[str, Any] = {}
            run["saturation"] = with_cpu(
                suite,
                lambda: measure(url, args.bound, args.duration, args.processes, args.pause, cpus),
            )
            run["overload"] = with_cpu(
                suite,
                lambda: measure(
                    url, 2 * args.bound, args.duration, args.processes, args.pause, cpus
                ),
            )
            run["ratios"] = ratios(run["saturation"], run["overload"])
            rate = 2 * run["saturation"]["runs_per_s"]
            run["overload_open"] = with_cpu(
                suite,
                functools.partial(measure_open, url, rate, args.duration, args.processes, cpus),
            )
            run["ratios_open"] = ratios(run["saturation"], run["overload_open"])
            run["gateway_cpu"] = gateway_cpu(run, gateway_process)
            runs.append(run)
        result["runs"] = runs
        result["ratio_summary"] = ratio_summary(runs)
        result["door_cpu_us"] = door_cpu(20_000)
    finally:
        suite.stop()
        if args.backend == "postgres":
            from tests.conftest import drop_schemas

            asyncio.run(drop_schemas(prefix))
        shutil.rmtree(tmp, ignore_errors=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"shedding-{args.backend}.json").write_text(json.dumps(result, indent=2))
    print("\n".join(lines(result)))


if __name__ == "__main__":
    main()
