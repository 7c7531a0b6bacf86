"""The run event log: every run's events, in sequence order, readable and followable.

The orchestrator appends each event (already numbered 1, 2, 3, ... per run) before anyone
receives it; a reader replays what is stored after a sequence number, then follows live
until the run's log is closed. Embedded mode keeps it in memory; the distributed mode keeps
one Redis stream per run whose entry ids are the sequence numbers, with a retention TTL once
the run ends.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

# redis-py is imported by RedisEventLog, not here: the embedded event log (memory://) never
# needs it, and it is ~11 MB of a process's idle RSS (issue 24).

Entry = tuple[int, bytes]


class LogLost(Exception):
    """The run's log is gone (retention ended, or its store restarted and lost it) while
    its run still writes: appending would start a log with a gap, so nothing is written."""


# Characters Redis's SCAN MATCH treats as a glob (escaped in a literal prefix).
_GLOB_SPECIAL = re.compile(r"[*?\[\]\\]")


class LogExists(Exception):
    """A run's first event found the log of another run under its key (a run_id used
    before, within the retention): nothing is written."""


class EventLog(Protocol):
    async def append(self, key: str, events: Sequence[Entry], *, close: bool = False) -> None:
        """Store events of a run, all or none; their sequence numbers must follow the stored
        ones, or repeat stored ones unchanged (a write retried after its reply was lost),
        which are kept once; a closed log takes no new event. LogLost when they do not start
        at 1 and the log does not exist; LogExists when a first event (sequence 1) finds
        another one stored. With `close`, the same write also does what `close` does."""

    async def close(self, key: str) -> None:
        """Mark the run's log complete; it is kept for the retention period. Closing a log
        that does not exist does nothing."""

    async def read(self, key: str, after: int) -> tuple[list[Entry], bool]:
        """Stored events after `after`, and whether the log is closed. KeyError if unknown."""

    async def exists(self, key: str) -> bool:
        """Whether the run has a log (it was started, and its retention has not ended)."""

    def follow(self, key: str, after: int) -> AsyncIterator[Entry]:
        """Stored events after `after`, then live ones, until the log is closed."""

    def follow_batches(self, key: str, after: int) -> AsyncIterator[list[Entry]]:
        """What `follow` yields, grouped: each batch is everything stored and not yet
        yielded when the reader asked (never empty)."""

    async def delete(self, keys: Sequence[str]) -> int:
        """Drop these logs (a deletion of their runs' data); how many existed."""

    async def delete_prefix(self, prefix: str) -> int:
        """Drop every log whose key starts with `prefix` (a deletion of their runs' data),
        running or not; how many were dropped."""

    async def keys(self, prefix: str) -> list[str]:
        """The keys of the logs starting with `prefix` (an export of their runs' data)."""

    async def aclose(self) -> None:
        """Release connections."""


class Feed:
    """Entries appended in order, which readers follow: each read takes everything appended
    since that reader's last one (the in-memory log's runs, and a run's writer)."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.closed = False
        self._changed = asyncio.Event()

    def extend(self, entries: Sequence[Entry]) -> None:
        self.entries.extend(entries)
        self._signal()

    def close(self) -> None:
        self.closed = True
        self._signal()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def batches(self, after: int) -> AsyncIterator[list[Entry]]:
        """The entries after the first `after`, in batches, until the feed is closed."""
        position = max(after, 0)
        while True:
            changed = self._changed
            if position < len(self.entries):
                batch = self.entries[position:]
                position += len(batch)
                yield batch
                continue  # more may have come while the batch was consumed
            if self.closed:
                return
            await changed.wait()


@dataclass
class _RunLog:
    feed: Feed = field(default_factory=Feed)
    closed_at: float = 0.0
    size: int = 0  # bytes held, as counted against the log's memory budget


# What an entry costs beyond its payload (the tuple, the int, the bytes object's header),
# and what a run's log costs besides its entries (its objects, its key, the index entries),
# so that the budget is close to the memory the logs really take.
_ENTRY_OVERHEAD = 120
_LOG_OVERHEAD = 1024


class InMemoryEventLog:
    """One process's event log (embedded mode, tests): a list per run. A finished run's log
    is kept for the retention period, and finished logs are dropped oldest first as soon as
    all logs together hold more than `max_bytes`, so memory stays bounded under any load.
    A running run's log is never dropped."""

    def __init__(self, retention_seconds: float = 3600.0, max_bytes: int = 32 * 2**20) -> None:
        self.retention_seconds = retention_seconds
        self.max_bytes = max_bytes
        self._bytes = 0
        self._runs: dict[str, _RunLog] = {}
        # Closed logs in the order they closed: eviction looks only at the front.
        self._closed: deque[tuple[float, str]] = deque()

    @property
    def bytes_held(self) -> int:
        """What all logs take, as counted against `max_bytes`."""
        return self._bytes

    def _evict(self) -> None:
        cutoff = time.monotonic() - self.retention_seconds
        while self._closed and (self._closed[0][0] < cutoff or self._bytes > self.max_bytes):
            closed_at, key = self._closed.popleft()
            log = self._runs.get(key)
            if log is not None and log.closed_at == closed_at:
                del self._runs[key]
                self._bytes -= log.size

    async def append(self, key: str, events: Sequence[Entry], *, close: bool = False) -> None:
        log = self._runs.get(key)
        if log is None:
            if not events:
                return  # closing a log that does not exist does nothing
            if events[0][0] != 1:
                raise LogLost(key)
            self._evict()
            log = self._runs[key] = _RunLog(size=_LOG_OVERHEAD)
            self._bytes += _LOG_OVERHEAD
        entries = log.feed.entries
        if events and events[0][0] == 1 and entries and entries[0] != events[0]:
            raise LogExists(key)
        # Events repeated unchanged are kept once, as the Redis log does, so the twins agree.
        repeated = 0
        for seq, data in events:
            if not 0 < seq <= len(entries) or entries[seq - 1] != (seq, data):
                break
            repeated += 1
        events = events[repeated:]
        if events and log.feed.closed:
            raise ValueError(f"event log {key}: the log is closed")
        last = entries[-1][0] if entries else 0
        for seq, _ in events:
            if seq != last + 1:
                raise ValueError(f"event log {key}: sequence {seq} does not follow {last}")
            last = seq
        added = sum(len(data) + _ENTRY_OVERHEAD for _, data in events)
        log.size += added
        self._bytes += added
        log.feed.extend(events)
        if close:
            await self.close(key)

    async def close(self, key: str) -> None:
        log = self._runs.get(key)
        if log is None:
            return
        if not log.feed.closed:
            log.closed_at = time.monotonic()
            self._closed.append((log.closed_at, key))
        log.feed.close()

    async def exists(self, key: str) -> bool:
        return key in self._runs

    async def read(self, key: str, after: int) -> tuple[list[Entry], bool]:
        log = self._runs.get(key)
        if log is None:
            raise KeyError(key)
        # Sequence numbers are dense from 1, so the index of seq n is n - 1.
        return log.feed.entries[max(after, 0) :], log.feed.closed

    async def follow(self, key: str, after: int) -> AsyncIterator[Entry]:
        async for batch in self.follow_batches(key, after):
            for entry in batch:
                yield entry

    async def follow_batches(self, key: str, after: int) -> AsyncIterator[list[Entry]]:
        log = self._runs.get(key)
        if log is None:
            raise KeyError(key)
        async for batch in log.feed.batches(after):
            yield batch

    async def delete(self, keys: Sequence[str]) -> int:
        return self._drop([k for k in dict.fromkeys(keys) if k in self._runs])

    async def delete_prefix(self, prefix: str) -> int:
        return self._drop([k for k in self._runs if k.startswith(prefix)])

    async def keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self._runs if k.startswith(prefix))

    def _drop(self, gone: list[str]) -> int:
        for key in gone:
            log = self._runs.pop(key)
            log.feed.close()  # a follower ends instead of waiting for events that never come
            self._bytes -= log.size
        # Their entries in _closed no longer match a log, so eviction skips them.
        return len(gone)

    async def aclose(self) -> None:
        self._runs.clear()


