"""The run's lifecycle (core.RunLifecycle), without servers: every allowed move, every illegal
one raising, the stop requests, and the one state vocabulary mapped to protobuf and AG-UI."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from agentmesh.history.v1 import history_service_pb2 as history_pb
from agentmesh.type.v1 import run_event_pb2

from services.orchestrator import convert
from services.orchestrator.core import (
    TRANSITIONS,
    IllegalTransition,
    RunLifecycle,
    RunPlan,
    Stage,
    Stop,
)
from shared.domain import (
    RUN_STATE_FROM_PB,
    RUN_STATE_TO_PB,
    TERMINAL_RUN_STATES,
    RunState,
    RuntimeMode,
)
from shared.errors import Unavailable
from shared.messages import user
from shared.profiles import CHAT_DEFAULT

ENDS = sorted(TERMINAL_RUN_STATES)


def at(stage: Stage) -> RunLifecycle:
    """A lifecycle brought to `stage` by the events of the pipeline (not by assignment)."""
    life = RunLifecycle()
    if stage is Stage.QUEUED:
        life.admit(RunState.QUEUED)
    elif stage is Stage.RUNNING:
        life.admit(RunState.RUNNING)
    elif stage is Stage.FINISHING:
        life.admit(RunState.RUNNING)
        life.finish()
    elif stage is Stage.ENDED:
        life.end(RunState.FAILED)
    assert life.stage is stage
    return life


# Every event of the pipeline that moves the stage, by the stage it moves to.
EVENTS: dict[str, tuple[Callable[[RunLifecycle], None], Stage]] = {
    "admit queued": (lambda life: life.admit(RunState.QUEUED), Stage.QUEUED),
    "admit running": (lambda life: life.admit(RunState.RUNNING), Stage.RUNNING),
    "take turn": (RunLifecycle.take_turn, Stage.RUNNING),
    "finish": (RunLifecycle.finish, Stage.FINISHING),
    "end": (lambda life: life.end(RunState.SUCCEEDED), Stage.ENDED),
}
ALLOWED = {
    (Stage.ADMITTING, "admit queued"),
    (Stage.ADMITTING, "admit running"),
    (Stage.ADMITTING, "finish"),
    (Stage.ADMITTING, "end"),
    (Stage.QUEUED, "take turn"),
    (Stage.QUEUED, "finish"),
    (Stage.QUEUED, "end"),
    (Stage.RUNNING, "finish"),
    (Stage.RUNNING, "end"),
    (Stage.FINISHING, "finish"),
    (Stage.FINISHING, "end"),
}


@pytest.mark.parametrize(("stage", "event"), sorted(ALLOWED))
def test_every_allowed_move_goes_to_its_stage(stage: Stage, event: str) -> None:
    life = at(stage)
    move, target = EVENTS[event]
    move(life)
    assert life.stage is target


@pytest.mark.parametrize(
    ("stage", "event"), sorted({(s, e) for s in Stage for e in EVENTS} - ALLOWED)
)
def test_every_other_move_raises_and_changes_nothing(stage: Stage, event: str) -> None:
    life = at(stage)
    move, _target = EVENTS[event]
    with pytest.raises(IllegalTransition):
        move(life)
    assert life.stage is stage


def test_the_table_is_the_moves_the_events_make() -> None:
    made = {(s, EVENTS[e][1]) for s, e in ALLOWED}
    assert made == {(s, t) for s, targets in TRANSITIONS.items() for t in targets}


def test_a_new_run_is_admitting_and_shown_running() -> None:
    life = RunLifecycle()
    assert (life.stage, life.stop, life.outcome, life.refusal) == (
        Stage.ADMITTING,
        None,
        None,
        None,
    )
    assert life.state is RunState.RUNNING and not life.ended


@pytest.mark.parametrize("state", sorted(TERMINAL_RUN_STATES))
def test_a_run_is_admitted_only_queued_or_running(state: RunState) -> None:
    life = RunLifecycle()
    with pytest.raises(IllegalTransition, match="admitted queued or running"):
        life.admit(state)
    assert life.stage is Stage.ADMITTING


@pytest.mark.parametrize("state", [RunState.QUEUED, RunState.RUNNING])
def test_a_run_cannot_end_in_a_state_that_is_not_an_end(state: RunState) -> None:
    life = at(Stage.RUNNING)
    with pytest.raises(IllegalTransition, match=f"cannot end {state.value}"):
        life.end(state)
    assert life.stage is Stage.RUNNING and life.outcome is None


@pytest.mark.parametrize("outcome", ENDS)
def test_an_ended_run_is_shown_as_its_outcome_and_ends_once(outcome: RunState) -> None:
    life = at(Stage.FINISHING)
    life.end(outcome)
    assert life.ended and life.outcome is outcome and life.state is outcome
    with pytest.raises(IllegalTransition, match="from ended to ended"):
        life.end(RunState.FAILED)
    assert life.outcome is outcome


def test_a_queued_run_is_shown_queued_until_its_turn() -> None:
    life = at(Stage.QUEUED)
    assert life.state is RunState.QUEUED
    life.take_turn()
    assert life.state is RunState.RUNNING


def test_finishing_is_still_shown_running() -> None:
    assert at(Stage.FINISHING).state is RunState.RUNNING


def test_a_refusal_is_recorded_while_admitting_only() -> None:
    life = RunLifecycle()
    error = Unavailable("history is down")
    life.refuse(error)
    assert life.refusal is error and life.stage is Stage.ADMITTING
    life.finish()
    with pytest.raises(IllegalTransition, match="finishing cannot be refused"):
        life.refuse(error)


@pytest.mark.parametrize("stage", [Stage.QUEUED, Stage.RUNNING, Stage.ENDED])
def test_an_admitted_or_ended_run_cannot_be_refused(stage: Stage) -> None:
    with pytest.raises(IllegalTransition):
        at(stage).refuse(Unavailable("late"))


# ---- stop requests ------------------------------------------------------------------

STOPPABLE = [Stage.ADMITTING, Stage.QUEUED, Stage.RUNNING]


@pytest.mark.parametrize("stage", STOPPABLE)
def test_a_first_cancel_stops_the_steps_and_a_second_does_nothing(stage: Stage) -> None:
    life = at(stage)
    assert life.request_cancel() is True
    assert life.stop is Stop.CANCEL and life.cancelling and life.stopping
    assert life.request_cancel() is False
    assert life.stage is stage  # a request: the run honours it at its next step boundary


@pytest.mark.parametrize("stage", [Stage.FINISHING, Stage.ENDED])
def test_a_cancel_once_the_end_is_being_recorded_is_too_late(stage: Stage) -> None:
    life = at(stage)
    assert life.request_cancel() is False
    assert life.stop is None and not life.cancelling


@pytest.mark.parametrize("stage", STOPPABLE)
def test_a_lost_lease_stops_the_steps_once(stage: Stage) -> None:
    life = at(stage)
    assert life.lose_lease() is True
    assert life.lease_lost and life.stopping and not life.cancelling
    assert life.lose_lease() is False


@pytest.mark.parametrize("stage", [Stage.FINISHING, Stage.ENDED])
def test_a_lost_lease_while_the_end_is_recorded_is_expected(stage: Stage) -> None:
    life = at(stage)
    assert life.lose_lease() is False
    assert not life.lease_lost


def test_a_lost_lease_overrides_a_cancel_and_a_later_cancel_changes_nothing() -> None:
    life = at(Stage.RUNNING)
    life.request_cancel()
    assert life.lose_lease() is True and life.lease_lost
    assert life.request_cancel() is False and life.stop is Stop.LEASE_LOST


def test_a_stopped_run_still_moves_through_its_stages() -> None:
    life = RunLifecycle()
    life.request_cancel()
    life.admit(RunState.QUEUED)
    life.finish()
    life.end(RunState.CANCELLED)
    assert life.state is RunState.CANCELLED and life.stop is Stop.CANCEL


# ---- the one vocabulary, mapped to protobuf and AG-UI --------------------------------


def test_every_run_state_maps_to_history_and_back() -> None:
    assert set(RUN_STATE_TO_PB) == set(RunState)
    assert {RUN_STATE_FROM_PB[v] for v in RUN_STATE_TO_PB.values()} == set(RunState)
    names = set(history_pb.RunState.keys()) - {"RUN_STATE_UNSPECIFIED"}
    assert {history_pb.RunState.Name(v) for v in RUN_STATE_TO_PB.values()} == names


def test_a_record_state_this_version_does_not_know_is_not_an_end() -> None:
    assert convert.record_state(history_pb.RUN_STATE_UNSPECIFIED) is RunState.RUNNING
    assert convert.record_state(99) is RunState.RUNNING


@pytest.mark.parametrize(
    ("state", "outcome"),
    [
        (RunState.SUCCEEDED, run_event_pb2.RUN_OUTCOME_SUCCESS),
        (RunState.INTERRUPTED, run_event_pb2.RUN_OUTCOME_INTERRUPT),
        (RunState.CANCELLED, run_event_pb2.RUN_OUTCOME_CANCELLED),
    ],
)
def test_an_end_reaches_agui_as_run_finished_with_its_outcome(
    state: RunState, outcome: int
) -> None:
    event = convert.run_end(state, ["tc-1"])
    assert event.run_finished.outcome == outcome
    assert list(event.run_finished.pending_tool_call_ids) == ["tc-1"]


@pytest.mark.parametrize("state", [RunState.FAILED, RunState.QUEUED, RunState.RUNNING])
def test_only_an_end_other_than_failed_is_a_run_finished(state: RunState) -> None:
    with pytest.raises(ValueError, match="RUN_ERROR"):
        convert.run_end(state)


@pytest.mark.parametrize("state", ENDS)
def test_the_end_of_a_finished_record_is_its_state(state: RunState) -> None:
    record = history_pb.Run(
        state=RUN_STATE_TO_PB[state], error_code="LEASE_EXPIRED", error_message="gone"
    )
    event = convert.end_of(record)
    if state is RunState.FAILED:
        assert (event.run_error.code, event.run_error.message) == ("LEASE_EXPIRED", "gone")
    else:
        assert event.run_finished.outcome == convert.run_end(state).run_finished.outcome


def test_finish_run_request_names_the_state_in_historys_terms() -> None:
    plan = RunPlan(
        owner="alice",
        thread_id="t-1",
        run_id="r-1",
        origin=RuntimeMode.CHAT,
        profile=CHAT_DEFAULT,
        inputs=(user("hello"),),
        time_zone="UTC",
    )
    request = convert.finish_run_request(plan, RunState.CANCELLED, code="X", message="m")
    assert (request.run_id, request.state) == ("r-1", history_pb.RUN_STATE_CANCELLED)
    assert (request.error_code, request.error_message) == ("X", "m")
