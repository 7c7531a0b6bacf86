"""When a started run begins its work: at once while the event loop keeps up, else in the
order the runs arrived, one per short loop turn.

A run's work is CPU on this process's event loop (the in-process services of target all,
a scripted or fast model), and the loop runs its ready callbacks first come, first served:
with every admitted run busy at once, a loop turn grows with their number (about 15-20 ms
at concurrency 32 on 2 cores), and a new run's first event, which crosses about ten turns
between the gateway and the event log, waited that many long turns. Runs that wait here
cost the loop nothing, so the turns stay short and a new run's RUN_STARTED (stored before
its run waits: RunManager.start) reaches its caller in a few milliseconds; a waiting run
is let in, in arrival order, as soon as a turn is short again. A run that waits on I/O (a
model, a tool) keeps the turns short, so runs of a real model are not held here.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

# A loop turn longer than this means the loop is behind: waiting runs stay out until one is
# shorter. A first event crosses about ten turns: 2 ms kept it near 33 ms (p50) at c=32.
TURN_BUDGET_SECONDS = 0.002


class StartGate:
    """Lets runs begin their work in the order they arrived while the loop keeps up."""

    def __init__(
        self,
        turn_budget_seconds: float = TURN_BUDGET_SECONDS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.turn_budget_seconds = turn_budget_seconds
        self._clock = clock
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._pump: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def enter(self) -> None:
        """Return when the caller may begin: after one loop turn if that turn was short
        and nobody waits before it, else when its turn in the queue comes."""
        if not self._waiting and await self._turn() <= self.turn_budget_seconds:
            if not self._waiting:
                return
        admitted = asyncio.get_running_loop().create_future()
        self._waiting.append(admitted)
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._admit(), name="start gate")
        try:
            await admitted
        except asyncio.CancelledError:
            # Cancelled while waiting (the run stopped): out of the queue. Admitted at the
            # same moment: it takes no room, so there is nothing to hand on.
            if not admitted.done():
                admitted.cancel()
            raise

    async def _turn(self) -> float:
        """How long one turn of the loop took: the wait for every callback ready now."""
        began = self._clock()
        await asyncio.sleep(0)
        return self._clock() - began

    async def _admit(self) -> None:
        """Lets the first waiting run in after each short turn, until none waits."""
        while self._waiting:
            if await self._turn() > self.turn_budget_seconds:
                continue
            while self._waiting:
                admitted = self._waiting.popleft()
                if not admitted.done():  # a cancelled waiter is skipped
                    admitted.set_result(None)
                    break
