"""services.executor.streams.batches: items in order, grouped as they were ready, producer
stopped on close."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing

import pytest

from services.executor.streams import batches


async def produce(n: int, *, pause_every: int = 0, fail: bool = False) -> AsyncIterator[int]:
    for i in range(n):
        if pause_every and i % pause_every == 0:
            await asyncio.sleep(0.01)  # a slow producer: what is ready goes out at once
        yield i
    if fail:
        raise ValueError("model failed")


async def test_items_come_in_order_grouped_as_they_were_ready() -> None:
    got = [b async for b in batches(produce(100))]
    assert [i for b in got for i in b] == list(range(100))
    assert all(got) and len(got) < 100  # nothing waits between them: few large batches


async def test_a_slow_producer_gives_small_batches_without_delay() -> None:
    got = [b async for b in batches(produce(30, pause_every=1))]
    assert [i for b in got for i in b] == list(range(30))
    assert max(len(b) for b in got) == 1


async def test_the_producer_runs_at_most_max_items_ahead() -> None:
    made: list[int] = []

    async def counted() -> AsyncIterator[int]:
        for i in range(1000):
            made.append(i)
            yield i

    async with aclosing(batches(counted(), max_items=10)) as stream:
        first = await anext(stream)
        await asyncio.sleep(0.01)
        assert len(first) <= 10 and len(made) <= len(first) + 11


async def test_an_error_reaches_the_reader_after_the_items_before_it() -> None:
    got: list[int] = []
    with pytest.raises(ValueError, match="model failed"):
        async for batch in batches(produce(5, fail=True)):
            got.extend(batch)
    assert got == list(range(5))


async def test_closing_the_reader_stops_the_producer() -> None:
    stopped = asyncio.Event()

    async def endless() -> AsyncIterator[int]:
        try:
            i = 0
            while True:
                await asyncio.sleep(0.001)
                yield i
                i += 1
        finally:
            stopped.set()

    async with aclosing(batches(endless())) as stream:
        await anext(stream)
    assert stopped.is_set()  # stopped before close returned, not later by the GC
