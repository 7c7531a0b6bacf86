"""bench.targets: each issue-24 target judged from its measured median, and reported."""

from __future__ import annotations

from typing import Any

from bench.targets import TARGETS, markdown, verdicts


def _m(value: float) -> dict[str, float]:
    return {"median": value, "min": value - 1, "max": value + 1, "runs": 3}


def _results(**overrides: float) -> dict[str, Any]:
    figures = {
        "run_p50": 7.0,
        "rss": 140.0,
        "ratio": 2.5,
        "first_p99": 90.0,
        "split_ratio": 0.7,
        "split_cpu": 11.0,
        "open_p99": 40.0,
        **overrides,
    }
    side = {
        "runs_per_s": _m(100),
        "first_event_p50_ms": _m(5),
        "first_event_p99_ms": _m(figures["first_p99"]),
        "run_finished_p50_ms": _m(figures["run_p50"]),
        "run_finished_p99_ms": _m(20),
        "server_cpu_ms_per_run": _m(5),
        "idle_rss_mb": _m(figures["rss"]),
    }
    return {
        "versus_peer": {
            "1": {"agentmesh": side, "peer": side},
            "32": {"agentmesh": side, "peer": side, "runs_per_s_ratio": _m(figures["ratio"])},
        },
        "split": {
            "runs_per_s_ratio": _m(figures["split_ratio"]),
            "cpu_ms_per_run": _m(figures["split_cpu"]),
        },
        "open_loop": {"first_event_p99_ms": _m(figures["open_p99"])},
    }


def test_every_target_is_judged_and_met_when_within_its_bound() -> None:
    judged = verdicts(_results())
    assert set(judged) == set(TARGETS)
    assert all(v["met"] for v in judged.values())


def test_a_figure_past_its_bound_is_not_met_whichever_way_the_bound_goes() -> None:
    judged = verdicts(_results(run_p50=8.5, ratio=1.9, split_ratio=0.59, open_p99=51))
    missed = {name for name, v in judged.items() if not v["met"]}
    assert missed == {
        "all_unloaded_run_p50_ms",
        "all_c32_runs_per_s_vs_peer",
        "split_c32_runs_per_s_vs_skeleton",
        "open_loop_first_event_p99_ms",
    }


def test_a_part_not_measured_is_left_out_not_judged() -> None:
    results = _results()
    del results["split"]
    judged = verdicts(results)
    assert "split_cpu_ms_per_run" not in judged
    assert "all_idle_rss_mb" in judged


def test_the_report_has_a_row_per_target_and_per_server() -> None:
    results = _results(ratio=1.0)
    results["verdicts"] = verdicts(results)
    table = markdown(results)
    assert "| all_c32_runs_per_s_vs_peer | 1.0 (0.0-2.0) | >= 2.0 | no |" in table
    assert table.count("langgraph dev") == 2
