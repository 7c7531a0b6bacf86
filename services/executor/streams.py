"""Batching a stream: a producer runs ahead of its reader, and each read takes everything
produced since the last one. A slow producer (a model streaming tokens) gives batches of
one, with no added wait; a fast one (a cached or scripted model) gives few large batches,
so a streaming RPC sends a handful of messages instead of one per item."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TypeVar

T = TypeVar("T")


async def batches(source: AsyncIterator[T], max_items: int = 256) -> AsyncGenerator[list[T], None]:
    """The items of `source`, in order, grouped as they were ready; never an empty batch.

    `source` is iterated by a task of its own (in a copy of the current context), at most
    `max_items` ahead of the reader. Closing this iterator (the reader went away, or was
    cancelled) cancels that task; an error of `source` reaches the reader after the items
    produced before it.
    """
    ready: list[T] = []
    produced = asyncio.Event()
    room = asyncio.Event()
    room.set()
    failure: list[BaseException] = []
    finished = False

    async def pump() -> None:
        nonlocal finished
        try:
            async for item in source:
                ready.append(item)
                produced.set()
                if len(ready) >= max_items:
                    room.clear()
                    await room.wait()
        except Exception as exc:
            failure.append(exc)
        finally:
            finished = True
            produced.set()

    task = asyncio.create_task(pump())
    try:
        while True:
            await produced.wait()
            produced.clear()
            if ready:
                batch = ready[:]
                ready.clear()
                room.set()
                yield batch
            if finished and not ready:
                if failure:
                    raise failure[0]
                return
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
