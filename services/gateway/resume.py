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

from services.gateway.sse import Event

# AG-UI START type -> (its kind, the key of its id, the END type, the CONTENT type).
_OPENERS = {
    "TEXT_MESSAGE_START": ("text", "messageId", "TEXT_MESSAGE_END", "TEXT_MESSAGE_CONTENT"),
    "TOOL_CALL_START": ("tool", "toolCallId", "TOOL_CALL_END", "TOOL_CALL_ARGS"),
    "REASONING_START": ("reasoning", "messageId", "REASONING_END", None),
    "REASONING_MESSAGE_START": (
        "reasoning_message",
        "messageId",
        "REASONING_MESSAGE_END",
        "REASONING_MESSAGE_CONTENT",
    ),
}
_CLOSERS = {end: (kind, key) for kind, key, end, _ in _OPENERS.values()}
_CONTENTS = {
    content: (kind, key) for kind, key, _, content in _OPENERS.values() if content is not None
}


@dataclass
class _Open:
    start: Event
    content_type: str | None
    id_key: str
    deltas: list[str] = field(default_factory=list)


@dataclass
class Replay:
    run_started: Event | None = None
    terminal: Event | None = None
    steps: list[str] = field(default_factory=list)
    opened: dict[tuple[str, str], _Open] = field(default_factory=dict)

    def observe(self, event: Event) -> None:
        kind = event["type"]
        if kind == "RUN_STARTED":
            self.run_started = event
        elif kind in ("RUN_FINISHED", "RUN_ERROR"):
            self.terminal = event
        elif kind == "STEP_STARTED":
            self.steps.append(event["stepName"])
        elif kind == "STEP_FINISHED":
            if event["stepName"] in self.steps:
                self.steps.remove(event["stepName"])
        elif kind in _OPENERS:
            what, key, _, content = _OPENERS[kind]
            self.opened[(what, event[key])] = _Open(event, content, key)
        elif kind in _CLOSERS:
            what, key = _CLOSERS[kind]
            self.opened.pop((what, event[key]), None)
        elif kind in _CONTENTS:
            what, key = _CONTENTS[kind]
            item = self.opened.get((what, event[key]))
            if item is not None:
                item.deltas.append(event["delta"])

    def prefix(self, thread_id: str, run_id: str) -> list[Event]:
        started = self.run_started or {
            "type": "RUN_STARTED",
            "threadId": thread_id,
            "runId": run_id,
        }
        out: list[Event] = [started]
        out.extend({"type": "STEP_STARTED", "stepName": name} for name in self.steps)
        for item in self.opened.values():
            out.append(item.start)
            text = "".join(item.deltas)
            if text and item.content_type is not None:
                out.append(
                    {"type": item.content_type, item.id_key: item.start[item.id_key], "delta": text}
                )
        return out
