"""The audit listing's paging (services/history/audit.py), as pure functions: two streams,
messages and refused tool calls, side by side, each with its own key."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.history import core
from services.history.audit import AuditCursor, DenialKey, plan_audit_page
from services.history.context import ContextKey
from shared.domain import ExecutorKind, MessageKind, RuntimeMode
from shared.errors import InvalidArgument

T0 = datetime(2025, 1, 1, tzinfo=UTC)
THREAD = core.Thread("o", "t", RuntimeMode.CHAT, T0, T0, message_count=0)


def messages(n: int) -> list[core.Message]:
    new = [
        core.NewMessage(id=f"m{i}", role="user", kind=MessageKind.USER_MESSAGE, content=())
        for i in range(n)
    ]
    return core.plan_append(THREAD, new, 1, T0)[1]


def denials(n: int) -> list[core.ToolDenial]:
    return [
        core.ToolDenial(
            owner_id="o",
            run_id="r",
            thread_id="t",
            tool_call_id=f"c{i}",
            tool_name="f",
            arguments_sha256="0" * 64,
            reason="not_in_profile",
            origin=RuntimeMode.CHAT,
            executor=ExecutorKind.WORKER,
            execution_profile_name="p",
            created_at=T0 + timedelta(seconds=i),
        )
        for i in range(n)
    ]


def test_both_streams_with_more_go_on_from_their_pages_last_items() -> None:
    ms, ds = messages(3), denials(3)
    page = plan_audit_page(ms, ds, 2)
    assert ([m.id for m in page.messages], [d.tool_call_id for d in page.denials]) == (
        ["m0", "m1"],
        ["c0", "c1"],
    )
    assert page.next == AuditCursor(message=ContextKey.of(ms[1]), denial=DenialKey.of(ds[1]))


def test_a_stream_that_fits_its_page_is_done_while_the_other_goes_on() -> None:
    page = plan_audit_page(messages(3), denials(1), 2)
    assert page.next is not None
    assert (page.next.messages_done, page.next.denials_done, page.next.denial) == (
        False,
        True,
        None,
    )


def test_the_last_page_has_no_cursor() -> None:
    page = plan_audit_page(messages(2), denials(2), 2)
    assert (len(page.messages), len(page.denials), page.next) == (2, 2, None)


def test_a_cursor_survives_its_token() -> None:
    cursor = AuditCursor(message=ContextKey(T0, "t", 4), denial=DenialKey(T0, "r", "c"))
    assert AuditCursor.from_token(cursor.to_token()) == cursor
    assert AuditCursor.from_token(None) == AuditCursor()


def test_a_token_whose_done_marks_are_not_booleans_is_refused() -> None:
    with pytest.raises(InvalidArgument) as err:
        AuditCursor.from_token({"m": None, "md": 0, "d": None, "dd": False})
    assert err.value.violations[0][0] == "page_token"
