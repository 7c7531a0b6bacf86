"""The event log on the backend's real store (in-memory, or Redis): an append that also
closes the log, as a run's last write does."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from services.orchestrator.eventlog import (
    Entry,
    EventLog,
    LogExists,
    LogLost,
    RedisEventLog,
    open_event_log,
)
from shared.settings import Settings

EVENTS: list[Entry] = [(seq, f"event {seq}".encode()) for seq in range(1, 7)]


class Wire:
    """What a RedisEventLog's connections send to Redis: each send is one round trip (the
    log waits for its replies before the next). It can also lose the reply of the next
    write of several events (one script call) once Redis has done it, as a dropped
    connection does."""

    def __init__(self, log: RedisEventLog) -> None:
        self.round_trips = 0
        self.lose_next_write_reply = False
        wire = self

        class WatchedConnection(Connection):
            async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
                wire.round_trips += 1
                packed = command if isinstance(command, bytes) else b"".join(command)
                self.sent_write = b"EVALSHA" in packed
                await super().send_packed_command(command, check_health)

            async def read_response(self, *args: Any, **kwargs: Any) -> Any:
                response = await super().read_response(*args, **kwargs)
                if wire.lose_next_write_reply and getattr(self, "sent_write", False):
                    wire.lose_next_write_reply = False
                    raise RedisConnectionError("the reply was lost")
                return response

        # Before the log's first command: every connection of its pool is watched.
        log.redis.connection_pool.connection_class = WatchedConnection


@pytest.fixture
async def log(settings: Settings) -> AsyncIterator[EventLog]:
    event_log = open_event_log(settings.event_log_url, 60, settings.event_log_prefix)
    yield event_log
    await event_log.aclose()


def new_key() -> str:
    return f"alice/{uuid.uuid4().hex}"


async def end_markers(log: EventLog, key: str) -> int:
    """How many entries of the run's Redis stream end it (readers stop at the first)."""
    assert isinstance(log, RedisEventLog)
    raw = await log.redis.xrange(log.prefix + key)
    return sum(1 for _, fields in raw if b"e" not in fields)


async def test_a_closing_append_stores_the_events_and_closes_the_log_in_one_round_trip(
    log: EventLog,
) -> None:
    key = new_key()
    wire = Wire(log) if isinstance(log, RedisEventLog) else None
    await log.append(key, EVENTS[:2])
    if wire is not None:
        wire.round_trips = 0  # the connection is open: no handshake counted below
    await log.append(key, EVENTS[2:], close=True)
    if wire is not None:
        assert wire.round_trips == 1
    assert await log.read(key, 0) == (EVENTS, True)
    assert await log.read(key, len(EVENTS)) == ([], True)  # a resume after the last event
    if isinstance(log, RedisEventLog):
        assert 0 < await log.redis.ttl(log.prefix + key) <= 60  # the retention, not a day


async def test_a_run_written_in_one_closing_append_is_kept_for_the_retention(
    log: EventLog,
) -> None:
    key = new_key()
    await log.append(key, EVENTS, close=True)
    assert await log.read(key, 0) == (EVENTS, True)
    if isinstance(log, RedisEventLog):
        assert 0 < await log.redis.ttl(log.prefix + key) <= 60


async def test_a_follower_sees_every_event_then_the_end_of_a_closing_append(
    log: EventLog,
) -> None:
    key = new_key()
    await log.append(key, EVENTS[:1])
    following = asyncio.Event()

    async def follow() -> list[Entry]:
        seen = []
        async for entry in log.follow(key, 0):
            seen.append(entry)
            following.set()  # past what was stored: now it waits for new events
        return seen

    follower = asyncio.create_task(follow())
    await following.wait()
    await log.append(key, EVENTS[1:3])
    await log.append(key, EVENTS[3:], close=True)
    assert await asyncio.wait_for(follower, 5) == EVENTS


@pytest.mark.parametrize("after", [len(EVENTS) + 1, 10**13, 2**53, 2**63 - 1])
async def test_following_a_closed_log_from_past_its_end_ends_at_once(
    log: EventLog, after: int
) -> None:
    # On Redis the end marker's id is a time (about 1.8e12 ms): a resume past it must still
    # see that the log is closed, not wait for events that never come.
    key = new_key()
    await log.append(key, EVENTS, close=True)
    assert await log.read(key, after) == ([], True)

    async def follow() -> list[Entry]:
        return [entry async for entry in log.follow(key, after)]

    assert await asyncio.wait_for(follow(), 2) == []


@pytest.mark.parametrize("events", [EVENTS[4:5], EVENTS[3:]], ids=["one event", "events"])
async def test_a_closing_append_to_a_lost_log_raises_log_lost_and_leaves_no_log(
    log: EventLog, events: list[Entry]
) -> None:
    key = new_key()  # a run whose log was lost after its first events
    with pytest.raises(LogLost):
        await log.append(key, events, close=True)
    assert not await log.exists(key)
    with pytest.raises(KeyError):
        await log.read(key, 0)


