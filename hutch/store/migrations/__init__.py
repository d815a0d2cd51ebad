"""The store's schema migrations (Alembic): `upgrade(engine)` brings a database, new or old, to the newest revision.

`versions/` holds one file per revision. The first (`v0001_first.py`) makes the schema of the first
hutch with migrations, from nothing or from what a hutch before them left: those kept no version,
so that revision alone looks at the database's shape (`legacy.py`) and keeps every row. Every
revision after it changes a known schema as revisions do.

Processes that start at once against one database take turns: the upgrade runs in one transaction
that first takes PostgreSQL's advisory lock (or SQLite's write lock), and a process that waited
finds the work done. No alembic.ini: `config()` points Alembic at this directory, so a new
revision is made with `command.revision(config(), "what it does")` (then edit `schema.py` to match;
the store's tests compare the two).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

SCRIPTS = Path(__file__).parent
LOCK_KEY = int.from_bytes(b"hutch.db", "big")  # pg_advisory_xact_lock's key: one upgrade at a time per database


def config(connection: Connection | None = None) -> Config:
    """Alembic's configuration for the store; `connection` is the one env.py migrates on."""
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPTS))
    cfg.set_main_option("file_template", "v%%(rev)s_%%(slug)s")  # a module name (mypy reads them), not a leading digit
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(config())


def head() -> str:
    """The newest revision."""
    found = _scripts().get_current_head()
    assert found is not None, f"no revision in {SCRIPTS / 'versions'}"
    return found


def current(conn: Connection) -> str | None:
    """The revision the database is at; None before the first (empty, or made by a hutch before migrations)."""
    return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: sa.Engine) -> None:
    """Bring the database to the newest revision, unless it is there already (one read)."""
    with engine.connect() as conn:
        at = current(conn)
    if at == head():
        return
    if at is not None and at not in {script.revision for script in _scripts().walk_revisions()}:
        raise RuntimeError(f"the database is at revision {at}, which this hutch does not have: "
                           "a newer hutch migrated it (run that one, or a newer one)")
    with engine.begin() as conn:
        _lock(conn)
        command.upgrade(config(conn), "head")  # what another process did while this one waited is not done again


def _lock(conn: Connection) -> None:
    """Hold the database for the upgrade until its transaction ends."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
    elif conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # its one write lock, taken now (busy_timeout waits for it)
