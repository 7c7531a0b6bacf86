"""The table of run-event kinds (shared.run_events) against the protobuf contract and the
AG-UI rules: every payload has its row, every span opens and closes, and what the services
build from the table (the orchestrator's closing events, the gateway's SSE events and a
resume's re-opened spans) is a stream a strict AG-UI client accepts."""

from __future__ import annotations

from typing import Any

import pytest
from ag_ui.core import EventType
from ag_ui.core.events import Event
from agentmesh.type.v1 import run_event_pb2
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from services.gateway import sse
from services.gateway.resume import Replay
from services.orchestrator import convert
from services.orchestrator.core import OpenSpans
from shared import run_events
from shared.run_events import CLOSER, EVENT_KINDS, OPENER, STREAMER, SpanRole
from tests.agui_rules import check_agui

AGUI_EVENT: TypeAdapter[Any] = TypeAdapter(Event)
PAYLOADS = [f.name for f in run_event_pb2.RunEvent.DESCRIPTOR.oneofs_by_name["payload"].fields]
SPANS = sorted(OPENER)


def test_every_run_event_payload_has_exactly_one_row() -> None:
    assert sorted(k.payload for k in EVENT_KINDS) == sorted(PAYLOADS)


def test_every_row_is_sent_as_a_distinct_agui_event_type() -> None:
    types = [k.agui_type for k in EVENT_KINDS]
    assert len(set(types)) == len(types)
    assert set(types) <= {t.value for t in EventType}


def test_every_span_has_one_opening_and_one_closing_kind_and_at_most_one_stream() -> None:
    for span in {k.span for k in EVENT_KINDS if k.span}:
        roles = [k.role for k in EVENT_KINDS if k.span == span]
        assert roles.count(SpanRole.OPENS) == 1 and roles.count(SpanRole.CLOSES) == 1, span
        assert roles.count(SpanRole.STREAMS) <= 1, span
        assert len({k.id_field for k in EVENT_KINDS if k.span == span}) == 1, span


def test_the_named_fields_are_fields_of_the_payloads() -> None:
    for kind in EVENT_KINDS:
        fields = run_event_pb2.RunEvent.DESCRIPTOR.fields_by_name[kind.payload].message_type
        for name in (kind.id_field, kind.delta_field):
            if name:
                assert name in fields.fields_by_name, (kind.payload, name)


def test_terminal_kinds_are_run_finished_and_run_error_and_open_nothing() -> None:
    assert run_events.TERMINAL_AGUI_TYPES == {"RUN_FINISHED", "RUN_ERROR"}
    assert all(k.role is None for k in EVENT_KINDS if k.terminal)


def test_the_run_lifecycle_steps_and_snapshots_are_never_relayed_from_an_executor() -> None:
    assert run_events.RELAYED_PAYLOADS.isdisjoint(
        {"run_started", "run_finished", "run_error", "step_started", "step_finished"}
    )
    assert "messages_snapshot" not in run_events.RELAYED_PAYLOADS
    assert {"text_message_content", "tool_call_args", "tool_call_result"} <= (
        run_events.RELAYED_PAYLOADS
    )


def _pb(kind: run_events.EventKind, ident: str, delta: str = "x") -> run_event_pb2.RunEvent:
    event = run_event_pb2.RunEvent(thread_id="t", run_id="r", timestamp_ms=1)
    body = getattr(event, kind.payload)
    body.SetInParent()
    if kind.id_field:
        setattr(body, kind.id_field, ident)
    if kind.delta_field:
        setattr(body, kind.delta_field, delta)
    if kind.payload == "tool_call_start":
        body.tool_call_name = "memory_search"
    if kind.payload == "custom":
        body.name = "agentmesh.test"
    return event