async def test_a_closing_append_repeated_after_its_reply_was_lost_stores_once_and_ends_once(
    log: EventLog,
) -> None:
    key = new_key()
    wire = Wire(log) if isinstance(log, RedisEventLog) else None
    await log.append(key, EVENTS[:2])
    if wire is not None:
        # Redis did the write, but its reply was lost: redis-py resends it.
        wire.lose_next_write_reply = True
        await log.append(key, EVENTS[2:], close=True)
        assert not wire.lose_next_write_reply
    await log.append(key, EVENTS[2:], close=True)  # as the writer's retry does
    assert await log.read(key, 0) == (EVENTS, True)
    assert [entry async for entry in log.follow(key, 0)] == EVENTS
    if isinstance(log, RedisEventLog):
        assert await end_markers(log, key) == 1


@pytest.mark.parametrize("repeat", [EVENTS[2:3], EVENTS[1:3]], ids=["one event", "events"])
async def test_an_append_repeated_after_its_reply_was_lost_is_stored_once(
    log: EventLog, repeat: list[Entry]
) -> None:
    key = new_key()
    await log.append(key, EVENTS[:3])
    await log.append(key, repeat)
    await log.append(key, EVENTS[3:])
    assert await log.read(key, 0) == (EVENTS, False)


async def test_an_append_of_other_events_under_stored_numbers_is_refused(log: EventLog) -> None:
    key = new_key()
    await log.append(key, EVENTS[:3])
    with pytest.raises((ValueError, ResponseError)):
        await log.append(key, [(3, b"another event 3"), (4, b"event 4")], close=True)
    assert await log.read(key, 0) == (EVENTS[:3], False)  # nothing of the refused write


async def test_a_closed_log_takes_no_new_event_and_ends_once(log: EventLog) -> None:
    key = new_key()
    await log.append(key, EVENTS[:3], close=True)
    with pytest.raises((ValueError, ResponseError)):
        await log.append(key, EVENTS[3:4])  # a replica back after the sweeper ended its run
    with pytest.raises((ValueError, ResponseError)):
        await log.append(key, EVENTS[3:])
    await log.close(key)  # closing again changes nothing
    assert await log.read(key, 0) == (EVENTS[:3], True)
    if isinstance(log, RedisEventLog):
        assert await end_markers(log, key) == 1


async def test_closing_a_log_that_does_not_exist_creates_none(log: EventLog) -> None:
    key = new_key()
    await log.close(key)
    await log.append(key, [], close=True)
    assert not await log.exists(key)


async def test_a_first_event_finding_another_runs_log_is_log_exists_and_writes_nothing(
    log: EventLog,
) -> None:
    key = new_key()
    await log.append(key, EVENTS[:2])
    with pytest.raises(LogExists):
        await log.append(key, [(1, b"another run's first event")])
    await log.append(key, EVENTS[:1])  # the same first event again: a resent write
    assert await log.read(key, 0) == (EVENTS[:2], False)
    await log.close(key)
    with pytest.raises(LogExists):  # a finished run's log, within its retention
        await log.append(key, [(1, b"another run's first event")], close=True)
    assert await log.read(key, 0) == (EVENTS[:2], True)


async def test_many_runs_writing_at_once_all_get_through(log: EventLog) -> None:
    # More at once than redis-py's default pool allows (100): a write waits for a connection.
    keys = [new_key() for _ in range(300)]
    await asyncio.gather(*(log.append(key, EVENTS, close=True) for key in keys))
    for key in keys[::30]:
        assert await log.read(key, 0) == (EVENTS, True)


async def test_deleting_logs_drops_exactly_the_named_ones(log: EventLog) -> None:
    kept, gone, running = new_key(), new_key(), new_key()
    for key in (kept, gone):
        await log.append(key, EVENTS[:2], close=True)
    await log.append(running, EVENTS[:1])
    assert await log.delete([gone, running, new_key()]) == 2
    assert not await log.exists(gone) and not await log.exists(running)
    assert await log.read(kept, 0) == (EVENTS[:2], True)
    assert await log.delete([]) == 0


async def test_deleting_an_owners_logs_leaves_other_owners_alone(log: EventLog) -> None:
    owner = f"o{uuid.uuid4().hex[:8]}"
    # An owner id that extends this one shares its first characters, not its "owner/".
    mine = [f"{owner}/r1", f"{owner}/r2"]
    theirs = [f"{owner}x/r1", new_key()]
    for key in mine + theirs:
        await log.append(key, EVENTS[:1], close=True)
    assert await log.delete_prefix(f"{owner}/") == 2
    assert [await log.exists(k) for k in mine + theirs] == [False, False, True, True]
    assert await log.delete_prefix(f"{owner}/") == 0
