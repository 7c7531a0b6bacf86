"""The scheduler's migrations: the data migration gives older jobs the default profile."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection

from services.scheduler import tables
from services.scheduler.rows import job_from_row
from services.scheduler.service import MIGRATIONS
from shared import db
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, parse_profile
from shared.settings import Settings


def _upgrade_to(conn: Connection, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, revision)


async def test_existing_jobs_get_the_automation_memory_default_profile(settings: Settings) -> None:
    engine = db.create_engine(settings, "scheduler")
    schema = settings.schema_for("scheduler")
    try:
        async with engine.begin() as conn:
            if db.is_postgres(engine):
                await conn.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
            await conn.run_sync(_upgrade_to, "0001")
        now = datetime.now(UTC)
        old_jobs = sa.table(
            "automation_jobs",
            *(
                sa.column(c.name, c.type)
                for c in tables.jobs.columns
                if c.name != "execution_profile"
            ),
        )
        async with engine.begin() as conn:  # jobs in the shape before execution profiles
            await conn.execute(
                old_jobs.insert(),
                [
                    {
                        "id": f"job{i}",
                        "owner_id": "alice",
                        "title": "old",
                        "schedule_type": "daily",
                        "local_time": "10:00",
                        "timezone": "Asia/Shanghai",
                        "status": "active",
                        "config": {"prompt": "p", "tools": ["memory_write"]},
                        "catch_up_policy": "latest",
                        "jitter_seconds": 0,
                        "version": 1,
                        "create_time": now,
                        "update_time": now,
                    }
                    for i in range(3)
                ],
            )
        await db.migrate(engine, MIGRATIONS, schema)
        async with engine.connect() as conn:
            jobs = [job_from_row(r) for r in await conn.execute(sa.select(tables.jobs))]
            profiles = [
                r[0] for r in await conn.execute(sa.select(tables.jobs.c.execution_profile))
            ]
        assert len(jobs) == 3
        assert all(j.spec.profile == AUTOMATION_MEMORY_DEFAULT for j in jobs)
        assert all(parse_profile(p) == AUTOMATION_MEMORY_DEFAULT for p in profiles)
    finally:
        await engine.dispose()


async def test_migrating_twice_is_a_no_op(settings: Settings) -> None:
    engine = db.create_engine(settings, "scheduler")
    try:
        await db.migrate(engine, MIGRATIONS, settings.schema_for("scheduler"))
        await db.migrate(engine, MIGRATIONS, settings.schema_for("scheduler"))
        async with engine.connect() as conn:
            version = (
                await conn.execute(sa.text("SELECT version_num FROM alembic_version"))
            ).scalar_one()
        assert version == "0004_webhook_outbox"
    finally:
        await engine.dispose()
