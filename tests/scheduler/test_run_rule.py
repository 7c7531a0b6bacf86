"""The one rule for "did this slot run" (core.after_run) and the slot's run ids."""

from __future__ import annotations

import pytest

from services.scheduler import core
from services.scheduler.core import Next, RunEnd
from shared.ids import is_identifier


@pytest.mark.parametrize(
    ("end", "found_ended", "expected"),
    [
        (RunEnd.SUCCEEDED, False, Next.DONE),
        (RunEnd.SUCCEEDED, True, Next.DONE),
        (RunEnd.CANCELLED, False, Next.GIVE_UP),
        (RunEnd.CANCELLED, True, Next.GIVE_UP),
        # Outcome unknown: retried, and the retry asks history again before starting anything.
        (RunEnd.UNKNOWN, False, Next.RETRY),
        # Seen failing (or refused) by this attempt: its own failure, retried with backoff.
        (RunEnd.FAILED, False, Next.RETRY),
        (RunEnd.ABSENT, False, Next.RETRY),
        # Over without success before this attempt came: the next id, at once.
        (RunEnd.FAILED, True, Next.NEXT_ID),
        (RunEnd.ABSENT, True, Next.NEXT_ID),
    ],
)
def test_a_runs_end_decides_what_the_attempt_does(
    end: RunEnd, found_ended: bool, expected: Next
) -> None:
    assert core.after_run(end, found_ended=found_ended) is expected


def test_every_attempt_of_a_slot_derives_the_same_run_ids() -> None:
    ids = core.slot_run_ids("jobrun-1", 3)
    assert ids == tuple(core.orchestrator_run_id("jobrun-1", n) for n in (1, 2, 3))
    assert core.slot_run_ids("jobrun-1", 1) == ids[:1]
    assert len(set(ids)) == 3 and all(is_identifier(i) for i in ids)
    assert set(ids).isdisjoint(core.slot_run_ids("jobrun-2", 3))
