"""Migration 0007 on a database that already holds runs: the runs that ended before it enter
the usage ledger as their records hold them, so an owner's usage is the same after it (and
no longer drops when their threads are deleted); runs in flight enter when they finish."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from services.history import store, tables
from services.history.service import MIGRATIONS
from shared import db
from shared.settings import Settings


async def test_runs_that_ended_before_0007_are_in_the_ledger_after_it(settings: Settings) -> None:
    engine = db.create_engine(settings, "history")
    schema = settings.schema_for("history")
    start = datetime(2025, 6, 10, 4, 0, tzinfo=UTC)
    try:
        await db.migrate(engine, MIGRATIONS, schema, revision="0006_webhook_outbox")
        async with engine.begin() as conn:
            await conn.execute(
                sa.insert(tables.threads).values(
                    owner_id="alice",
                    id="t1",
                    runtime_mode="chat",
                    create_time=start,
                    update_time=start,
                    message_count=0,
                )
            )
            for run_id, state, origin, tokens, estimated in (
                ("r-done", "succeeded", "chat", (10, 5), False),
                ("r-failed", "failed", "automation", (3, 1), True),
                ("r-live", "running", "chat", (0, 0), False),
            ):
                finished = state != "running"
                await conn.execute(
                    sa.insert(tables.runs).values(
                        owner_id="alice",
                        id=run_id,
                        thread_id="t1",
                        state=state,
                        origin=origin,
                        profile={},
                        profile_name="chat_default",
                        create_time=start,
                        start_time=start,
                        finish_time=start + timedelta(seconds=2) if finished else None,
                        error_code="",
                        error_message="",
                        thread_seq=1,
                        cancel_requested=False,
                        rolled_back=False,
                        input_tokens=tokens[0],
                        output_tokens=tokens[1],
                        usage_estimated=estimated,
                    )
                )
        await db.migrate(engine, MIGRATIONS, schema)
        async with engine.begin() as conn:
            entered = await conn.execute(sa.select(tables.usage_ledger.c.run_id))
            assert sorted(entered.scalars()) == ["r-done", "r-failed"]
            await store.delete_thread_data(conn, "alice", "t1")
            [day] = await store.owner_usage(conn, "alice", start, start + timedelta(days=1))
        assert (day.day, day.runs, day.failed_runs, day.automation_runs) == ("2025-06-10", 2, 1, 1)
        assert (day.input_tokens, day.output_tokens, day.tokens_estimated) == (13, 6, True)
        assert day.duration_ms == 4000
    finally:
        await engine.dispose()
