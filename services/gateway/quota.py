"""Quotas of an owner: runs per minute, concurrent runs, tokens per UTC day.

A plan's fairness rule, distinct from load shedding (shared/admission.py, a bound on what
one process can carry, 503): a run over a quota is refused with 429 RESOURCE_EXHAUSTED and
`Retry-After`, before anything of it is stored. The counters live in the `limits` library's
storage, shared by every gateway replica: the Redis of AGENTMESH_EVENT_LOG_URL in the
distributed mode, the process's memory on the embedded default (memory://). The quotas
are the deployment's defaults (AGENTMESH_QUOTA_*) unless an admin set others for the owner
(services/gateway/store.py). 0 means no limit.

What a run counts: one run when it is admitted (per minute, a moving window of `limits`),
and one concurrent run until its stream ends (a lease of its own, in a Redis sorted set or
in memory: `limits` has no concurrency primitive, and a lease expires on its own when the
gateway holding it dies). Tokens per day are not counted here: they are the owner's usage
of the UTC day as history's usage ledger sums it (services/gateway/usage.py), automation runs
included.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from limits import RateLimitItemPerMinute
from limits.aio.storage import Storage
from limits.aio.strategies import MovingWindowRateLimiter
from limits.storage import storage_from_string

from services.gateway.errors import ApiError
from services.gateway.store import GatewayStore, QuotaOverride
from services.gateway.usage import OwnerUsage
from shared.errors import as_domain_error
from shared.settings import Settings

if TYPE_CHECKING:
    # redis-py is imported where the distributed mode opens its pool (redis_pool): the
    # embedded default (memory://) never needs it, ~11 MB of idle RSS (issue 24).
    import redis.asyncio as aioredis

log = logging.getLogger("agentmesh.gateway")

QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
# A concurrent run's end cannot be foreseen: the caller is told to try again this soon.
CONCURRENT_RETRY_SECONDS = 1
# How long a concurrent run's lease outlives the longest run: a gateway that died with
# runs in flight leaves leases that nothing releases; each one goes at the latest then.
_LEASE_MARGIN_SECONDS = 60
# How long one process keeps an owner's quota override before it reads it again.
OVERRIDE_CACHE_SECONDS = 5.0
_MAX_CACHED_OVERRIDES = 100_000
_REDIS_CONNECTIONS = 64


class Leases(Protocol):
    """Concurrent runs of each owner, each held by a lease until released or expired."""

    async def take(self, owner: str, lease: str, limit: int, ttl: float) -> bool:
        """Hold `lease` for `owner` unless `limit` (0: none) leases are held already."""

    async def give_back(self, owner: str, lease: str) -> None: ...

    async def count(self, owner: str) -> int: ...

    async def aclose(self) -> None: ...


class MemoryLeases:
    """The embedded default: one process's leases."""

    def __init__(self) -> None:
        self.owners: dict[str, dict[str, float]] = {}

    def _live(self, owner: str) -> dict[str, float]:
        now = time.monotonic()
        held = {k: v for k, v in self.owners.get(owner, {}).items() if v > now}
        if held:
            self.owners[owner] = held
        else:
            self.owners.pop(owner, None)
        return held

    async def take(self, owner: str, lease: str, limit: int, ttl: float) -> bool:
        held = self._live(owner)
        if limit and len(held) >= limit:
            return False
        self.owners.setdefault(owner, held)[lease] = time.monotonic() + ttl
        return True

    async def give_back(self, owner: str, lease: str) -> None:
        self.owners.get(owner, {}).pop(lease, None)
        self._live(owner)

    async def count(self, owner: str) -> int:
        return len(self._live(owner))

    async def aclose(self) -> None:
        return None


