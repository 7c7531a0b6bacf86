"""bench.shedding: the accepted runs' time to first event as the gateway's histogram saw
it between two scrapes, as quantiles (linear within a bucket, like PromQL's
histogram_quantile)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest

from bench.shedding import bucket_quantile, pinned
from services.launcher import ALL_SERVICES, Suite

INF = float("inf")


def test_quantiles_of_what_was_observed_between_two_scrapes() -> None:
    before = {0.01: 5.0, 0.02: 5.0, 0.1: 5.0, INF: 5.0}
    # 100 more: 50 under 10 ms, 40 in (10, 20] ms, 10 in (20, 100] ms.
    after = {0.01: 55.0, 0.02: 95.0, 0.1: 105.0, INF: 105.0}
    assert bucket_quantile(before, after, 0.5) == 10.0
    assert bucket_quantile(before, after, 0.75) == 16.25
    assert bucket_quantile(before, after, 0.99) == 92.0


def test_nothing_observed_is_nan_and_past_the_last_bound_is_that_bound() -> None:
    same = {0.01: 3.0, INF: 3.0}
    assert math.isnan(bucket_quantile(same, same, 0.99))
    assert bucket_quantile({}, {0.01: 1.0, 0.1: 1.0, INF: 4.0}, 0.99) == 100.0


def _level(p99: float, server_p99: float, refused_p99: float = float("nan")) -> dict:
    return {
        "runs_per_s": 100.0,
        "offered_per_s": 200.0,
        "runs": 1000,
        "first_event": {"p50_ms": 5.0, "p99_ms": p99},
        "server_first_event": {"p50_ms": 4.0, "p99_ms": server_p99, "n": 1000},
        "refused": {"p50_ms": 2.0, "p99_ms": refused_p99, "n": 10},
        "refused_per_s": 1.0,
        "errors": 0,
    }


def test_the_verdict_is_the_median_of_the_repeats_ratios() -> None:
    from bench.shedding import lines, ratio_summary, ratios

    runs = []
    for at_2x in (60.0, 45.0, 90.0):  # against 50 ms at 1x: 1.2, 0.9, 1.8
        run = {"saturation": _level(50.0, 40.0), "overload": _level(at_2x, 36.0, 20.0)}
        run["ratios"] = ratios(run["saturation"], run["overload"])
        runs.append(run)
    summary = ratio_summary(runs)["ratios"]
    assert summary["accepted_p99_2x_to_1x"] == {"median": 1.2, "min": 0.9, "max": 1.8, "runs": 3}
    assert summary["accepted_server_p99_2x_to_1x"]["median"] == 0.9
    assert summary["refused_p99_to_target"]["median"] == 0.4
    result = {"backend": "embedded", "bound": 16, "duration": 10, "pause": 0.05, "runs": runs}
    text = "\n".join(lines({**result, "load_average": 0.5, "command": "python -m bench.shedding"}))
    assert "at 2x / at 1x 1.2 (0.9-1.8), not met (at the gateway 0.9 (0.9-0.9), met)" in text


def _threaded_process() -> subprocess.Popen[bytes]:
    """A process with a second thread, as each of the suite's has (gRPC's, SQLite's)."""
    code = (
        "import threading, time; "
        "threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 30
    while len(os.listdir(f"/proc/{proc.pid}/task")) < 2:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("the stand-in process did not start its second thread")
        time.sleep(0.01)
    return proc


def _affinities(proc: subprocess.Popen[bytes]) -> set[frozenset[int]]:
    return {
        frozenset(os.sched_getaffinity(int(task))) for task in os.listdir(f"/proc/{proc.pid}/task")
    }


@pytest.mark.parametrize("shape", ["split", "all"])
def test_the_gateways_process_gets_the_first_cpu_and_the_rest_share_the_others(shape: str) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    suite = Suite(shape=shape)  # not started: its processes are stand-ins
    keys = list(suite.groups)
    try:
        for key in keys:
            suite.procs[key] = _threaded_process()
        left = pinned(suite)
        if len(cpus) < 2:
            assert left is None
            return
        assert left == set(cpus[1:])
        gateway = suite.process_of("gateway")
        assert gateway in keys
        for key, proc in suite.procs.items():
            want = {cpus[0]} if key == gateway else set(cpus[1:])
            assert _affinities(proc) == {frozenset(want)}, key
        assert len(keys) == (1 if shape == "all" else len(ALL_SERVICES))
    finally:
        for proc in suite.procs.values():
            proc.kill()
            proc.wait()
