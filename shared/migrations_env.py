"""The body of every service's Alembic env.py: migrate on the connection shared.db passes in."""

from __future__ import annotations

from alembic import context


def run() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError(
            "run migrations with `python -m services.<name> migrate`, which supplies the connection"
        )
    context.configure(connection=connection, target_metadata=None, transaction_per_migration=False)
    with context.begin_transaction():
        context.run_migrations()
