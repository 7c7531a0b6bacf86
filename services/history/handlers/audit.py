"""The audit listing (ListAudit): a page of an owner's messages and refused tool calls."""

from __future__ import annotations

from services.history import store
from services.history.audit import AuditCursor, AuditFilter, AuditPage, plan_audit_page
from services.history.core import Message, ToolDenial
from services.history.unit import Conn


async def audit_page(
    conn: Conn, owner: str, flt: AuditFilter, cursor: AuditCursor, size: int
) -> AuditPage:
    """The next page of each stream the cursor has not finished."""
    messages: list[Message] = []
    denials: list[ToolDenial] = []
    if not cursor.messages_done:
        messages = await store.audit_page(conn, owner, flt, after=cursor.message, limit=size + 1)
    if not cursor.denials_done:
        denials = await store.denial_page(conn, owner, flt, after=cursor.denial, limit=size + 1)
    return plan_audit_page(messages, denials, size)
