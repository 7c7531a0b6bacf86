"""An owner's usage as history's usage ledger sums it (HistoryService.GetOwnerUsage): the one
source of GET /api/v1/usage, the admin's view of it, and the tokens-per-day quota.

A run counts on the UTC day it was created, whatever started it (chat or automation) and
whether or not its client stayed to the end of its stream: history enters every run and
its usage in the ledger when it finishes, and deleting its thread or its owner does not
take it out (api-endpoints.md, GET /api/v1/usage).

The quota check is on the admission path of every run, so it reads an owner's tokens of
today at most every TOKENS_CACHE_SECONDS per gateway process, with one read for all the runs
that ask at once: a finished run's tokens count against the quota within that time (as the
runs still in flight, whose tokens are not known yet, the quota may be overrun by what the
owner's runs of those seconds use).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from agentmesh.history.v1 import history_service_pb2 as history_pb

from services.gateway.clients import Clients, unary
from shared.settings import Settings

TOKENS_CACHE_SECONDS = 2.0
_MAX_CACHED_OWNERS = 100_000


@dataclass(frozen=True)
class _Cached:
    day: str
    until: float
    tokens: int


class OwnerUsage:
    def __init__(self, settings: Settings, clients: Callable[[], Clients]) -> None:
        self.settings = settings
        # The app's clients, which it may open only once it serves (its lifespan).
        self.clients = clients
        self.cached: dict[str, _Cached] = {}
        self.reading: dict[tuple[str, str], asyncio.Future[int]] = {}

    async def days(self, owner: str, first: str, last: str) -> list[history_pb.OwnerUsageDay]:
        """The owner's days in [first, last] (UTC days, YYYY-MM-DD) that have runs."""
        reply = await unary(
            self.clients().history.GetOwnerUsage,
            history_pb.GetOwnerUsageRequest(from_day=first, to_day=last),
            owner=owner,
            service="history",
            timeout=self.settings.rpc_timeout_seconds,
        )
        return list(reply.days)

    async def tokens_on(self, owner: str, day: str) -> int:
        """The owner's tokens of UTC day `day`, read at most every TOKENS_CACHE_SECONDS."""
        cached = self.cached.get(owner)
        if cached is not None and cached.day == day and cached.until > time.monotonic():
            return cached.tokens
        key = (owner, day)
        reading = self.reading.get(key)
        if reading is None:
            # A task of its own: a caller that goes away does not cancel the others' read.
            reading = asyncio.ensure_future(self._read(owner, day))
            self.reading[key] = reading
            reading.add_done_callback(lambda _: self.reading.pop(key, None))
        return await asyncio.shield(reading)

    async def _read(self, owner: str, day: str) -> int:
        days = await self.days(owner, day, day)
        tokens = sum(d.input_tokens + d.output_tokens for d in days)
        if len(self.cached) >= _MAX_CACHED_OWNERS:
            self.cached.clear()
        self.cached[owner] = _Cached(day, time.monotonic() + TOKENS_CACHE_SECONDS, tokens)
        return tokens
