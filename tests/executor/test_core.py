"""Pure rules of the executor."""

from __future__ import annotations

import pytest

from services.executor import core
from shared.domain import ExecutorKind
from shared.errors import FailedPrecondition


def test_executor_without_an_agent_is_failed_precondition_naming_it() -> None:
    with pytest.raises(FailedPrecondition) as info:
        core.select_agent(ExecutorKind.MEMORY, {ExecutorKind.WORKER: object()})
    assert info.value.message == "memory executor not available"
    assert info.value.reason == "EXECUTOR_NOT_AVAILABLE"


def test_first_turn_carries_the_reply_id_later_turns_their_own() -> None:
    assert core.turn_message_id("reply-1", 0) == "reply-1"
    assert core.turn_message_id("reply-1", 1) not in ("reply-1", core.turn_message_id("reply-1", 1))
