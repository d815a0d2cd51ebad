"""The store's database: the engine (SQLite or PostgreSQL), one transaction per call, and what differs between the two.

What the dialects do differently is settled here and nowhere else: the driver a `postgresql://`
URL gets, SQLite's settings, the INSERT that says what a conflict does, holding a row for a
read-then-write, and the values PostgreSQL would refuse in a log row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from hutch.store import migrations

POOL_SIZE = 5  # database connections kept open (route dependencies run on worker threads)


class Database:
    """The engine every query class of the store shares; opening it brings the schema up to date."""

    def __init__(self, url: str) -> None:
        self.engine = engine_for(url)
        try:
            migrations.upgrade(self.engine)
        except BaseException:
            self.engine.dispose()  # no connection left open behind a store that never was
            raise

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn


def engine_for(url: str) -> sa.Engine:
    """An engine for a database URL; `postgresql://` (and `postgres://`) go through psycopg 3."""
    parsed = sa.make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite":
        engine = sa.create_engine(parsed, pool_size=POOL_SIZE, max_overflow=10)
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # pre_ping: a connection the server dropped (a restart, a failover) is replaced, not handed out
    return sa.create_engine(parsed, pool_size=POOL_SIZE, max_overflow=10, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
    cur.execute("PRAGMA synchronous=NORMAL")  # durable across a crash of hutch; fsync at checkpoints
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()


def conflict_insert(c: Connection, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
    """An INSERT into `table` in the connection's own dialect, which can say what a conflict on a
    key does: `.on_conflict_do_nothing(index_elements=...)` or `.on_conflict_do_update(...)`
    (PostgreSQL's and SQLite's take the same arguments). The one place that picks between them."""
    if c.dialect.name == "postgresql":
        return postgresql.insert(table)
    if c.dialect.name == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"the store runs on SQLite or PostgreSQL, not {c.dialect.name}")


def hold(c: Connection, table: sa.Table, *where: Any) -> None:
    """Hold the rows of `table` that `where` picks until the transaction ends, so that what the
    transaction reads next (of them, or of what they stand for) is still true when it writes.
    PostgreSQL: SELECT ... FOR NO KEY UPDATE (another transaction holding them waits, and its reads
    after the wait see this one's writes; rows that merely refer to them, by foreign key, may still
    be written). SQLite has no row locks and one writer: a write of nothing takes that write lock
    now, before the reads."""
    if c.dialect.name == "sqlite":
        key = next(iter(table.primary_key))
        c.execute(table.update().where(*where).values({key.name: key}))
    else:
        c.execute(sa.select(*table.primary_key).where(*where).with_for_update(key_share=True))


def hold_all(c: Connection, table: sa.Table) -> None:
    """Hold all of `table` against every other `hold_all` of it until the transaction ends: for a
    read-then-write over many rows that no one row stands for (a sum across teams, say).
    PostgreSQL: an advisory lock keyed by the table's name (plain reads and writes of the table go
    on). SQLite: its one write lock, taken now by a write of nothing."""
    if c.dialect.name == "sqlite":
        key = next(iter(table.primary_key))
        c.execute(table.update().where(sa.false()).values({key.name: key}))
    else:
        c.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _lock_key(table.name)})


def _lock_key(name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"hutch.hold_all.{name}".encode()).digest()[:8], "big", signed=True)


def fitted(table: sa.Table, values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` for a row of an append-only log, with each string cut to its column's length and
    NULs replaced: PostgreSQL refuses both where SQLite kept them, and a log row that is refused
    is a lost row (the values come from the box, or from a client, through the egress and the API)."""
    out = dict(values)
    for name, value in values.items():
        if isinstance(value, str):
            value = value.replace("\x00", "\ufffd")
            length = getattr(table.c[name].type, "length", None)
            out[name] = value[:length] if length else value
    return out
