"""The lifecycle of a tool call: two explicit state machines, how its streamed fragments
assemble, and what was emitted to the client.

Before execution (ToolCallState), the legal moves are:

    pending  -> asking      the tool needs the user's approval
    pending  -> allowed     shortcut: the tool needs no approval
    asking   -> allowed     the user approved
    allowed  -> submitted   handed over: a local tool starts running, or an external
                            (client-side) tool is sent to the client, which runs it
    submitted -> finished   a result arrived
    pending | asking | allowed -> finished
                            shortcut: denied (by policy or by the user) or interrupted
                            before it was handed over; it never ran

After execution starts (ToolResultState; "not started" is None):

    None    -> running      submitted
    running -> success | error | interrupted | denied
                            denied here: an external tool whose user declined it
    None    -> denied | interrupted
                            shortcut: refused or cancelled before it ran

Anything else raises IllegalTransition. The two machines move together through
ToolCallLifecycle (submit() moves both; a terminal result finishes the call).

Whether TOOL_CALL_START was emitted is recorded explicitly per call id by ToolCallTracker,
never inferred from a state: AgentScope's duplicate-START bug (issue #2166) came from
"close the unfinished calls" inferring "START not yet sent" from a state it did not expect
(an external call moved to SUBMITTED got a second START). Here START, ARGS, END and RESULT
are each emitted at most once per call, END only after START, and a call whose START went
out in an earlier run (an external call the client answers in its next run) is seeded with
`already_emitted` and only ever gets its RESULT. The events are the step's own
(services.executor.events), the one vocabulary both agents speak; the servicer converts them.

Each model turn has a tracker of its own (a provider without call ids numbers a turn's calls
from call_0 again: two turns' calls may share an id, never one turn's).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from services.executor.events import (
    StepEvent,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallResult,
    ToolCallStart,
)
from shared.messages import (
    Msg,
    ToolCallBlock,
    ToolCallState,
    ToolResultState,
    tool_result_message_id,
)


class IllegalTransition(ValueError):
    """A tool call was moved or emitted out of order."""


S = ToolCallState
R = ToolResultState

CALL_TRANSITIONS: dict[ToolCallState, frozenset[ToolCallState]] = {
    S.PENDING: frozenset({S.ASKING, S.ALLOWED, S.FINISHED}),
    S.ASKING: frozenset({S.ALLOWED, S.FINISHED}),
    S.ALLOWED: frozenset({S.SUBMITTED, S.FINISHED}),
    S.SUBMITTED: frozenset({S.FINISHED}),
    S.FINISHED: frozenset(),
}

RESULT_TRANSITIONS: dict[ToolResultState | None, frozenset[ToolResultState]] = {
    None: frozenset({R.RUNNING, R.DENIED, R.INTERRUPTED}),
    R.RUNNING: frozenset({R.SUCCESS, R.ERROR, R.INTERRUPTED, R.DENIED}),
    R.SUCCESS: frozenset(),
    R.ERROR: frozenset(),
    R.INTERRUPTED: frozenset(),
    R.DENIED: frozenset(),
}

TERMINAL_RESULTS = frozenset({R.SUCCESS, R.ERROR, R.INTERRUPTED, R.DENIED})


def next_call_state(current: ToolCallState, target: ToolCallState) -> ToolCallState:
    if target not in CALL_TRANSITIONS[current]:
        raise IllegalTransition(f"tool call cannot go from {current.value} to {target.value}")
    return target


def next_result_state(current: ToolResultState | None, target: ToolResultState) -> ToolResultState:
    if target not in RESULT_TRANSITIONS[current]:
        before = current.value if current is not None else "not started"
        raise IllegalTransition(f"tool result cannot go from {before} to {target.value}")
    return target


@dataclass
class ToolCallLifecycle:
    """One tool call's two state machines, moved together."""

    id: str
    name: str
    external: bool = False
    state: ToolCallState = ToolCallState.PENDING
    result: ToolResultState | None = None

    def ask(self) -> None:
        self.state = next_call_state(self.state, S.ASKING)

    def allow(self) -> None:
        self.state = next_call_state(self.state, S.ALLOWED)

    def submit(self) -> None:
        """Hand the call over (to the local runner or the client): it is running."""
        state = next_call_state(self.state, S.SUBMITTED)
        self.result = next_result_state(self.result, R.RUNNING)
        self.state = state

    def finish(self, outcome: ToolResultState) -> None:
        """A terminal outcome: success/error after running; denied/interrupted at any point."""
        if outcome not in TERMINAL_RESULTS:
            raise IllegalTransition(f"{outcome.value} is not an outcome")
        state = next_call_state(self.state, S.FINISHED)
        self.result = next_result_state(self.result, outcome)
        self.state = state

    def deny(self) -> None:
        self.finish(R.DENIED)

    def interrupt(self) -> None:
        self.finish(R.INTERRUPTED)

    @property
    def finished(self) -> bool:
        return self.state == S.FINISHED

    @property
    def stored_state(self) -> ToolCallState:
        """The state its turn's message stores: where the step leaves the call. A call
        allowed to run here is stored finished: the step runs it, and its result is the
        step's next message."""
        return S.FINISHED if self.state == S.ALLOWED else self.state


@dataclass
class _Emitted:
    name: str
    parent_message_id: str
    # The input's fragments as they streamed (None: a call this tracker did not assemble).
    input: list[str] | None = None
    start: bool = False
    args: bool = False
    end: bool = False
    result: bool = False


