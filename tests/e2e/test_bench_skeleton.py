"""bench/skeleton.py stands for the suite in the benchmark's report: for the benchmark's own
run, it must stream the events the suite streams (the same types, in the same order, as many),
or its numbers are not the suite's ceiling."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from bench.skeleton import Skeleton
from services.launcher import Suite
from tests.e2e.conftest import parse_sse, run_body, token

# What bench.suite.one_run sends.
BENCH_TEXT = "Hello benchmark"


@pytest.fixture(scope="module")
def skeleton() -> Iterator[Skeleton]:
    s = Skeleton()
    s.start()
    yield s
    s.stop()


def _types(url: str, headers: dict[str, str]) -> list[str]:
    body = run_body(f"b-{uuid.uuid4().hex[:12]}", f"r-{uuid.uuid4().hex[:12]}", BENCH_TEXT)
    with httpx.Client(timeout=30) as client:
        resp = client.post(f"{url}/api/v1/agent/runs", json=body, headers=headers)
    assert resp.status_code == 200
    return [str(e["type"]) for e in parse_sse(resp.content)]


def test_the_skeleton_streams_the_suites_events_for_the_benchmark_run(
    suite: Suite, skeleton: Skeleton
) -> None:
    real = _types(suite.gateway_url, {"Authorization": f"Bearer {token('bench-skeleton')}"})
    assert real[0] == "RUN_STARTED" and real[-1] == "RUN_FINISHED"
    assert _types(skeleton.gateway_url, {}) == real