# The field of the entry that ends a run's stream: readers stop at it.
_END = b"end"

# One run's write, atomic (a script runs alone): KEYS[1] the stream; ARGV the TTL of a new
# stream, the retention, "1" to close the log, then (sequence, event) pairs in order.
# Events whose sequence numbers are stored already must be those very events (a write resent
# after its reply was lost): they are skipped; the others must follow the last stored one.
# Returns 1, or 0 when the log does not exist and the events do not start it (it was lost):
# then nothing is written. Anything else refuses the whole write and writes nothing (EXISTS:
# a first event finds another run's log).
_APPEND = """
local k = KEYS[1]
local close = ARGV[3] == '1'
local top = redis.call('XREVRANGE', k, '+', '-', 'COUNT', 1)
local last = 0
local closed = false
if #top == 0 then
  if #ARGV == 3 or ARGV[4] ~= '1' then return 0 end
else
  local fields = top[1][2]
  if fields[1] == 'end' then
    closed = true
    local prev = redis.call('XREVRANGE', k, '(' .. top[1][1], '-', 'COUNT', 1)
    if #prev > 0 then last = tonumber(string.match(prev[1][1], '^(%d+)-')) end
  else
    last = tonumber(string.match(top[1][1], '^(%d+)-'))
  end
end
local fresh = {}
for i = 4, #ARGV, 2 do
  local seq = tonumber(ARGV[i])
  if seq <= last then
    local stored = redis.call('XRANGE', k, seq .. '-0', seq .. '-0')
    if #stored == 0 or stored[1][2][2] ~= ARGV[i + 1] then
      if seq == 1 then return redis.error_reply('EXISTS the log holds another run') end
      return redis.error_reply('CONFLICT sequence ' .. seq .. ' holds another event')
    end
  elseif seq == last + #fresh / 2 + 1 then
    fresh[#fresh + 1] = ARGV[i]
    fresh[#fresh + 1] = ARGV[i + 1]
  else
    return redis.error_reply('GAP sequence ' .. seq .. ' does not follow ' .. last)
  end
end
if closed then
  if #fresh > 0 then return redis.error_reply('CLOSED the log is closed') end
  return 1
end
for i = 1, #fresh, 2 do
  redis.call('XADD', k, fresh[i] .. '-0', 'e', fresh[i + 1])
end
if close then
  redis.call('XADD', k, '*', 'end', '1')
  redis.call('EXPIRE', k, ARGV[2])
elseif #top == 0 then
  redis.call('EXPIRE', k, ARGV[1])
end
return 1
"""


