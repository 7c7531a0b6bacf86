"""The visibility matrix of the mask design (seed 000), table by table."""

from __future__ import annotations

import pytest

from services.history.visibility import (
    CONTEXT_ASSEMBLY,
    UI_HISTORY,
    in_context,
    in_history,
    visibility_mask_for,
)
from shared.domain import MessageKind, RuntimeMode

CHAT, AUTO = RuntimeMode.CHAT, RuntimeMode.AUTOMATION
USER, REPLY = MessageKind.USER_MESSAGE, MessageKind.AGENT_REPLY

# 消息 Mask 矩阵: message, runtime_mode, UI_HISTORY bit, CONTEXT_ASSEMBLY bit, mask
MASK_MATRIX = [
    (USER, CHAT, 1, 1, 3),
    (USER, AUTO, 0, 0, 0),
    (REPLY, CHAT, 1, 1, 3),
    (REPLY, AUTO, 1, 0, 1),
]

# 查询结果验证: message, mask, mask & 1, in /history, mask & 2 (as 0/1), in context
QUERY_RESULTS = [
    (CHAT, USER, 3, 1, True, 1, True),
    (CHAT, REPLY, 3, 1, True, 1, True),
    (AUTO, USER, 0, 0, False, 0, False),
    (AUTO, REPLY, 1, 1, True, 0, False),
]


def test_bits_are_bit0_history_and_bit1_context() -> None:
    assert (UI_HISTORY, CONTEXT_ASSEMBLY) == (1 << 0, 1 << 1)


@pytest.mark.parametrize(("kind", "mode", "history_bit", "context_bit", "mask"), MASK_MATRIX)
def test_mask_matrix(
    kind: MessageKind, mode: RuntimeMode, history_bit: int, context_bit: int, mask: int
) -> None:
    got = visibility_mask_for(mode, kind)
    assert got == mask
    assert (got >> 0) & 1 == history_bit
    assert (got >> 1) & 1 == context_bit


@pytest.mark.parametrize(
    ("mode", "kind", "mask", "history_and", "shown", "context_and", "assembled"), QUERY_RESULTS
)
def test_query_result_verification(
    mode: RuntimeMode,
    kind: MessageKind,
    mask: int,
    history_and: int,
    shown: bool,
    context_and: int,
    assembled: bool,
) -> None:
    got = visibility_mask_for(mode, kind)
    assert got == mask
    assert got & UI_HISTORY == history_and
    assert in_history(got) is shown
    assert (got & CONTEXT_ASSEMBLY != 0) == bool(context_and)
    assert in_context(got) is assembled


@pytest.mark.parametrize("mode", [CHAT, AUTO])
@pytest.mark.parametrize("kind", [MessageKind.TOOL_CALL, MessageKind.TOOL_RESULT])
def test_tool_messages_follow_the_reply_of_their_run(mode: RuntimeMode, kind: MessageKind) -> None:
    assert visibility_mask_for(mode, kind) == visibility_mask_for(mode, REPLY)


def test_every_mode_and_kind_has_a_mask() -> None:
    for mode in RuntimeMode:
        for kind in MessageKind:
            assert visibility_mask_for(mode, kind) in (0, 1, 3)


@pytest.mark.parametrize("mode", [CHAT, AUTO])
@pytest.mark.parametrize("kind", [MessageKind.MEMORY_RECALL, MessageKind.ROUTE])
def test_what_a_run_records_for_the_audit_is_neither_shown_nor_assembled(
    mode: RuntimeMode, kind: MessageKind
) -> None:
    assert visibility_mask_for(mode, kind) == 0


@pytest.mark.parametrize("kind", list(MessageKind))
def test_a_failed_automation_runs_messages_are_audit_only(kind: MessageKind) -> None:
    assert visibility_mask_for(AUTO, kind, run_failed=True) == 0


@pytest.mark.parametrize("kind", list(MessageKind))
def test_a_failed_chat_runs_messages_keep_their_mask(kind: MessageKind) -> None:
    assert visibility_mask_for(CHAT, kind, run_failed=True) == visibility_mask_for(CHAT, kind)