# KEYS[1]: the owner's sorted set (lease -> expiry, ms); ARGV: now, expiry, limit, lease.
# Drops the expired leases, then adds this one unless the owner holds `limit` already.
_TAKE_LEASE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local limit = tonumber(ARGV[3])
if limit > 0 and redis.call('ZCARD', KEYS[1]) >= limit then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1
"""


def redis_pool(url: str) -> aioredis.BlockingConnectionPool:
    """The quota's connections to Redis. As the event log's
    (services/orchestrator/eventlog.py): a pooled connection that Redis closed (a restart, a
    failover) is dropped and the command retried on a new one, instead of failing the first
    run after it; a caller that finds every connection busy waits for one."""
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=_REDIS_CONNECTIONS,
        timeout=10,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 3),
        retry_on_error=[RedisConnectionError, RedisTimeoutError],
    )


class RedisLeases:
    """The distributed mode: every gateway replica's leases, in one sorted set per owner."""

    def __init__(self, pool: aioredis.BlockingConnectionPool, prefix: str) -> None:
        import redis.asyncio as aioredis

        self.pool = pool
        self.client = aioredis.Redis(connection_pool=pool)
        self.prefix = prefix
        self.script = self.client.register_script(_TAKE_LEASE)

    def _key(self, owner: str) -> str:
        return f"{self.prefix}{owner}"

    async def take(self, owner: str, lease: str, limit: int, ttl: float) -> bool:
        now = int(time.time() * 1000)
        expiry = now + int(ttl * 1000)
        taken = await self.script(keys=[self._key(owner)], args=[now, expiry, limit, lease])
        return bool(taken)

    async def give_back(self, owner: str, lease: str) -> None:
        await self.client.zrem(self._key(owner), lease)

    async def count(self, owner: str) -> int:
        now = int(time.time() * 1000)
        return int(await self.client.zcount(self._key(owner), f"({now}", "+inf"))

    async def aclose(self) -> None:
        await self.pool.disconnect()


@dataclass(frozen=True)
class Quotas:
    """An owner's effective quotas (0: no limit) and whether an admin set them."""

    runs_per_minute: int
    concurrent_runs: int
    tokens_per_day: int
    overridden: bool = False


@dataclass(frozen=True)
class Admitted:
    """A run admitted for `owner`: `Quota.release` gives its concurrent slot back."""

    owner: str
    lease: str
    started: float


def storage_url(event_log_url: str) -> str:
    """The `limits` storage of a deployment: beside its event log."""
    if event_log_url.startswith("memory://"):
        return "async+memory://"
    return "async+" + event_log_url


