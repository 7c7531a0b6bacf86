"""Message visibility: two bits, and the one function that decides a message's mask.

    BIT 0  UI_HISTORY       = 1   the user sees it in /history
    BIT 1  CONTEXT_ASSEMBLY = 2   it is assembled into the model's context

chat and automation never share a thread, so (runtime_mode, kind) decides everything:
a chat turn is seen and remembered; an automation input is neither shown nor assembled
(it stays auditable); an automation reply is shown but never fed back as context, unless its
run failed: a failed attempt's reply is not the job's answer (the attempt that succeeds
gives it), so it is kept for the audit only (mask 0). The
memories a run recalled into its context are neither shown nor assembled again (each run
recalls its own): they are kept for the audit, as is the router's decision when a model
made it (a route message, which carries that call's usage).
"""

from __future__ import annotations

from shared.domain import MessageKind, RuntimeMode

UI_HISTORY = 1
CONTEXT_ASSEMBLY = 2

_MASKS: dict[tuple[RuntimeMode, MessageKind], int] = {
    (RuntimeMode.CHAT, MessageKind.USER_MESSAGE): UI_HISTORY | CONTEXT_ASSEMBLY,
    (RuntimeMode.CHAT, MessageKind.AGENT_REPLY): UI_HISTORY | CONTEXT_ASSEMBLY,
    (RuntimeMode.AUTOMATION, MessageKind.USER_MESSAGE): 0,
    (RuntimeMode.AUTOMATION, MessageKind.AGENT_REPLY): UI_HISTORY,
    (RuntimeMode.CHAT, MessageKind.MEMORY_RECALL): 0,
    (RuntimeMode.AUTOMATION, MessageKind.MEMORY_RECALL): 0,
    (RuntimeMode.CHAT, MessageKind.ROUTE): 0,
    (RuntimeMode.AUTOMATION, MessageKind.ROUTE): 0,
}

# Tool calls and tool results travel with the reply of their run.
_FOLLOWS_REPLY = {MessageKind.TOOL_CALL, MessageKind.TOOL_RESULT}


def visibility_mask_for(mode: RuntimeMode, kind: MessageKind, *, run_failed: bool = False) -> int:
    """The mask of a message of `kind` in a `mode` thread; `run_failed`: written by a run
    that ended FAILED (its output). A failed chat run keeps the partial reply the user saw
    streamed (marked `error`); a failed automation run's messages are audit only."""
    if run_failed and mode is RuntimeMode.AUTOMATION:
        return 0
    if kind in _FOLLOWS_REPLY:
        kind = MessageKind.AGENT_REPLY
    return _MASKS[(mode, kind)]


def in_history(mask: int) -> bool:
    return mask & UI_HISTORY != 0


def in_context(mask: int) -> bool:
    return mask & CONTEXT_ASSEMBLY != 0
