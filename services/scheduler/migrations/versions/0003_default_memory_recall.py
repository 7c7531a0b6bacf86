"""automation_jobs.execution_profile: the default memory jobs' snapshots get the memory
policy automation_memory_default has now (recall of the owner's memories, so the memory
agent rewrites a fact instead of writing a near-duplicate). Snapshots a person changed, or
that already say a memory policy, are left as they are.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

# The snapshots as they are written out, not read from the code: a migration must not change
# when the code does. BEFORE is 0002's snapshot, AFTER the same with today's memory policy.
BEFORE = {
    "name": "automation_memory_default",
    "enable_router": False,
    "executor": "memory",
    "tool_policy": {"mode": "intersection", "allowlist": ["memory_write", "memory_forget"]},
    "history_policy": {"window": "today_yesterday"},
}
MEMORY = {"mode": "recall", "top_k": 20, "min_relevance": 0.0, "max_tokens": 800}


def _canonical(profile: object) -> object:
    """The snapshot without the keys a model dump of 0002's code added (agent, the tool
    policy's newer keys), so a stored 0002 snapshot and a dumped one compare equal."""
    if not isinstance(profile, dict):
        return profile
    out = {k: v for k, v in profile.items() if k not in ("agent", "memory")}
    if isinstance(out.get("tool_policy"), dict):
        policy = {k: v for k, v in out["tool_policy"].items() if k != "requires_approval"}
        out["tool_policy"] = policy
    return out


def upgrade() -> None:
    jobs = sa.table(
        "automation_jobs", sa.column("id", sa.String), sa.column("execution_profile", _JSON)
    )
    bind = op.get_bind()
    for job_id, profile in bind.execute(sa.select(jobs.c.id, jobs.c.execution_profile)).all():
        if isinstance(profile, str):  # a JSON column read back as text on some drivers
            profile = json.loads(profile)
        # Before this revision no snapshot had a memory policy: one that has it is newer.
        if not isinstance(profile, dict) or "memory" in profile or _canonical(profile) != BEFORE:
            continue
        bind.execute(
            jobs.update()
            .where(jobs.c.id == job_id)
            .values(execution_profile={**profile, "memory": MEMORY})
        )


def downgrade() -> None:
    # The policy added is a valid part of the snapshot under 0002's code too: nothing to undo.
    pass
