"""The writing rules of core, as pure functions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.history import core
from shared.domain import MessageKind, RuntimeMode
from shared.errors import FailedPrecondition

# --- writing rules-----------------------------------------------------------------------


def test_finishing_twice_with_the_same_state_is_a_noop_and_with_another_a_conflict() -> None:
    assert core.finish_is_noop(core.RunState.RUNNING, core.RunState.SUCCEEDED) is False
    assert core.finish_is_noop(core.RunState.FAILED, core.RunState.FAILED) is True
    with pytest.raises(FailedPrecondition):
        core.finish_is_noop(core.RunState.FAILED, core.RunState.SUCCEEDED)


def test_stamp_takes_the_mask_from_mode_and_kind_only() -> None:
    new = core.NewMessage(id="m", role="user", kind=MessageKind.USER_MESSAGE, content=())
    at = datetime(2025, 1, 1, tzinfo=UTC)
    auto = core.stamp(
        new, owner_id="o", thread_id="t", mode=RuntimeMode.AUTOMATION, position=1, created_at=at
    )
    assert (auto.visibility_mask, auto.hidden_from_user, auto.origin) == (
        0,
        True,
        RuntimeMode.AUTOMATION,
    )
    chat = core.stamp(
        new, owner_id="o", thread_id="t", mode=RuntimeMode.CHAT, position=1, created_at=at
    )
    assert (chat.visibility_mask, chat.hidden_from_user) == (3, False)
