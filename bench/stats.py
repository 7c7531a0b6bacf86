"""Small statistics helpers shared by the benchmarks."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p99/mean in milliseconds of a list of durations in seconds."""
    ms = [s * 1000 for s in seconds]
    return {
        "p50_ms": round(percentile(ms, 50), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "mean_ms": round(statistics.fmean(ms), 3) if ms else float("nan"),
        "n": len(ms),
    }


def median_of_runs(runs: Sequence[float]) -> dict[str, float]:
    """The median of several repeated measurements, with min and max."""
    return {
        "median": round(statistics.median(runs), 3),
        "min": round(min(runs), 3),
        "max": round(max(runs), 3),
        "runs": len(runs),
    }
