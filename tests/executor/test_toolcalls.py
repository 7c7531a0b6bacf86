"""Tool-call lifecycle: the two state machines, the assembly of streamed fragments and the
at-most-once AG-UI emission."""

from __future__ import annotations

import pytest

from services.executor.events import ToolCallArgs, ToolCallEnd, ToolCallResult, ToolCallStart
from services.executor.toolcalls import (
    CALL_TRANSITIONS,
    IllegalTransition,
    ToolCallLifecycle,
    ToolCallTracker,
    next_call_state,
    tool_call_events,
)
from shared.messages import (
    ToolCallBlock,
    ToolCallState,
    ToolResultBlock,
    ToolResultState,
    assistant,
)

_KINDS = {
    ToolCallStart: "tool_call_start",
    ToolCallArgs: "tool_call_args",
    ToolCallEnd: "tool_call_end",
    ToolCallResult: "tool_call_result",
}


# Events of any kind.
def kinds(events: list) -> list[str]:  # type: ignore[type-arg]
    return [_KINDS[type(e)] for e in events]


def test_local_tool_without_approval_runs_to_success() -> None:
    call = ToolCallLifecycle("c1", "search")
    call.allow()
    call.submit()
    assert (call.state, call.result) == (ToolCallState.SUBMITTED, ToolResultState.RUNNING)
    call.finish(ToolResultState.SUCCESS)
    assert (call.state, call.result) == (ToolCallState.FINISHED, ToolResultState.SUCCESS)


def test_tool_needing_approval_asks_then_runs() -> None:
    call = ToolCallLifecycle("c1", "delete_file")
    call.ask()
    call.allow()
    call.submit()
    call.finish(ToolResultState.ERROR)
    assert call.result == ToolResultState.ERROR


def test_user_denial_while_asking_finishes_denied_without_running() -> None:
    call = ToolCallLifecycle("c1", "delete_file")
    call.ask()
    call.deny()
    assert (call.state, call.result) == (ToolCallState.FINISHED, ToolResultState.DENIED)


def test_policy_denial_from_pending_finishes_denied() -> None:
    call = ToolCallLifecycle("c1", "shell")
    call.deny()
    assert call.result == ToolResultState.DENIED


def test_external_tool_declined_by_the_client_while_running_is_denied() -> None:
    call = ToolCallLifecycle("c1", "pick_color", external=True)
    call.allow()
    call.submit()
    call.deny()
    assert call.result == ToolResultState.DENIED


def test_interrupt_before_submission_and_while_running() -> None:
    before, during = ToolCallLifecycle("a", "t"), ToolCallLifecycle("b", "t")
    before.allow()
    before.interrupt()
    during.allow()
    during.submit()
    during.interrupt()
    assert before.result == during.result == ToolResultState.INTERRUPTED


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (ToolCallState.PENDING, ToolCallState.SUBMITTED),
        (ToolCallState.ALLOWED, ToolCallState.ASKING),
        (ToolCallState.SUBMITTED, ToolCallState.ALLOWED),
        (ToolCallState.FINISHED, ToolCallState.PENDING),
        (ToolCallState.FINISHED, ToolCallState.FINISHED),
    ],
)
def test_illegal_call_transitions_raise(current: ToolCallState, target: ToolCallState) -> None:
    with pytest.raises(IllegalTransition, match=f"from {current.value} to {target.value}"):
        next_call_state(current, target)


def test_every_state_but_finished_can_finish() -> None:
    assert all(
        ToolCallState.FINISHED in CALL_TRANSITIONS[s]
        for s in ToolCallState
        if s != ToolCallState.FINISHED
    )


def test_success_without_running_is_illegal() -> None:
    call = ToolCallLifecycle("c1", "t")
    call.allow()
    with pytest.raises(IllegalTransition, match="not started to success"):
        call.finish(ToolResultState.SUCCESS)


def test_a_finished_call_cannot_finish_again() -> None:
    call = ToolCallLifecycle("c1", "t")
    call.deny()
    with pytest.raises(IllegalTransition):
        call.interrupt()


def test_running_is_not_an_outcome() -> None:
    call = ToolCallLifecycle("c1", "t")
    with pytest.raises(IllegalTransition, match="running is not an outcome"):
        call.finish(ToolResultState.RUNNING)


def test_events_of_a_message_are_start_args_end_then_result() -> None:
    msg = assistant(
        [
            ToolCallBlock(id="c1", name="search", input='{"q":"tea"}'),
            ToolResultBlock(id="c1", name="search", output="found", state=ToolResultState.SUCCESS),
        ],
        id="a1",
    )
    events = tool_call_events(msg, ToolCallTracker())
    assert kinds(events) == [
        "tool_call_start",
        "tool_call_args",
        "tool_call_end",
        "tool_call_result",
    ]
    assert events[0] == ToolCallStart("c1", "search", "a1")
    assert events[1] == ToolCallArgs("c1", '{"q":"tea"}')
    assert events[3] == ToolCallResult("a1/result/0", "c1", "found")