@dataclass
class ToolCallTracker:
    """The tool calls of one model turn: their streamed input, their lifecycles and which
    AG-UI events went out."""

    _emitted: dict[str, _Emitted] = field(default_factory=dict)
    _calls: dict[str, ToolCallLifecycle] = field(default_factory=dict)

    # -- lifecycles --

    def track(self, call_id: str, name: str, *, external: bool = False) -> ToolCallLifecycle:
        """The lifecycle of `call_id` (created pending on first use)."""
        call = self._calls.get(call_id)
        if call is None:
            call = self._calls[call_id] = ToolCallLifecycle(call_id, name, external)
        return call

    def lifecycle(self, call_id: str) -> ToolCallLifecycle:
        return self._calls[call_id]

    def already_emitted(self, call_id: str, name: str, *, result: bool = False) -> None:
        """Seed a call whose START/ARGS/END went out in an earlier run (and its RESULT, if
        `result`): it will never get them again."""
        self._emitted[call_id] = _Emitted(name, "", start=True, args=True, end=True, result=result)

    @classmethod
    def resumed(cls, history: Iterable[Msg]) -> ToolCallTracker:
        """A tracker for a run continuing `history`: every call and result in it was emitted."""
        tracker = cls()
        results = {r.id for m in history for r in m.tool_results}
        for m in history:
            for c in m.tool_calls:
                tracker.already_emitted(c.id, c.name, result=c.id in results)
        return tracker

    # -- assembly --

    def stream(self, block: ToolCallBlock, parent_message_id: str) -> list[StepEvent]:
        """One streamed fragment of a call: the first names it (a later one may, if the first
        did not), the input JSON concatenates. START on its first fragment, ARGS for input."""
        e = self._emitted.get(block.id)
        if e is None:
            e = self._emitted[block.id] = _Emitted(block.name, parent_message_id, [])
        elif block.name and not e.name:
            e.name = block.name
        if e.input is None:
            raise IllegalTransition(f"{block.id} was emitted in an earlier run")
        if block.input:
            e.input.append(block.input)
        return self.start(block.id, e.name, parent_message_id) + self.args(block.id, block.input)

    def whole(self, call: ToolCallBlock, parent_message_id: str) -> list[StepEvent]:
        """A call known whole (not streamed): START, ARGS with its input, END."""
        return self.stream(call, parent_message_id) + self.end(call.id)

    def calls(self) -> list[ToolCallBlock]:
        """The calls assembled here, in the order they began, each pending."""
        return [
            ToolCallBlock(cid, e.name, "".join(e.input), ToolCallState.PENDING)
            for cid, e in self._emitted.items()
            if e.input is not None
        ]

    # -- emission, each at most once and in order --

    def started(self, call_id: str) -> bool:
        e = self._emitted.get(call_id)
        return e is not None and e.start

    def open_calls(self) -> list[str]:
        """Calls whose START went out and whose END did not."""
        return [cid for cid, e in self._emitted.items() if e.start and not e.end]

    def start(self, call_id: str, name: str, parent_message_id: str = "") -> list[StepEvent]:
        e = self._emitted.setdefault(call_id, _Emitted(name, parent_message_id))
        if e.start:
            return []
        e.start = True
        return [ToolCallStart(call_id, name, parent_message_id)]

    def args(self, call_id: str, delta: str) -> list[StepEvent]:
        """One ARGS fragment (streaming may send many); only between START and END."""
        e = self._emitted.get(call_id)
        if e is None or not e.start:
            raise IllegalTransition(f"TOOL_CALL_ARGS before TOOL_CALL_START for {call_id}")
        if e.end:
            raise IllegalTransition(f"TOOL_CALL_ARGS after TOOL_CALL_END for {call_id}")
        e.args = True
        if not delta:
            return []
        return [ToolCallArgs(call_id, delta)]

    def end(self, call_id: str) -> list[StepEvent]:
        e = self._emitted.get(call_id)
        if e is None or not e.start:
            raise IllegalTransition(f"TOOL_CALL_END before TOOL_CALL_START for {call_id}")
        if e.end:
            return []
        e.end = True
        return [ToolCallEnd(call_id)]

    def result(self, call_id: str, message_id: str, content: str) -> list[StepEvent]:
        e = self._emitted.get(call_id)
        if e is None or not e.end:
            raise IllegalTransition(f"TOOL_CALL_RESULT before TOOL_CALL_END for {call_id}")
        if e.result:
            return []
        e.result = True
        return [ToolCallResult(message_id, call_id, content)]

    def close_open(self) -> list[StepEvent]:
        """END every started call that is still open (the run is ending: every START must be
        closed before RUN_FINISHED); calls never started get nothing, never a START."""
        return [ev for cid in self.open_calls() for ev in self.end(cid)]


def tool_call_events(msg: Msg, tracker: ToolCallTracker) -> list[StepEvent]:
    """The AG-UI events of a merged assistant message's tool calls and results, in order:
    START, ARGS (the whole input as one delta), END per call, then RESULT per result; each
    only if the tracker has not emitted it yet (so calling it again, or for a call a
    previous run already streamed, adds nothing twice). RESULT content is the output's
    text; media in a result are not carried by the event."""
    events: list[StepEvent] = []
    for call in msg.tool_calls:
        if tracker.started(call.id):  # streamed already (or in an earlier run): close at most
            events += tracker.end(call.id)
            continue
        events += tracker.start(call.id, call.name, msg.id)
        events += tracker.args(call.id, call.input)
        events += tracker.end(call.id)
    for i, result in enumerate(msg.tool_results):
        events += tracker.result(result.id, tool_result_message_id(msg.id, i), result.text)
    return events
