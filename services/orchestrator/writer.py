"""The run's event writer: numbers each event and stores it in the run's event log before
anyone can receive it (every reader, including StartRun's own caller, reads the log).

The event-log write is on the hot path (one per streamed token), so it is a group commit:
`emit` only numbers and queues; one flusher task appends everything queued since its last
append in a single call. At rest that is one event per append; under load, many. The append
of what is queued when the writer closes also closes the log: a run's end is one write.

Readers on this replica (the run's own StartRun caller, above all) follow the writer itself
(`follow_batches`): it hands out exactly what the log has stored, in the same batches, with
no round trip to the log. Readers elsewhere follow the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial

from agentmesh.type.v1 import run_event_pb2

from services.orchestrator.core import Sequencer
from services.orchestrator.eventlog import Entry, EventLog, Feed, LogLost
from shared import metrics

log = logging.getLogger("agentmesh.orchestrator.events")

# Queued events above which the producer waits for the log (backpressure).
MAX_QUEUED = 1000


class LogUnavailable(Exception):
    """The run's event log failed: its stream cannot go on (the run's result is in history)."""


class RunEventWriter:
    def __init__(
        self,
        event_log: EventLog,
        key: str,
        run_id: str,
        thread_id: str,
        *,
        retry_seconds: float = 5.0,
    ) -> None:
        self.event_log = event_log
        self.key = key
        self.run_id = run_id
        self.thread_id = thread_id
        self.retry_seconds = retry_seconds
        self._sequence = Sequencer()
        self._queued: list[Entry] = []
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self.broken = False
        self._closing = False
        # What the log has stored so far, for local readers (closed when the writer is).
        self._stored = Feed()
        self._flusher = asyncio.create_task(self._flush_loop(), name=f"events {key}")

    @property
    def last_sequence(self) -> int:
        return self._sequence.last

    def _entry(self, event: run_event_pb2.RunEvent) -> Entry:
        """Number `event` and stamp it: its log entry."""
        event.run_id = self.run_id
        event.thread_id = self.thread_id
        event.sequence = self._sequence.next()
        event.timestamp_ms = time.time_ns() // 1_000_000
        metrics.event_emitted(event)
        return event.sequence, event.SerializeToString()

    async def open(self, first: run_event_pb2.RunEvent) -> None:
        """Store the run's first event, which creates its log, before anything else is
        emitted; LogExists when a log is under the key already (the run_id was used)."""
        entry = self._entry(first)
        await self.event_log.append(self.key, [entry])
        self._stored.extend([entry])

    def abandon(self) -> None:
        """Drop a writer whose open() failed: nothing of it reaches the log."""
        self._flusher.cancel()
        self._stored.close()

    def emit(self, event: run_event_pb2.RunEvent) -> int:
        """Number `event`, stamp it, queue it for the log; returns its sequence number."""
        entry = self._entry(event)
        self._queued.append(entry)
        self._drained.clear()
        self._wake.set()
        return entry[0]

    async def pace(self) -> None:
        """Wait for the log when too much is queued, so a slow log slows the run down
        instead of growing memory without bound."""
        if len(self._queued) >= MAX_QUEUED:
            await self._drained.wait()

    async def flush(self) -> None:
        await self._drained.wait()

    async def close(self) -> None:
        """Store everything emitted and mark the log complete (followers stop); nothing may
        be emitted after."""
        self._closing = True
        self._wake.set()
        # Shielded: a run cancelled while it ends still stores what it emitted and ends its log.
        await asyncio.shield(self._flusher)

    async def follow_batches(self, after: int) -> AsyncIterator[list[Entry]]:
        """What the log stores after `after`, in the batches it was stored in, until the
        writer closes; LogUnavailable when the log failed (nothing after is stored)."""
        async for batch in self._stored.batches(after):
            yield batch
        if self.broken:
            raise LogUnavailable(self.key)

    async def _flush_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            closed = False
            while self._queued and not closed:
                batch, self._queued = self._queued, []
                # Nothing is emitted after close(): a batch taken after it is the last, and
                # its append closes the log too (one write, not two). If close() came during
                # the append before it and nothing was queued since, a plain close follows.
                closed = self._closing
                await self._append(batch, close=closed)
            self._drained.set()
            if self._closing:
                if not closed and not self.broken:
                    await self._close_log()  # everything was stored already
                self._stored.close()
                return

    async def _append(self, batch: list[Entry], *, close: bool) -> None:
        if self.broken:
            return
        try:
            await self._with_retry(partial(self.event_log.append, self.key, batch, close=close))
            self._stored.extend(batch)
        except Exception:
            # The run goes on and its result is stored in history; only its stream is lost.
            # Later batches are dropped, and the log is not closed: a gap would be worse.
            self.broken = True
            self._stored.close()
            log.exception(
                "run event log unavailable; the run's stream is lost",
                extra={"fields": {"key": self.key}},
            )

    async def _close_log(self) -> None:
        try:
            await self._with_retry(partial(self.event_log.close, self.key))
        except Exception:
            log.exception("cannot close the run's event log", extra={"fields": {"key": self.key}})

    async def _with_retry(self, write: Callable[[], Awaitable[None]]) -> None:
        """`write()` until it succeeds or the retry budget is spent."""
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.05
        while True:
            try:
                await write()
                return
            except LogLost:
                raise
            except Exception:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("event log write failed; retrying", extra={"fields": {"key": self.key}})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
