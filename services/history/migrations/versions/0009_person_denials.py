"""tool_denials.reason also takes a person's decisions (denied_by_user, cancelled_by_user,
approval_expired, approval_unanswered), so the audit lists them beside the policy's (issue 33)

Revision ID: 0009_person_denials
Revises: 0008_interrupt_answers
"""

from __future__ import annotations

from alembic import op

revision = "0009_person_denials"
down_revision = "0008_interrupt_answers"
branch_labels = None
depends_on = None

_POLICY = ("not_declared", "not_in_profile", "not_registered")
_PERSON = ("denied_by_user", "cancelled_by_user", "approval_expired", "approval_unanswered")


def _reasons(reasons: tuple[str, ...]) -> str:
    return "reason IN (" + ", ".join(f"'{r}'" for r in reasons) + ")"


def upgrade() -> None:
    # SQLite cannot alter a constraint: batch mode copies the table with the new one.
    with op.batch_alter_table("tool_denials") as batch:
        batch.drop_constraint("ck_tool_denials_reason", type_="check")
        batch.create_check_constraint("ck_tool_denials_reason", _reasons(_POLICY + _PERSON))


def downgrade() -> None:
    op.execute("DELETE FROM tool_denials WHERE " + _reasons(_PERSON))
    with op.batch_alter_table("tool_denials") as batch:
        batch.drop_constraint("ck_tool_denials_reason", type_="check")
        batch.create_check_constraint("ck_tool_denials_reason", _reasons(_POLICY))
