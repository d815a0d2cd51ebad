"""Alembic's environment for the store: it migrates on the connection `hutch.store.migrations.upgrade` hands it."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from hutch.store.schema import meta

if context.is_offline_mode():
    raise SystemExit("the store's migrations run on a connection (hutch.store.migrations.upgrade), not as SQL text")
connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise SystemExit("the store's migrations run through hutch.store.migrations, which hands them a connection")
context.configure(connection=connection, target_metadata=meta,
                  render_as_batch=connection.dialect.name == "sqlite")  # SQLite alters a table by copying it
with context.begin_transaction():
    context.run_migrations()
