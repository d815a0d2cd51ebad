"""The store's database: the engine, SQLite's settings, and one transaction per call."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hutch.store import schema

POOL_SIZE = 5  # database connections kept open (route dependencies run on worker threads)


class Database:
    """The engine every query class of the store shares; opening it brings the schema up to date."""

    def __init__(self, url: str) -> None:
        self.engine = sa.create_engine(url, pool_size=POOL_SIZE, max_overflow=10)
        if self.engine.dialect.name == "sqlite":
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        schema.upgrade(self.engine)

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
    cur.execute("PRAGMA synchronous=NORMAL")  # durable across a crash of hutch; fsync at checkpoints
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()
