"""The rules a strict AG-UI client enforces on one stream, checked from the table of event
kinds (shared.run_events), so the tests' checks know every kind the services do."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shared import run_events
from shared.run_events import SpanRole


def check_agui(events: Sequence[Mapping[str, Any]], *, complete: bool) -> None:
    """RUN_STARTED first and once; every CONTENT/ARGS/END of a span it opened and did not
    close; no START of a span already open; every START closed before RUN_FINISHED; nothing
    after RUN_FINISHED or RUN_ERROR; no unknown types. `complete`: the stream ended."""
    assert events and events[0]["type"] == "RUN_STARTED", [e["type"] for e in events[:3]]
    spans = run_events.SpanTracker()
    for i, e in enumerate(events):
        kind = run_events.BY_AGUI_TYPE.get(e["type"])
        assert kind is not None, f"unknown event type {e['type']!r}"
        assert e["type"] != "RUN_STARTED" or i == 0, "RUN_STARTED only first"
        if kind.terminal:
            assert i == len(events) - 1, "nothing after the terminal event"
            if e["type"] == "RUN_FINISHED":
                assert not spans.open, f"open before RUN_FINISHED: {list(spans.open)}"
        elif kind.role is not None:
            ident = e[kind.agui_id_key]
            is_open = spans.is_open(kind.span, ident)
            if kind.role is SpanRole.OPENS:
                assert not is_open, f"{e['type']} of {ident!r}, which is open already"
            else:
                assert is_open, f"{e['type']} of {ident!r}, which is not open"
            spans.observe_agui(e)
    if complete:
        assert run_events.BY_AGUI_TYPE[events[-1]["type"]].terminal, events[-1]
