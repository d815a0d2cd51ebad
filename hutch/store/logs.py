"""The store's append-only logs of a sandbox: its network connections, and its commands and file
operations; and their retention (the secrets' use log, in secrets.py, is pruned here too).

Retention deletes in batches, each its own short transaction (SQLite has one writer, and the egress
and the API write these logs all the time), oldest first. Ids grow with time, so the oldest rows
are found by id: no index on `at` to keep up at every insert.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from hutch.store.database import Database, fitted
from hutch.store.records import AuditLogRecord, NetworkLogRecord
from hutch.store.schema import audit_log, events, network_log, secret_audit

PRUNE_BATCH = 1000  # rows one transaction deletes
PRUNE_BATCHES = 100  # batches of a table one call deletes at most (the next call goes on)


_AUDIT_INSERT = audit_log.insert()  # two rows a command: built once, its values bound per call


class LogQueries(Database):
    def add_network_log(self, **entry: Any) -> None:
        # the secrets swapped into its requests: none (or an empty list) is NULL, and read back as None
        entry["secrets"] = json.dumps(entry["secrets"]) if entry.get("secrets") else None
        with self._tx() as c:
            c.execute(network_log.insert().values(**fitted(network_log, entry)))

    def prune_logs_before(self, cutoff: float, batch: int = PRUNE_BATCH) -> int:
        """Delete the rows of the network log, the audit log, the secrets' use log and the events
        written before `cutoff` (epoch seconds); returns how many went. A row is looked at in id order,
        so one written late with an early time (a long connection's) goes once the rows before
        it have."""
        removed = 0
        for table in (network_log, audit_log, secret_audit, events):
            for _ in range(PRUNE_BATCHES):
                with self._tx() as c:
                    head = c.execute(sa.select(table.c.id, table.c.at).order_by(table.c.id).limit(batch)).all()
                    old = [row.id for row in head if row.at < cutoff]
                    if old:
                        c.execute(table.delete().where(table.c.id.in_(old)))
                removed += len(old)
                if not old:
                    break
        return removed

    def cap_network_logs(self, keep: int, after: int = 0, batch: int = PRUNE_BATCH) -> tuple[int, int]:
        """Keep the newest `keep` entries of each sandbox that logged a connection with an id above
        `after` (0: every sandbox); returns the newest id there was (the next call's `after`), and
        how many entries went."""
        q = network_log.c
        with self._tx() as c:
            newest = c.execute(sa.select(sa.func.max(q.id))).scalar() or 0
            busy = c.execute(sa.select(q.sandbox_id).where(q.id > after).distinct()).scalars().all()
        removed = 0
        for sandbox_id in busy:
            with self._tx() as c:
                cutoff = c.execute(sa.select(q.id).where(q.sandbox_id == sandbox_id).order_by(q.id.desc())
                                   .offset(keep).limit(1)).scalar()
            while cutoff is not None:
                with self._tx() as c:
                    ids = c.execute(sa.select(q.id).where(q.sandbox_id == sandbox_id, q.id <= cutoff)
                                    .order_by(q.id).limit(batch)).scalars().all()
                    if ids:
                        c.execute(network_log.delete().where(q.id.in_(ids)))
                removed += len(ids)
                if len(ids) < batch:
                    break
        return int(newest), removed

    def network_log(self, sandbox_id: str, limit: int, before: int | None = None) -> list[NetworkLogRecord]:
        """Newest first; `before` an id from an earlier page."""
        q = sa.select(network_log).where(network_log.c.sandbox_id == sandbox_id)
        if before is not None:
            q = q.where(network_log.c.id < before)
        with self._tx() as c:
            rows = c.execute(q.order_by(network_log.c.id.desc()).limit(limit))
            return [NetworkLogRecord(**{**r._mapping, "secrets": json.loads(r.secrets) if r.secrets else None})
                    for r in rows]

    def delete_network_log(self, sandbox_id: str) -> None:
        with self._tx() as c:
            c.execute(network_log.delete().where(network_log.c.sandbox_id == sandbox_id))

    def add_audit(self, **entry: Any) -> None:
        with self._tx() as c:
            c.execute(_AUDIT_INSERT, fitted(audit_log, entry))

    def audit_log(self, sandbox_id: str, limit: int, before: int | None = None) -> list[AuditLogRecord]:
        """The commands and file operations, newest first; `before` an id from an earlier page."""
        q = sa.select(audit_log).where(audit_log.c.sandbox_id == sandbox_id)
        if before is not None:
            q = q.where(audit_log.c.id < before)
        with self._tx() as c:
            return [AuditLogRecord(**r._mapping) for r in c.execute(q.order_by(audit_log.c.id.desc()).limit(limit))]
