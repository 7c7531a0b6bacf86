"""The run plans of services/history/runs.py (BeginRun's admission and queue, FinishRun's
end, leases, cancellation), as pure functions: no database, no server."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from services.history import core, runs
from services.history.core import MultitaskStrategy, NewMessage, Run, RunState
from services.history.runs import Begin
from shared.domain import ExecutorKind, MessageKind, RuntimeMode
from shared.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from shared.messages import Usage
from shared.profiles import CHAT_DEFAULT

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
EARLIER = NOW - timedelta(minutes=5)
LEASE = runs.Lease("orch-2", NOW + timedelta(seconds=30))


def begin(strategy: MultitaskStrategy = MultitaskStrategy.ENQUEUE, **changes: object) -> Begin:
    b = Begin(
        owner_id="alice",
        run_id="r9",
        thread_id="t1",
        mode=RuntimeMode.CHAT,
        profile=CHAT_DEFAULT,
        strategy=strategy,
        lease=LEASE,
        now=NOW,
    )
    return replace(b, **changes)


def stored(run_id: str, state: RunState, seq: int, **changes: object) -> Run:
    run = Run(
        owner_id="alice",
        id=run_id,
        thread_id="t1",
        state=state,
        origin=RuntimeMode.CHAT,
        profile=CHAT_DEFAULT,
        create_time=EARLIER,
        start_time=EARLIER if state is not RunState.QUEUED else None,
        finish_time=EARLIER if state in core.TERMINAL_STATES else None,
        thread_seq=seq,
        lease_holder="orch-1",
        lease_expire_time=EARLIER + timedelta(seconds=30),
    )
    return replace(run, **changes)


# --- a new run ---------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", list(MultitaskStrategy))
def test_a_new_run_on_an_idle_thread_runs_at_once_whatever_its_strategy(
    strategy: MultitaskStrategy,
) -> None:
    plan = runs.plan_begin(begin(strategy), None, ())
    assert plan.insert and not plan.retry
    assert plan.run.state is RunState.RUNNING and plan.run.start_time == NOW
    assert (plan.run.lease_holder, plan.run.lease_expire_time) == (LEASE.holder, LEASE.expire_time)
    assert plan.cancel == () and plan.hide == () and plan.ahead == ()
    assert plan.stores_input


def test_reject_on_a_busy_thread_names_its_running_run() -> None:
    active = [stored("r1", RunState.RUNNING, 1), stored("r2", RunState.QUEUED, 2)]
    with pytest.raises(FailedPrecondition) as raised:
        runs.plan_begin(begin(MultitaskStrategy.REJECT), None, active)
    assert raised.value.reason == "THREAD_BUSY"
    assert raised.value.metadata == {"active_run_id": "r1", "active_run_state": "running"}


def test_enqueue_on_a_busy_thread_queues_the_run_behind_every_active_run() -> None:
    active = [stored("r1", RunState.RUNNING, 1), stored("r2", RunState.QUEUED, 2)]
    plan = runs.plan_begin(begin(MultitaskStrategy.ENQUEUE), None, active)
    assert plan.insert
    assert plan.run.state is RunState.QUEUED and plan.run.start_time is None
    assert plan.ahead == ("r1", "r2")
    assert plan.cancel == ()
    assert not plan.stores_input  # a queued run stores its input when it starts


def test_interrupt_queues_the_run_and_cancels_the_active_runs_keeping_their_messages() -> None:
    active = [stored("r1", RunState.RUNNING, 1), stored("r2", RunState.QUEUED, 2)]
    plan = runs.plan_begin(begin(MultitaskStrategy.INTERRUPT), None, active)
    assert plan.run.state is RunState.QUEUED
    assert plan.cancel == ("r1", "r2") and not plan.rollback
    assert plan.hide == ()


def test_rollback_cancels_the_active_runs_and_hides_their_messages() -> None:
    active = [stored("r1", RunState.RUNNING, 1)]
    plan = runs.plan_begin(begin(MultitaskStrategy.ROLLBACK), None, active)
    assert plan.run.state is RunState.QUEUED
    assert plan.cancel == ("r1",) and plan.rollback
    assert plan.hide == ("r1",)


# --- a stored run: a retry, or a queued run asking again --------------------------------


def test_a_run_id_of_another_thread_is_refused() -> None:
    other = stored("r9", RunState.RUNNING, 1, thread_id="t2")
    with pytest.raises(AlreadyExists) as raised:
        runs.plan_begin(begin(), other, ())
    assert raised.value.reason == "RUN_ID_TAKEN"


def test_a_queued_run_stays_queued_while_a_run_before_it_is_active() -> None:
    first = stored("r1", RunState.RUNNING, 1)
    mine = stored("r9", RunState.QUEUED, 2)
    later = stored("r3", RunState.QUEUED, 3)
    plan = runs.plan_begin(begin(), mine, [first, mine, later])
    assert not plan.insert and not plan.start and plan.retry
    assert plan.run.state is RunState.QUEUED
    assert plan.ahead == ("r1",)  # the run queued after it is not ahead of it
    assert not plan.stores_input


def test_a_queued_run_whose_turn_came_starts_now_with_the_new_lease() -> None:
    mine = stored("r9", RunState.QUEUED, 2)
    plan = runs.plan_begin(begin(), mine, [mine])
    assert plan.start and not plan.insert
    assert plan.run.state is RunState.RUNNING and plan.run.start_time == NOW
    assert plan.lease == LEASE
    assert plan.ahead == ()
    assert plan.stores_input and plan.retry


def test_a_queued_run_whose_cancel_was_requested_never_starts_but_keeps_its_lease() -> None:
    mine = stored("r9", RunState.QUEUED, 2, cancel_requested=True)
    plan = runs.plan_begin(begin(), mine, [mine])
    assert not plan.start
    assert plan.run.state is RunState.QUEUED and plan.run.start_time is None
    assert plan.lease == LEASE
    assert plan.ahead == ()
    assert not plan.stores_input


def test_a_retried_running_run_keeps_running_and_renews_its_lease() -> None:
    mine = stored("r9", RunState.RUNNING, 1)
    plan = runs.plan_begin(begin(), mine, [mine])
    assert not plan.start and not plan.insert and plan.cancel == ()
    assert plan.run.state is RunState.RUNNING and plan.run.start_time == EARLIER
    assert plan.lease == LEASE
    assert plan.stores_input and plan.retry  # its input is probably stored: checked by id


def test_a_retry_that_names_no_holder_keeps_the_stored_holder() -> None:
    mine = stored("r9", RunState.RUNNING, 1)
    plan = runs.plan_begin(begin(lease=runs.Lease("", LEASE.expire_time)), mine, [mine])
    assert plan.lease == runs.Lease("orch-1", LEASE.expire_time)
    assert plan.run.lease_holder == "orch-1"


def test_a_retry_of_a_finished_run_changes_nothing() -> None:
    mine = stored("r9", RunState.SUCCEEDED, 1)
    plan = runs.plan_begin(begin(), mine, [])
    assert plan.run == mine
    assert not plan.insert and not plan.start and plan.lease is None and plan.cancel == ()
    assert plan.stores_input  # it ran: a retry reads its input back, stored once


# --- leases ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asked", "granted"), [(0, 30.0), (0.01, 1.0), (45, 45.0), (10**9, 3600.0)]
)
def test_a_lease_is_the_default_for_zero_and_held_to_its_bounds(
    asked: float, granted: float
) -> None:
    assert runs.begin_lease("orch-1", asked, NOW).expire_time == NOW + timedelta(seconds=granted)
    assert runs.renewal("orch-1", asked, NOW).expire_time == NOW + timedelta(seconds=granted)


@pytest.mark.parametrize("asked", [-1, float("nan"), float("inf")])
def test_a_negative_or_infinite_lease_is_refused(asked: float) -> None:
    with pytest.raises(InvalidArgument) as raised:
        runs.begin_lease("orch-1", asked, NOW)
    assert raised.value.violations[0][0] == "lease_seconds"


def test_begin_takes_a_run_without_holder_but_not_a_holder_over_200_characters() -> None:
    assert runs.begin_lease("", 0, NOW).holder == ""
    with pytest.raises(InvalidArgument) as raised:
        runs.begin_lease("h" * 201, 0, NOW)
    assert raised.value.violations[0][0] == "lease_holder"


def test_a_renewal_must_name_its_holder() -> None:
    with pytest.raises(InvalidArgument) as raised:
        runs.renewal("", 10, NOW)
    assert raised.value.violations[0][0] == "lease_holder"


def test_a_run_whose_lease_ran_out_fails_saying_why() -> None:
    end = runs.plan_expiry()
    assert end.state is RunState.FAILED
    assert end.error_code == runs.LEASE_EXPIRED and end.error_message


# --- finishing ---------------------------------------------------------------------------


@pytest.mark.parametrize("state", [RunState.QUEUED, RunState.RUNNING])
def test_a_run_cannot_be_finished_into_an_active_state(state: RunState) -> None:
    with pytest.raises(InvalidArgument) as raised:
        runs.run_end(state, "", "")
    assert raised.value.violations[0][0] == "state"


def test_the_error_code_is_bounded_and_a_long_error_message_is_cut() -> None:
    with pytest.raises(InvalidArgument) as raised:
        runs.run_end(RunState.FAILED, "E" * 101, "")
    assert raised.value.violations[0][0] == "error_code"
    end = runs.run_end(RunState.FAILED, "E" * 100, "x" * 20_000)
    assert len(end.error_message) == runs.MAX_ERROR_MESSAGE


@pytest.mark.parametrize(
    ("requested", "if_cancel_requested"),
    [
        (RunState.SUCCEEDED, RunState.CANCELLED),
        (RunState.INTERRUPTED, RunState.CANCELLED),
        (RunState.FAILED, RunState.FAILED),
        (RunState.CANCELLED, RunState.CANCELLED),
    ],
)
def test_a_run_whose_cancel_was_requested_ends_cancelled_unless_it_failed(
    requested: RunState, if_cancel_requested: RunState
) -> None:
    usage = Usage(10, 5, estimated=True)
    plan = runs.plan_finish("r9", runs.run_end(requested, "", ""), usage, NOW)
    assert plan.end.state is requested
    assert plan.state_if_cancel_requested is if_cancel_requested
    assert (plan.run_id, plan.finish_time, plan.usage) == ("r9", NOW, usage)


def reply(message_id: str, run_id: str = "") -> NewMessage:
    return NewMessage(
        id=message_id,
        role="assistant",
        kind=MessageKind.AGENT_REPLY,
        content=({"text": {"text": "hi"}},),
        run_id=run_id,
    )


def test_a_finished_runs_output_carries_its_id_and_profile() -> None:
    run = stored("r9", RunState.SUCCEEDED, 1)
    writes = runs.plan_finished(run, [reply("m1"), reply("m2", run_id="r9")], [], NOW)
    assert [(m.run_id, m.executor, m.execution_profile_name) for m in writes.outputs] == [
        ("r9", ExecutorKind.WORKER, "chat_default")
    ] * 2


def test_an_output_message_of_another_run_is_refused() -> None:
    run = stored("r9", RunState.SUCCEEDED, 1)
    with pytest.raises(InvalidArgument) as raised:
        runs.plan_finished(run, [reply("m1", run_id="r1")], [], NOW)
    assert raised.value.violations[0][0] == "output_messages[0].run_id"


def test_a_finished_run_records_each_tool_denial_once() -> None:
    run = stored("r9", RunState.SUCCEEDED, 1)
    digest = "0" * 64
    denials = [("c1", "shell", digest, "not_declared"), ("c1", "shell", digest, "not_declared")]
    writes = runs.plan_finished(run, [], denials, NOW)
    assert [(d.run_id, d.tool_call_id, d.created_at) for d in writes.denials] == [("r9", "c1", NOW)]


def test_a_rolled_back_run_hides_its_messages_when_it_finishes_and_another_does_not() -> None:
    rolled_back = stored("r9", RunState.CANCELLED, 1, rolled_back=True)
    assert runs.plan_finished(rolled_back, [], [], NOW).hide == ("r9",)
    assert runs.plan_finished(stored("r9", RunState.SUCCEEDED, 1), [], [], NOW).hide == ()


# --- cancellation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run", "marks"),
    [
        (stored("r9", RunState.RUNNING, 1), True),
        (stored("r9", RunState.QUEUED, 1), True),
        (stored("r9", RunState.RUNNING, 1, cancel_requested=True), False),
        (stored("r9", RunState.SUCCEEDED, 1), False),
        (stored("r9", RunState.FAILED, 1), False),
    ],
)
def test_a_cancellation_marks_an_active_run_once_and_leaves_a_finished_one(
    run: Run, marks: bool
) -> None:
    assert runs.plan_cancel(run) is marks


def test_finishing_twice_with_the_same_state_is_a_noop_and_with_another_a_conflict() -> None:
    assert runs.finish_is_noop(core.RunState.RUNNING, core.RunState.SUCCEEDED) is False
    assert runs.finish_is_noop(core.RunState.FAILED, core.RunState.FAILED) is True
    with pytest.raises(FailedPrecondition):
        runs.finish_is_noop(core.RunState.FAILED, core.RunState.SUCCEEDED)
