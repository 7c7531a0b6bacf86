"""What a client resuming a run mid-stream needs before the rest of the events.

A strict AG-UI client starts every stream fresh: RUN_STARTED first, and no CONTENT, ARGS or
END for a message, tool call, reasoning or step it has not seen start. `Replay` follows the
run's AG-UI events up to the client's Last-Event-ID and tells what was open there; `prefix()`
is RUN_STARTED followed by a re-opened START for each (outermost first, in the order they
opened), with the text, arguments or reasoning streamed so far as one CONTENT/ARGS event.
None of these frames carries an id (docs/protocols/agent/sse-events.md, "Resuming").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from services.gateway.sse import Event
from shared import run_events


@dataclass
class Replay:
    run_started: Event | None = None
    terminal: Event | None = None
    spans: run_events.SpanTracker = field(default_factory=run_events.SpanTracker)

    def observe(self, event: Event) -> None:
        kind = event["type"]
        if kind == "RUN_STARTED":
            self.run_started = event
        elif kind in run_events.TERMINAL_AGUI_TYPES:
            self.terminal = event
        else:
            self.spans.observe_agui(event)

    def prefix(self, thread_id: str, run_id: str) -> list[Event]:
        started = self.run_started or {
            "type": "RUN_STARTED",
            "threadId": thread_id,
            "runId": run_id,
        }
        out: list[Event] = [started]
        for span in self.spans.open.values():
            out.append(cast(Event, span.start))  # observe_agui keeps the AG-UI event
            content = run_events.STREAMER.get(span.kind.span)
            if span.text and content is not None:
                out.append(
                    {"type": content.agui_type, content.agui_id_key: span.ident, "delta": span.text}
                )
        return out
