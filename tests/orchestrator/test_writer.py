"""The run event writer on the backend's real event log (in-memory, or Redis)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence

import pytest
from agentmesh.type.v1 import run_event_pb2

from services.orchestrator import convert
from services.orchestrator.eventlog import (
    Entry,
    EventLog,
    LogExists,
    LogLost,
    RedisEventLog,
    open_event_log,
)
from services.orchestrator.writer import LogUnavailable, RunEventWriter
from shared.settings import Settings


class CountingLog:
    """The backend's event log, counting the append round trips and noting every write:
    ("append", sequence numbers, closes too) or ("close",)."""

    def __init__(self, inner: EventLog) -> None:
        self.inner = inner
        self.appends = 0
        self.writes: list[tuple[object, ...]] = []

    async def append(self, key: str, events: Sequence[Entry], *, close: bool = False) -> None:
        self.appends += 1
        self.writes.append(("append", [seq for seq, _ in events], close))
        await self.inner.append(key, events, close=close)

    async def close(self, key: str) -> None:
        self.writes.append(("close",))
        await self.inner.close(key)

    async def read(self, key: str, after: int) -> tuple[list[Entry], bool]:
        return await self.inner.read(key, after)

    async def exists(self, key: str) -> bool:
        return await self.inner.exists(key)

    # A double of the event log: its follow yields nothing.
    def follow(self, key: str, after: int):  # type: ignore[no-untyped-def]
        return self.inner.follow(key, after)

    # A double of the event log (as above).
    def follow_batches(self, key: str, after: int):  # type: ignore[no-untyped-def]
        return self.inner.follow_batches(key, after)

    async def aclose(self) -> None:
        await self.inner.aclose()


def delta(i: int) -> run_event_pb2.RunEvent:
    return run_event_pb2.RunEvent(
        text_message_content=run_event_pb2.TextMessageContent(message_id="m", delta=str(i))
    )


async def test_events_are_numbered_stamped_and_stored_in_order(settings: Settings) -> None:
    log = open_event_log(settings.event_log_url, 60)
    key = f"alice/{uuid.uuid4().hex}"
    writer = RunEventWriter(log, key, "run-1", "thread-1")
    try:
        assert [writer.emit(e) for e in (convert.run_started(), delta(1), delta(2))] == [1, 2, 3]
        await writer.close()
        entries, closed = await log.read(key, 0)
    finally:
        await log.aclose()
    assert closed
    events = [run_event_pb2.RunEvent.FromString(data) for _, data in entries]
    assert [e.sequence for e in events] == [seq for seq, _ in entries] == [1, 2, 3]
    assert {(e.run_id, e.thread_id) for e in events} == {("run-1", "thread-1")}
    assert all(e.timestamp_ms > 0 for e in events)


async def test_events_emitted_together_are_stored_in_few_round_trips(settings: Settings) -> None:
    log = CountingLog(open_event_log(settings.event_log_url, 60))
    key = f"alice/{uuid.uuid4().hex}"
    writer = RunEventWriter(log, key, "run-1", "thread-1")
    try:
        for i in range(200):
            writer.emit(delta(i))
        await writer.close()
        entries, _ = await log.read(key, 0)
    finally:
        await log.aclose()
    assert [seq for seq, _ in entries] == list(range(1, 201))
    assert log.appends <= 2


async def test_a_follower_sees_every_event_once_and_stops_at_close(settings: Settings) -> None:
    log = open_event_log(settings.event_log_url, 60)
    key = f"alice/{uuid.uuid4().hex}"
    writer = RunEventWriter(log, key, "run-1", "thread-1")
    try:
        writer.emit(convert.run_started())
        await writer.flush()

        async def follow() -> list[int]:
            return [seq async for seq, _ in log.follow(key, 0)]

        follower = asyncio.create_task(follow())
        for i in range(50):
            writer.emit(delta(i))
            if i % 10 == 0:
                await asyncio.sleep(0.001)
        await writer.close()
        seen = await asyncio.wait_for(follower, 5)
    finally:
        await log.aclose()
    assert seen == list(range(1, 52))


async def test_a_batch_follower_gets_what_is_stored_at_once_then_each_new_append(
    settings: Settings,
) -> None:
    log = open_event_log(settings.event_log_url, 60)
    key = f"alice/{uuid.uuid4().hex}"
    entries = [(i, delta(i).SerializeToString()) for i in range(1, 7)]
    try:
        assert not await log.exists(key)
        await log.append(key, entries[:3])
        assert await log.exists(key)
        batches = log.follow_batches(key, 1)
        assert await anext(batches) == entries[1:3]  # everything stored after 1, together
        await log.append(key, entries[3:5])
        assert await anext(batches) == entries[3:5]
        await log.append(key, entries[5:])
        await log.close(key)
        assert [b async for b in batches] == [entries[5:]]  # then the end of the log
        assert [e async for e in log.follow(key, 0)] == entries
    finally:
        await log.aclose()


async def test_a_local_follower_gets_exactly_what_the_log_stored(settings: Settings) -> None:
    log = open_event_log(settings.event_log_url, 60)
    key = f"alice/{uuid.uuid4().hex}"
    writer = RunEventWriter(log, key, "run-1", "thread-1")
    try:
        writer.emit(convert.run_started())

        async def follow(after: int) -> list[Entry]:
            return [entry async for batch in writer.follow_batches(after) for entry in batch]

        from_start = asyncio.create_task(follow(0))
        for i in range(50):
            writer.emit(delta(i))
            if i % 10 == 0:
                await asyncio.sleep(0.001)
        resumed = asyncio.create_task(follow(20))
        await writer.close()
        local = await asyncio.wait_for(from_start, 5)
        local_resumed = await asyncio.wait_for(resumed, 5)
        stored, closed = await log.read(key, 0)
    finally:
        await log.aclose()
    assert closed and local == stored and local_resumed == stored[20:]
    assert [seq for seq, _ in local] == list(range(1, 52))


class FailingLog(CountingLog):
    """Stores the first append, then fails every write."""

    async def append(self, key: str, events: Sequence[Entry], *, close: bool = False) -> None:
        self.appends += 1
        self.writes.append(("append", [seq for seq, _ in events], close))
        if self.appends > 1:
            raise ConnectionError("event log down")
        await self.inner.append(key, events, close=close)

    async def close(self, key: str) -> None:
        self.writes.append(("close",))
        raise ConnectionError("event log down")


@pytest.mark.parametrize("breaks", ["before the close", "on the closing append"])
async def test_a_local_follower_of_a_broken_log_gets_what_was_stored_then_an_error(
    settings: Settings, breaks: str
) -> None:
    log = FailingLog(open_event_log(settings.event_log_url, 60))
    key = f"alice/{uuid.uuid4().hex}"
    writer = RunEventWriter(log, key, "run-1", "thread-1", retry_seconds=0.1)
    got: list[int] = []
    try:
        writer.emit(convert.run_started())
        await writer.flush()
        writer.emit(delta(1))
        if breaks == "before the close":
            await writer.flush()
        await writer.close()
        with pytest.raises(LogUnavailable):
            async for batch in writer.follow_batches(0):
                got.extend(seq for seq, _ in batch)
        entries, closed = await log.read(key, 0)
    finally:
        await log.aclose()
    assert got == [1]  # never an event the log does not hold
    assert [seq for seq, _ in entries] == [1] and not closed
    assert ("close",) not in log.writes  # a log with a gap is not marked complete


async def test_a_live_log_is_kept_a_day_and_a_closed_one_for_its_retention(
    settings: Settings,
) -> None:
    log = open_event_log(settings.event_log_url, 60, settings.event_log_prefix)
    key = f"alice/{uuid.uuid4().hex}"
    try:
        await log.append(key, [(1, b"a")])
        await log.append(key, [(2, b"b")])  # a single event: one XADD, no EXPIRE
        await log.append(key, [(3, b"c"), (4, b"d")])
        if isinstance(log, RedisEventLog):
            redis_key = settings.event_log_prefix + key
            assert await log.redis.ttl(redis_key) > 86_000  # a day while the run lives
            await log.close(key)
            assert 0 < await log.redis.ttl(redis_key) <= 60  # the retention once closed
        else:
            await log.close(key)
        entries, closed = await log.read(key, 0)
        assert [seq for seq, _ in entries] == [1, 2, 3, 4] and closed
    finally:
        await log.aclose()


async def test_a_lost_log_is_not_recreated_by_a_single_event(settings: Settings) -> None:
    log = open_event_log(settings.event_log_url, 60, settings.event_log_prefix)
    try:
        with pytest.raises(LogLost):
            await log.append(f"alice/{uuid.uuid4().hex}", [(5, b"e")])
        assert not await log.exists("alice/never")
    finally:
        await log.aclose()


def finished() -> run_event_pb2.RunEvent:
    return convert.run_finished(run_event_pb2.RUN_OUTCOME_SUCCESS)


async def local_entries(writer: RunEventWriter) -> list[Entry]:
    return [entry async for batch in writer.follow_batches(0) for entry in batch]


async def all_entries(entries: AsyncIterator[Entry]) -> list[Entry]:
    return [entry async for entry in entries]


async def test_a_run_ends_with_one_write_when_its_last_event_is_all_that_is_queued(
    settings: Settings,
) -> None:
    log = CountingLog(open_event_log(settings.event_log_url, 60))
    key = f"alice/{uuid.uuid4().hex}"
    writer = RunEventWriter(log, key, "run-1", "thread-1")
    try:
        writer.emit(convert.run_started())
        writer.emit(delta(1))
        await writer.flush()
        local = asyncio.create_task(local_entries(writer))
        remote = asyncio.create_task(all_entries(log.follow(key, 0)))
        log.writes.clear()
        writer.emit(finished())
        await writer.close()  # right after the emit: the flusher has not run yet
        stored, closed = await log.read(key, 0)
        seen_locally = await asyncio.wait_for(local, 5)
        seen_remotely = await asyncio.wait_for(remote, 5)
    finally:
        await log.aclose()
    assert log.writes == [("append", [3], True)]
    assert closed and [seq for seq, _ in stored] == [1, 2, 3]
    assert seen_locally == seen_remotely == stored


class GatedLog(CountingLog):
    """Holds its first append in flight until `release` is set."""

    def __init__(self, inner: EventLog) -> None:
        super().__init__(inner)
        self.in_flight = asyncio.Event()
        self.release = asyncio.Event()

    async def append(self, key: str, events: Sequence[Entry], *, close: bool = False) -> None:
        if not self.in_flight.is_set():
            self.in_flight.set()
            await self.release.wait()
        await super().append(key, events, close=close)


async def test_a_close_during_an_append_sends_what_was_queued_since_with_the_close(
    settings: Settings,
) -> None:
    log = GatedLog(open_event_log(settings.event_log_url, 60))
    key = f"alice/{uuid.uuid4().hex}"
    writer = RunEventWriter(log, key, "run-1", "thread-1")
    try:
        writer.emit(convert.run_started())
        local = asyncio.create_task(local_entries(writer))
        await log.in_flight.wait()
        writer.emit(finished())
        closing = asyncio.create_task(writer.close())
        # The event loop runs ready tasks in the order they became ready: close() starts
        # before the held append goes on.
        log.release.set()
        await closing
        stored, closed = await log.read(key, 0)
        seen_locally = await asyncio.wait_for(local, 5)
    finally:
        await log.aclose()
    assert log.writes == [("append", [1], False), ("append", [2], True)]
    assert closed and [seq for seq, _ in stored] == [1, 2] and seen_locally == stored


async def test_a_close_during_the_last_append_closes_the_log_after_it(settings: Settings) -> None:
    log = GatedLog(open_event_log(settings.event_log_url, 60))
    key = f"alice/{uuid.uuid4().hex}"
    writer = RunEventWriter(log, key, "run-1", "thread-1")
    try:
        writer.emit(finished())
        local = asyncio.create_task(local_entries(writer))
        await log.in_flight.wait()
        closing = asyncio.create_task(writer.close())
        log.release.set()
        await closing
        stored, closed = await log.read(key, 0)
        seen_locally = await asyncio.wait_for(local, 5)
    finally:
        await log.aclose()
    assert log.writes == [("append", [1], False), ("close",)]
    assert closed and [seq for seq, _ in stored] == [1] and seen_locally == stored


class LostReplyLog(CountingLog):
    """Does the first closing append, then fails as if its reply was lost."""

    lost = False

    async def append(self, key: str, events: Sequence[Entry], *, close: bool = False) -> None:
        await super().append(key, events, close=close)
        if close and not self.lost:
            self.lost = True
            raise ConnectionError("the reply was lost")


async def test_a_closing_append_retried_after_its_reply_was_lost_ends_the_run_normally(
    settings: Settings,
) -> None:
    log = LostReplyLog(open_event_log(settings.event_log_url, 60, settings.event_log_prefix))
    key = f"alice/{uuid.uuid4().hex}"
    writer = RunEventWriter(log, key, "run-1", "thread-1")
    try:
        writer.emit(convert.run_started())
        await writer.flush()
        writer.emit(delta(1))
        writer.emit(finished())
        await writer.close()
        seen_locally = await local_entries(writer)  # no LogUnavailable
        stored, closed = await log.read(key, 0)
        if isinstance(log.inner, RedisEventLog):
            raw = await log.inner.redis.xrange(settings.event_log_prefix + key)
            assert sum(1 for _, fields in raw if b"e" not in fields) == 1  # one end marker
    finally:
        await log.aclose()
    assert log.writes == [("append", [1], False)] + [("append", [2, 3], True)] * 2
    assert closed and [seq for seq, _ in stored] == [1, 2, 3] and seen_locally == stored


async def test_opening_stores_the_first_event_before_anything_else(settings: Settings) -> None:
    log = CountingLog(open_event_log(settings.event_log_url, 60))
    key = f"alice/{uuid.uuid4().hex}"
    writer = RunEventWriter(log, key, "run-1", "thread-1")
    try:
        local = asyncio.create_task(local_entries(writer))
        await writer.open(convert.run_started())
        assert log.writes == [("append", [1], False)]  # stored when open() returns
        writer.emit(finished())
        await writer.close()
        stored, closed = await log.read(key, 0)
        seen_locally = await asyncio.wait_for(local, 5)
    finally:
        await log.aclose()
    assert [run_event_pb2.RunEvent.FromString(d).WhichOneof("payload") for _, d in stored] == [
        "run_started",
        "run_finished",
    ]
    assert closed and seen_locally == stored


async def test_opening_on_the_log_of_an_earlier_run_is_log_exists_and_writes_nothing(
    settings: Settings,
) -> None:
    log = CountingLog(open_event_log(settings.event_log_url, 60))
    key = f"alice/{uuid.uuid4().hex}"
    first = RunEventWriter(log, key, "run-1", "thread-1")
    try:
        await first.open(convert.run_started())
        first.emit(delta(1))
        await first.flush()  # the earlier run is still going: its log is not closed
        again = RunEventWriter(log, key, "run-1", "thread-2")  # the run_id used again
        with pytest.raises(LogExists):
            await again.open(convert.run_started())
        tried = list(log.writes)
        again.abandon()
        for _ in range(3):
            await asyncio.sleep(0)  # time for an abandoned writer to write: it does not
        assert log.writes == tried
        entries, closed = await log.read(key, 0)
        assert [seq for seq, _ in entries] == [1, 2] and not closed
        await first.close()  # the earlier run ends normally
        assert (await log.read(key, 0))[1]
    finally:
        await log.aclose()