# Connections of one RedisEventLog: for writes (waited for when all are busy), and at most
# for followers blocked in XREAD (each holds one while it waits).
_WRITE_CONNECTIONS = 64
_FOLLOWER_CONNECTIONS = 10_000


# What XRANGE / XREVRANGE / XREAD give per stream on a bytes connection (redis-py types
# them loosely): (entry id, fields) pairs.
_Entries = list[tuple[bytes, dict[bytes, bytes]]]


class RedisEventLog:
    """A Redis stream per run; entry id = "<seq>-0", so a resume is an XRANGE from seq+1.
    The end marker's id is the time, above every event's: once a log is closed no event can
    be added to it (a replica that comes back after the sweeper ended its run's log)."""

    def __init__(
        self, url: str, retention_seconds: int = 3600, prefix: str = "agentmesh:run:"
    ) -> None:
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import ExponentialBackoff, NoBackoff
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import ResponseError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        # What Redis answers to a command it refuses (as XADD an id not above the last).
        self._refused = ResponseError
        # A pooled connection that Redis closed (a restart, a failover) is dropped and the
        # command retried on a new one, instead of failing the first caller after it.
        retries: dict[str, Any] = {
            "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 3),
            "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        }
        # Writes and short reads share a bounded pool; a caller that finds every connection
        # busy waits for one (redis-py's default pool fails at once past 100 connections,
        # which many runs at once reach). Followers block in XREAD for seconds each: they
        # have connections of their own, so they never hold up the runs' writes.
        self.redis = aioredis.Redis.from_pool(
            aioredis.BlockingConnectionPool.from_url(
                url, max_connections=_WRITE_CONNECTIONS, timeout=10, **retries
            )
        )
        self._followers = aioredis.Redis.from_url(
            url, max_connections=_FOLLOWER_CONNECTIONS, **retries
        )
        # The health check's client: one connection, no retries of its own (the server's
        # check bounds its time), apart from the runs' writes.
        self._health = aioredis.Redis.from_url(url, max_connections=1, retry=Retry(NoBackoff(), 0))
        self.retention_seconds = retention_seconds
        self.prefix = prefix
        self._append = self.redis.register_script(_APPEND)

    async def check(self) -> None:
        """PING; raises when Redis cannot be reached (shared.server's dependency check)."""
        await self._health.ping()

    def _key(self, key: str) -> str:
        return self.prefix + key

    async def append(self, key: str, events: Sequence[Entry], *, close: bool = False) -> None:
        if not events and not close:
            return
        k = self._key(key)
        if len(events) == 1 and events[0][0] != 1 and not close:
            # The hot path (a streamed token while the log keeps up): one XADD, atomic by
            # itself. Only the first event creates the stream: a later one finding none
            # means the log was lost (a Redis restart); a log with a gap would give a
            # resuming reader a wrong stream.
            seq, data = events[0]
            try:
                added = await self.redis.xadd(k, {b"e": data}, id=f"{seq}-0", nomkstream=True)
            except self._refused:
                # Not above the last id: a resent write is fine, anything else is refused.
                await self._write(k, key, events, close=False)
                return
            if added is None:
                raise LogLost(key)
            return
        await self._write(k, key, events, close=close)

    async def _write(self, k: str, key: str, events: Sequence[Entry], *, close: bool) -> None:
        # A new stream lives at least a day (a live run's log, if its orchestrator dies);
        # closing sets the retention.
        args: list[Any] = [max(self.retention_seconds, 86_400), self.retention_seconds, int(close)]
        for seq, data in events:
            args += (seq, data)
        try:
            written = await self._append(keys=[k], args=args)
        except self._refused as error:
            if str(error).startswith("EXISTS"):
                raise LogExists(key) from None
            raise
        if not written and events:
            raise LogLost(key)

    async def close(self, key: str) -> None:
        await self._write(self._key(key), key, [], close=True)

    @staticmethod
    def _decode(raw: _Entries) -> tuple[list[Entry], bool]:
        entries: list[Entry] = []
        closed = False
        for entry_id, fields in raw:
            if _END in fields:
                closed = True
                continue
            entries.append((int(entry_id.split(b"-", 1)[0]), fields[b"e"]))
        return entries, closed

    async def exists(self, key: str) -> bool:
        return bool(await self.redis.exists(self._key(key)))

    async def read(self, key: str, after: int) -> tuple[list[Entry], bool]:
        k = self._key(key)
        raw = cast(
            _Entries, await self.redis.xrange(k, min=f"({max(after, 0)}-0" if after > 0 else "-")
        )
        if not raw:
            # Nothing after `after`, not even the end marker, whose id (a time) is below a
            # large enough `after`: whether the log exists and is closed is its last entry.
            return [], await self._closed(k, key)
        return self._decode(raw)

    async def _closed(self, k: str, key: str) -> bool:
        """Whether stream `k` ends with the end marker; KeyError when it does not exist."""
        top = cast(_Entries, await self.redis.xrevrange(k, count=1))
        if not top:
            raise KeyError(key)
        return _END in top[0][1]

    async def follow(self, key: str, after: int) -> AsyncIterator[Entry]:
        async for batch in self.follow_batches(key, after):
            for entry in batch:
                yield entry

    async def follow_batches(self, key: str, after: int) -> AsyncIterator[list[Entry]]:
        entries, closed = await self.read(key, after)
        if entries:
            yield entries
        if closed:
            return
        last_id = f"{entries[-1][0]}-0" if entries else f"{max(after, 0)}-0"
        k = self._key(key)
        while True:
            response = cast(
                list[tuple[bytes, _Entries]],
                await self._followers.xread({k: last_id}, block=5000, count=500),
            )
            if not response:
                # An end marker below `last_id` (a follower that asked past the last event)
                # is never read: the log's last entry tells.
                if await self._closed(k, key):
                    return
                continue
            for _stream, raw in response:
                if raw:
                    last_id = raw[-1][0].decode()
                batch, closed = self._decode(raw)
                if batch:
                    yield batch
                if closed:
                    return

    async def delete(self, keys: Sequence[str]) -> int:
        return int(await self.redis.delete(*(self._key(k) for k in keys))) if keys else 0

    async def delete_prefix(self, prefix: str) -> int:
        pattern = _GLOB_SPECIAL.sub(r"\\\g<0>", self._key(prefix)) + "*"
        gone = 0
        async for k in self.redis.scan_iter(match=pattern, count=500):
            gone += int(await self.redis.delete(k))
        return gone

    async def keys(self, prefix: str) -> list[str]:
        pattern = _GLOB_SPECIAL.sub(r"\\\g<0>", self._key(prefix)) + "*"
        skip = len(self._key(""))
        found = [k async for k in self.redis.scan_iter(match=pattern, count=500)]
        return sorted({(k.decode() if isinstance(k, bytes) else str(k))[skip:] for k in found})

    async def aclose(self) -> None:
        await self.redis.aclose()
        await self._followers.aclose()
        await self._health.aclose()


def open_event_log(
    url: str, retention_seconds: int, prefix: str = "agentmesh:run:", memory_mb: int = 32
) -> EventLog:
    if url.startswith("memory://"):
        return InMemoryEventLog(retention_seconds, max_bytes=memory_mb * 2**20)
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisEventLog(url, retention_seconds, prefix=prefix)
    raise ValueError(f"AGENTMESH_EVENT_LOG_URL: unsupported event log {url!r}")