@pytest.mark.parametrize("kind", EVENT_KINDS, ids=lambda k: k.payload)
def test_the_gateway_sends_every_kind_as_a_valid_agui_event_of_its_type(
    kind: run_events.EventKind,
) -> None:
    out = sse.to_agui(_pb(kind, "id-1"))
    assert out is not None and out["type"] == kind.agui_type
    if kind.agui_id_key:
        assert out[kind.agui_id_key] == "id-1"
    AGUI_EVENT.validate_python(out)


@pytest.mark.parametrize("kind", [k for k in EVENT_KINDS if k.delta_field], ids=lambda k: k.payload)
def test_an_empty_delta_is_not_sent(kind: run_events.EventKind) -> None:
    assert sse.to_agui(_pb(kind, "id-1", delta="")) is None


# A run's events as a program: open a span, stream into an open one, close an open one.
ops = st.lists(
    st.tuples(
        st.sampled_from(["open", "stream", "close"]), st.sampled_from(SPANS), st.integers(0, 2)
    ),
    max_size=40,
)


def _stream(program: list[tuple[str, str, int]]) -> list[run_event_pb2.RunEvent]:
    """The events of `program` that a well-behaved run emits (only open spans get deltas or
    ends; a span is not opened twice), after RUN_STARTED."""
    events = [_pb(run_events.BY_PAYLOAD["run_started"], "")]
    tracker = run_events.SpanTracker()
    for op, span, n in program:
        ident = f"{span}-{n}"
        is_open = tracker.is_open(span, ident)
        if op == "open" and not is_open:
            kind = OPENER[span]
        elif op == "stream" and is_open and span in STREAMER:
            kind = STREAMER[span]
        elif op == "close" and is_open:
            kind = CLOSER[span]
        else:
            continue
        events.append(_pb(kind, ident))
        tracker.observe_pb(events[-1])
    return events


def _agui(events: list[run_event_pb2.RunEvent]) -> list[dict[str, Any]]:
    return [e for e in (sse.to_agui(ev) for ev in events) if e is not None]


@settings(max_examples=200, deadline=None)
@given(ops)
def test_a_stopped_run_closes_every_open_span_before_run_finished(
    program: list[tuple[str, str, int]],
) -> None:
    events = _stream(program)
    spans = OpenSpans()
    for ev in events:
        convert.observe(spans, ev)
    # What the orchestrator emits when a run is cancelled midway.
    events += [convert.closing_event(kind, ident) for kind, ident in spans.closing()]
    events.append(convert.run_finished(run_event_pb2.RUN_OUTCOME_CANCELLED))
    check_agui(_agui(events), complete=True)


@settings(max_examples=200, deadline=None)
@given(ops, st.integers(0, 40))
def test_a_resume_reopens_exactly_what_was_open_and_the_rest_is_accepted(
    program: list[tuple[str, str, int]], cut: int
) -> None:
    events = _stream(program)
    spans = OpenSpans()
    for ev in events:
        convert.observe(spans, ev)
    events += [convert.closing_event(kind, ident) for kind, ident in spans.closing()]
    events.append(convert.run_finished(run_event_pb2.RUN_OUTCOME_SUCCESS))
    agui = _agui(events)
    seen, rest = agui[: min(cut, len(agui) - 1) or 1], agui[min(cut, len(agui) - 1) or 1 :]
    replay = Replay()
    for e in seen:
        replay.observe(e)
    resumed = replay.prefix("t", "r") + rest
    check_agui(resumed, complete=True)
    for e in resumed:
        AGUI_EVENT.validate_python(e)


def test_the_checker_refuses_an_event_after_run_error() -> None:
    events = [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "RUN_ERROR", "message": "failed"},
        {"type": "STEP_STARTED", "stepName": "worker"},
    ]
    with pytest.raises(AssertionError, match="nothing after the terminal event"):
        check_agui(events, complete=True)


def test_the_checker_refuses_run_finished_with_a_span_open() -> None:
    events = [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "REASONING_START", "messageId": "m1"},
        {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "success"}},
    ]
    with pytest.raises(AssertionError, match="open before RUN_FINISHED"):
        check_agui(events, complete=True)