def test_events_of_the_same_message_twice_are_emitted_once() -> None:
    tracker = ToolCallTracker()
    msg = assistant([ToolCallBlock(id="c1", name="search", input="{}")])
    assert len(tool_call_events(msg, tracker)) == 3
    assert tool_call_events(msg, tracker) == []


def test_args_after_end_is_illegal() -> None:
    tracker = ToolCallTracker()
    tracker.start("c1", "t")
    tracker.end("c1")
    with pytest.raises(IllegalTransition, match="ARGS after TOOL_CALL_END"):
        tracker.args("c1", "{}")


def test_result_before_end_is_illegal() -> None:
    tracker = ToolCallTracker()
    tracker.start("c1", "t")
    with pytest.raises(IllegalTransition, match="RESULT before TOOL_CALL_END"):
        tracker.result("c1", "m", "x")


def test_interrupted_streamed_call_is_closed_with_end_and_never_restarted() -> None:
    """Regression (AgentScope #2166): a call cut off mid-stream gets END, not a second START."""
    tracker = ToolCallTracker()
    call = tracker.track("c1", "search")
    events = tracker.start("c1", "search", "a1") + tracker.args("c1", '{"q": "te')
    call.allow()
    call.submit()  # the state moved past allowed: nothing may infer "START not sent" from it
    call.interrupt()
    closing = tracker.close_open()
    assert kinds(closing) == ["tool_call_end"]
    partial = assistant([ToolCallBlock(id="c1", name="search", input='{"q": "te')], id="a1")
    assert tool_call_events(partial, tracker) == []
    assert kinds(events + closing).count("tool_call_start") == 1


def test_external_call_answered_in_the_next_run_gets_only_its_result() -> None:
    """Regression (AgentScope #2166): the client-side tool's START went out in run 1; run 2,
    continuing from the client's tool message, emits RESULT and no second START."""
    run1 = ToolCallTracker()
    asked = assistant([ToolCallBlock(id="c1", name="pick_color", input="{}")], id="a1")
    first = tool_call_events(asked, run1)
    call = run1.track("c1", "pick_color", external=True)
    call.allow()
    call.submit()
    assert kinds(first) == ["tool_call_start", "tool_call_args", "tool_call_end"]
    assert run1.close_open() == []

    run2 = ToolCallTracker.resumed([asked])
    answered = assistant(
        [ToolResultBlock(id="c1", name="pick_color", output="blue", state=ToolResultState.SUCCESS)],
        id="t1",
    )
    assert kinds(tool_call_events(answered, run2)) == ["tool_call_result"]
    assert run2.start("c1", "pick_color") == []


def test_close_open_gives_nothing_to_calls_never_started() -> None:
    tracker = ToolCallTracker()
    tracker.track("c1", "t").deny()
    assert tracker.close_open() == []


def test_streamed_fragments_start_each_call_once_and_concatenate_its_input() -> None:
    tracker = ToolCallTracker()
    events = tracker.stream(ToolCallBlock("c1", "search", '{"q":'), "a1")
    events += tracker.stream(ToolCallBlock("c1", "", ' "tea"}'), "a1")
    events += tracker.stream(ToolCallBlock("c2", "clock", ""), "a1")
    events += tracker.stream(ToolCallBlock("c2", "", "{}"), "a1")
    events += tracker.close_open()
    assert events == [
        ToolCallStart("c1", "search", "a1"),
        ToolCallArgs("c1", '{"q":'),
        ToolCallArgs("c1", ' "tea"}'),
        ToolCallStart("c2", "clock", "a1"),
        ToolCallArgs("c2", "{}"),
        ToolCallEnd("c1"),
        ToolCallEnd("c2"),
    ]
    assert [(b.id, b.name, b.input, b.state) for b in tracker.calls()] == [
        ("c1", "search", '{"q": "tea"}', ToolCallState.PENDING),
        ("c2", "clock", "{}", ToolCallState.PENDING),
    ]


def test_a_call_is_stored_as_the_step_leaves_it() -> None:
    """Run here: finished (its result is the step's next message); sent to the client:
    submitted; waiting for a person: asking; refused: finished."""
    runs, client, asks, refused = (ToolCallLifecycle(c, "t") for c in ("a", "b", "c", "d"))
    runs.allow()
    client.allow()
    client.submit()
    asks.ask()
    refused.deny()
    assert [c.stored_state for c in (runs, client, asks, refused)] == [
        ToolCallState.FINISHED,
        ToolCallState.SUBMITTED,
        ToolCallState.ASKING,
        ToolCallState.FINISHED,
    ]


def test_a_call_emitted_in_an_earlier_run_cannot_stream_again() -> None:
    tracker = ToolCallTracker()
    tracker.already_emitted("c1", "pick_color")
    with pytest.raises(IllegalTransition, match="earlier run"):
        tracker.stream(ToolCallBlock("c1", "pick_color", "{}"), "a1")
