"""The events log: every change of a box's, a snapshot's or a template build's state, one row
each, team by team, read by cursor (hutch.services.events serves it).

An event is written in the transaction that makes its change (`record`), so there is never a
change without its event nor an event without its change. Its id is the cursor: every insert holds
the table (`hold_all`) until its transaction ends, so ids become visible in the order they were
given, and a reader that has seen an id never later finds a smaller one (on PostgreSQL, several
API servers' transactions would otherwise commit out of id order). Kept for the audit retention.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hutch.store.database import Database, hold_all
from hutch.store.records import EventRecord
from hutch.store.schema import events


@dataclass(frozen=True)
class Event:
    """An event a change comes with (the store's query records it in the change's transaction)."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)


MAX_TEXT = 2000  # characters of a text an event carries (a failure's reason is cut, never the event)


# Told (on the committing thread) once a transaction that wrote an event has committed: how this
# process's webhook deliverer wakes without polling (hutch.services.deliveries)
_committed: list[Callable[[], None]] = []


def on_event(told: Callable[[], None]) -> Callable[[], None]:
    """Have `told()` called after each commit of an event in this process; returns its undoing."""
    _committed.append(told)
    return lambda: _committed.remove(told)


def _tell(_: Connection) -> None:
    for told in list(_committed):
        told()


def record(c: Connection, team_id: str, type_: str, sandbox_id: str | None = None, **data: Any) -> None:
    """Write an event in the caller's transaction, as its last statement: the table's hold is
    taken last, after whatever rows the transaction holds, and held only until it commits (so
    no two transactions can wait on each other through it)."""
    hold_all(c, events)
    text = json.dumps({k: v[:MAX_TEXT] if isinstance(v, str) else v for k, v in data.items()}, separators=(",", ":"))
    c.execute(events.insert().values(at=time.time(), team_id=team_id, type=type_, sandbox_id=sandbox_id, data=text))
    if _committed and not sa.event.contains(c, "commit", _tell):
        sa.event.listen(c, "commit", _tell, once=True)  # this connection object lives for this transaction


def _row(row: Any) -> EventRecord:
    fields = dict(row._mapping)
    return EventRecord(**{**fields, "data": json.loads(fields["data"])})


class EventQueries(Database):
    def add_event(self, team_id: str, type_: str, sandbox_id: str | None = None, **data: Any) -> None:
        with self._tx() as c:
            record(c, team_id, type_, sandbox_id, **data)

    def events(self, team_id: str, *, after: int = 0, types: Sequence[str] = (), sandbox_id: str | None = None,
               limit: int = 100, newest_first: bool = False, offset: int = 0) -> list[EventRecord]:
        """A team's events past the cursor `after`, oldest first (or newest, past `offset` of
        them), at most `limit`."""
        e = events.c
        q = sa.select(events).where(e.team_id == team_id, e.id > after)
        if types:
            q = q.where(e.type.in_(list(types)))
        if sandbox_id is not None:
            q = q.where(e.sandbox_id == sandbox_id)
        q = q.order_by(e.id.desc() if newest_first else e.id).offset(offset).limit(limit)
        with self._tx() as c:
            return [_row(r) for r in c.execute(q)]

    def last_event_id(self) -> int:
        """The newest event's id (0: none yet): where a stream that asks for new events only begins."""
        with self._tx() as c:
            return int(c.execute(sa.select(sa.func.max(events.c.id))).scalar() or 0)