def utc_day(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d")


def _seconds_to_midnight(now: datetime) -> int:
    tomorrow = (now.astimezone(UTC) + timedelta(days=1)).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    return max(1, math.ceil((tomorrow - now).total_seconds()))


def exceeded(what: str, limit: int, retry_after: int) -> ApiError:
    return ApiError(
        429,
        "RESOURCE_EXHAUSTED",
        f"your quota of {limit} {what} is used up; the run was not started and nothing "
        f"was stored: send it again in {retry_after} s",
        headers={"Retry-After": str(retry_after)},
        extra={"reason": QUOTA_EXCEEDED, "quota": what, "limit": limit},
    )


class Quota:
    def __init__(
        self,
        settings: Settings,
        store: GatewayStore,
        storage: Storage,
        leases: Leases,
        usage: OwnerUsage,
    ) -> None:
        self.settings = settings
        self.store = store
        self.usage = usage
        self.storage = storage
        self.leases = leases
        # owner -> (until when, the override read then)
        self.overrides: dict[str, tuple[float, QuotaOverride | None]] = {}
        self.window = MovingWindowRateLimiter(storage)
        self.prefix = "agentmesh-quota"

    @classmethod
    def open(cls, settings: Settings, store: GatewayStore, usage: OwnerUsage) -> Quota:
        url = storage_url(settings.event_log_url)
        options: dict[str, Any] = {}
        leases: Leases = MemoryLeases()
        if not url.startswith("async+memory"):
            pool = redis_pool(settings.event_log_url)
            # redis-py (pinned already for the event log), not the default coredis; one
            # pool for the counters and the leases.
            options = {
                "implementation": "redispy",
                "key_prefix": settings.event_log_prefix + "quota",
                "connection_pool": pool,
            }
            leases = RedisLeases(pool, settings.event_log_prefix + "quota:concurrent:")
        storage = storage_from_string(url, **options)
        assert isinstance(storage, Storage)
        return cls(settings, store, storage, leases, usage)

    async def aclose(self) -> None:
        await self.leases.aclose()

    def defaults(self) -> Quotas:
        s = self.settings
        return Quotas(s.quota_runs_per_minute, s.quota_concurrent_runs, s.quota_tokens_per_day)

    async def quotas(self, owner: str) -> Quotas:
        """The owner's quotas. The admin's override is read at most every
        OVERRIDE_CACHE_SECONDS per owner and process (a change made through this process
        applies at once, through another within that time); while the gateway's database
        cannot be read, the last override read (or the defaults) applies: the database
        holding overrides must not stop every run."""
        now = time.monotonic()
        cached = self.overrides.get(owner)
        if cached is not None and cached[0] > now:
            return effective(self.defaults(), cached[1])
        try:
            override = await self.store.quota_override(owner)
        except Exception as exc:
            log.warning("reading the quota override of an owner failed: %s", exc)
            return effective(self.defaults(), cached[1] if cached is not None else None)
        if len(self.overrides) >= _MAX_CACHED_OVERRIDES:
            self.overrides.clear()
        self.overrides[owner] = (now + OVERRIDE_CACHE_SECONDS, override)
        return effective(self.defaults(), override)

    def forget(self, owner: str) -> None:
        """The owner's override changed: read it again on the next run."""
        self.overrides.pop(owner, None)

    async def tokens_on(self, owner: str, day: str) -> int:
        """The owner's tokens of `day` as the tokens-per-day check sees them (cached)."""
        return await self.usage.tokens_on(owner, day)

    async def concurrent(self, owner: str) -> int:
        return await self.leases.count(owner)

    async def admit(self, owner: str) -> Admitted:
        """Count one more run of `owner`, or raise 429 (nothing counted)."""
        q = await self.quotas(owner)
        now = datetime.now(UTC)
        if q.tokens_per_day:
            used = await self.tokens_on(owner, utc_day(now))
            if used >= q.tokens_per_day:
                raise exceeded("tokens per day", q.tokens_per_day, _seconds_to_midnight(now))
        per_minute = RateLimitItemPerMinute(q.runs_per_minute) if q.runs_per_minute else None
        if per_minute is not None and not await self.window.test(per_minute, owner):
            raise await self._per_minute_exceeded(per_minute, owner)
        run = Admitted(owner, uuid.uuid4().hex, time.monotonic())
        ttl = self.settings.run_timeout_seconds + _LEASE_MARGIN_SECONDS
        if not await self.leases.take(owner, run.lease, q.concurrent_runs, ttl):
            raise exceeded("concurrent runs", q.concurrent_runs, CONCURRENT_RETRY_SECONDS)
        # The moving window takes the run only now (test, then hit: two runs racing for the
        # last slot are both tested in, and one of them is refused here).
        if per_minute is not None and not await self.window.hit(per_minute, owner):
            await self.leases.give_back(owner, run.lease)
            raise await self._per_minute_exceeded(per_minute, owner)
        return run

    async def _per_minute_exceeded(self, item: RateLimitItemPerMinute, owner: str) -> ApiError:
        stats = await self.window.get_window_stats(item, owner)
        retry_after = max(1, math.ceil(stats.reset_time - time.time()))
        return exceeded("runs per minute", item.amount, retry_after)

    async def release(self, run: Admitted) -> None:
        """The run's stream ended (or it never started): its concurrent slot is free. What
        the run used is in its run record (history), not counted here."""
        try:
            await self.leases.give_back(run.owner, run.lease)
        except Exception:
            # The run's answer is sent already; the lease expires on its own.
            log.exception(
                "releasing a concurrent run failed", extra={"fields": {"owner": run.owner}}
            )


def effective(defaults: Quotas, override: QuotaOverride | None) -> Quotas:
    """The quotas of an owner: each one the admin set, the default for the others."""
    if override is None:
        return defaults

    def pick(value: int | None, default: int) -> int:
        return default if value is None else value

    return Quotas(
        pick(override.runs_per_minute, defaults.runs_per_minute),
        pick(override.concurrent_runs, defaults.concurrent_runs),
        pick(override.tokens_per_day, defaults.tokens_per_day),
        overridden=True,
    )


async def admit(quota: Quota, owner: str) -> Admitted:
    """`quota.admit`, with a store that cannot be reached answered 503 (nothing started)."""
    try:
        return await quota.admit(owner)
    except ApiError:
        raise
    except Exception as exc:
        error = as_domain_error(exc, "the quota store failed")
        log.warning("quota check failed: %s", error.message, exc_info=exc)
        raise ApiError(
            503,
            "UNAVAILABLE",
            "the quota store cannot be reached; the run was not started and nothing was "
            f"stored: send it again in {CONCURRENT_RETRY_SECONDS} s",
            headers={"Retry-After": str(CONCURRENT_RETRY_SECONDS)},
        ) from None
