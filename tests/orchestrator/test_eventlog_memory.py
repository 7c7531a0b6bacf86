"""The embedded (in-memory) event log stays within its memory budget: finished runs' logs
are dropped oldest first, a running run's log never."""

from __future__ import annotations

import pytest

from services.orchestrator.eventlog import InMemoryEventLog


async def test_finished_logs_are_dropped_oldest_first_past_the_budget() -> None:
    log = InMemoryEventLog(retention_seconds=3600, max_bytes=5_000)
    payload = b"x" * 900  # about 1 KB per log with the per-entry overhead
    await log.append("running", [(1, payload)])  # never closed: never dropped
    for i in range(10):
        await log.append(f"run-{i}", [(1, payload)])
        await log.close(f"run-{i}")
    await log.append("newest", [(1, payload)])
    kept = [i for i in range(10) if await log.exists(f"run-{i}")]
    assert kept == list(range(10 - len(kept), 10)) and 1 <= len(kept) <= 4  # the newest ones
    assert await log.exists("running") and await log.exists("newest")
    with pytest.raises(KeyError):
        await log.read("run-0", 0)  # a resume of it answers 410 (tests/e2e: test_resilience)
    entries, closed = await log.read("running", 0)
    assert entries == [(1, payload)] and not closed


async def test_within_the_budget_finished_logs_stay_for_the_retention() -> None:
    log = InMemoryEventLog(retention_seconds=3600, max_bytes=10 * 2**20)
    for i in range(100):
        await log.append(f"run-{i}", [(1, b"event")])
        await log.close(f"run-{i}")
    assert all([await log.exists(f"run-{i}") for i in range(100)])


async def test_the_budget_counts_about_the_memory_the_logs_take() -> None:
    import tracemalloc

    log = InMemoryEventLog(retention_seconds=3600, max_bytes=2**40)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for r in range(2000):  # runs like a chat run's: 18 events of 60-140 bytes
            key = f"owner-{r % 50}/run-{r:012x}"
            for seq in range(1, 19):
                await log.append(key, [(seq, bytes(60 + (r * seq) % 80))])
            await log.close(key)
        taken, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    counted = log.bytes_held
    assert 0.75 < (taken - before) / counted < 1.25, (taken - before, counted)
