"""services.orchestrator.gate: started runs begin their work at once while the loop keeps up;
while it is behind (long turns) they wait, and go in the order they arrived."""

from __future__ import annotations

import asyncio

import pytest

from services.orchestrator.gate import StartGate


class TurnClock:
    """A clock that moves `turn` seconds at each reading: every loop turn the gate times
    (a reading before it and one after) lasts at least `turn`."""

    def __init__(self) -> None:
        self.now = 0.0
        self.turn = 0.0

    def __call__(self) -> float:
        self.now += self.turn
        return self.now


async def _turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_run_begins_at_once_while_the_turns_are_short() -> None:
    gate = StartGate(turn_budget_seconds=0.002, clock=TurnClock())
    await asyncio.wait_for(gate.enter(), 1)
    assert gate.waiting == 0


async def test_while_the_turns_are_long_runs_wait_then_begin_in_arrival_order() -> None:
    clock = TurnClock()
    clock.turn = 0.010  # the loop is behind
    gate = StartGate(turn_budget_seconds=0.002, clock=clock)
    began: list[int] = []

    async def run(i: int) -> None:
        await gate.enter()
        began.append(i)

    runs = []
    for i in range(5):
        runs.append(asyncio.create_task(run(i)))
        await _turns(2)  # they arrive one after another
    await _turns(20)
    assert began == []  # nobody is let in while the turns stay long
    assert gate.waiting == 5
    clock.turn = 0.0  # the loop keeps up again
    await asyncio.wait_for(asyncio.gather(*runs), 1)
    assert began == [0, 1, 2, 3, 4]


async def test_a_run_arriving_while_others_wait_goes_behind_them() -> None:
    clock = TurnClock()
    clock.turn = 0.010
    gate = StartGate(turn_budget_seconds=0.002, clock=clock)
    began: list[str] = []

    async def run(name: str) -> None:
        await gate.enter()
        began.append(name)

    first = asyncio.create_task(run("first"))
    await _turns(3)
    clock.turn = 0.0  # short turns again: the newcomer's own turn is short too
    late = asyncio.create_task(run("late"))
    await asyncio.wait_for(asyncio.gather(first, late), 1)
    assert began == ["first", "late"]


async def test_a_run_cancelled_while_it_waits_leaves_the_queue() -> None:
    clock = TurnClock()
    clock.turn = 0.010
    gate = StartGate(turn_budget_seconds=0.002, clock=clock)
    began: list[str] = []

    async def run(name: str) -> None:
        await gate.enter()
        began.append(name)

    gone = asyncio.create_task(run("gone"))
    await _turns(3)
    kept = asyncio.create_task(run("kept"))
    await _turns(3)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    clock.turn = 0.0
    await asyncio.wait_for(kept, 1)
    assert began == ["kept"]
    assert gate.waiting == 0
