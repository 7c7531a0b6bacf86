"""The writing rules of core, as pure functions."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from services.history import core
from shared.domain import MessageKind, RuntimeMode
from shared.errors import AlreadyExists, InvalidArgument

# --- writing rules-----------------------------------------------------------------------


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


# --- appending -------------------------------------------------------------------------------

T0 = datetime(2025, 1, 1, tzinfo=UTC)
THREAD = core.Thread("o", "t", RuntimeMode.CHAT, T0, T0, message_count=4)


def new(message_id: str, origin: RuntimeMode | None = None) -> core.NewMessage:
    return core.NewMessage(
        id=message_id, role="user", kind=MessageKind.USER_MESSAGE, content=(), origin=origin
    )


def test_appended_messages_take_the_positions_after_the_count_and_consecutive_sequences() -> None:
    now = datetime(2025, 1, 2, tzinfo=UTC)
    thread, stored = core.plan_append(THREAD, [new("a"), new("b")], 40, now)
    assert [(m.id, m.position, m.sequence) for m in stored] == [("a", 5, 40), ("b", 6, 41)]
    assert all(m.created_at == now and m.thread_id == "t" for m in stored)
    assert (thread.message_count, thread.update_time) == (6, now)


def test_a_failed_automation_runs_messages_are_stamped_audit_only() -> None:
    automation = core.Thread("o", "a", RuntimeMode.AUTOMATION, T0, T0, message_count=0)
    reply = dataclasses.replace(new("a"), kind=MessageKind.AGENT_REPLY)
    _, (ok,) = core.plan_append(automation, [reply], 1, T0)
    _, (failed,) = core.plan_append(automation, [reply], 1, T0, run_failed=True)
    assert (ok.visibility_mask, failed.visibility_mask, failed.hidden_from_user) == (1, 0, True)


def test_only_new_ids_are_appended_once_each_in_order() -> None:
    _, (stored,) = core.plan_append(THREAD, [new("a")], 1, T0)
    items = [new("b"), new("a"), new("c"), new("b")]
    assert [m.id for m in core.new_in(THREAD, items, {"a": stored}, "messages")] == ["b", "c"]


def test_an_id_stored_in_another_thread_is_taken() -> None:
    other = core.Thread("o", "u", RuntimeMode.CHAT, T0, T0, message_count=0)
    _, (stored,) = core.plan_append(other, [new("a")], 1, T0)
    with pytest.raises(AlreadyExists):
        core.new_in(THREAD, [new("a")], {"a": stored}, "messages")


def test_a_message_of_another_origin_than_the_threads_mode_is_refused() -> None:
    with pytest.raises(InvalidArgument) as err:
        core.new_in(THREAD, [new("a"), new("b", RuntimeMode.AUTOMATION)], {}, "messages")
    assert err.value.violations[0][0] == "messages[1].metadata.origin"
