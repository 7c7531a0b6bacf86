"""Helpers of the tests that use the Python client (tests/e2e/test_client.py, test_cli.py,
test_console_browser.py)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentmesh_client import Client, JobRun
from services.launcher import Suite
from tests.conftest import USES_POSTGRES, drop_schemas
from tests.e2e.conftest import make_suite


@contextmanager
def private_suite(tmp: Path, **env: str) -> Iterator[Suite]:
    """A suite of its own (e.g. a slow scripted model), started, then stopped and dropped."""
    prefix = f"c{uuid.uuid4().hex[:10]}_"
    suite = make_suite(tmp, prefix, **env)
    try:
        suite.start(timeout=90)
        yield suite
    finally:
        suite.stop()
        if USES_POSTGRES:
            asyncio.run(drop_schemas(prefix))


def memory_job(prompt: str) -> dict[str, Any]:
    """A daily memory job (the memory agent, allowed to write memories)."""
    return {
        "title": "Memory",
        "schedule": {"type": "daily", "localTime": "10:00"},
        "config": {"prompt": prompt, "tools": ["memory_write"]},
    }


def chat(am: Client, thread: str, text: str) -> str:
    """One chat run to its end; its run id."""
    with am.start_run(thread, text) as run:
        events = list(run)
    assert events[-1].type == "RUN_FINISHED", events[-1]
    return run.run_id


def wait_for_job_run(am: Client, job_id: str, within: float = 60) -> JobRun:
    """The job's newest run once it is over (not pending, not dispatching)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        runs = am.job_runs(job_id).runs
        if runs and runs[0].state not in ("pending", "dispatching"):
            return runs[0]
        time.sleep(0.3)
    raise AssertionError(f"no finished run of job {job_id}: {am.job_runs(job_id).runs}")
