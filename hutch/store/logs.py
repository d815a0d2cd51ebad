"""The store's append-only logs of a sandbox: its network connections, and its commands and file operations."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from hutch.store.database import Database, fitted
from hutch.store.records import AuditLogRecord, NetworkLogRecord
from hutch.store.schema import audit_log, network_log

NETWORK_LOG_KEEP = 10_000  # newest entries kept per sandbox


class LogQueries(Database):
    def add_network_log(self, **entry: Any) -> None:
        # the secrets swapped into its requests: none (or an empty list) is NULL, and read back as None
        entry["secrets"] = json.dumps(entry["secrets"]) if entry.get("secrets") else None
        with self._tx() as c:
            key = c.execute(network_log.insert().values(**fitted(network_log, entry))).inserted_primary_key
            if key is not None and key[0] % 500 == 0:  # now and then, keep only the newest entries of this sandbox
                q = network_log.c
                cutoff = c.execute(sa.select(q.id).where(q.sandbox_id == entry["sandbox_id"]).order_by(q.id.desc())
                                   .offset(NETWORK_LOG_KEEP).limit(1)).scalar()
                if cutoff is not None:
                    c.execute(network_log.delete().where(q.sandbox_id == entry["sandbox_id"], q.id <= cutoff))

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
            c.execute(audit_log.insert().values(**fitted(audit_log, entry)))

    def audit_log(self, sandbox_id: str, limit: int, before: int | None = None) -> list[AuditLogRecord]:
        """The commands and file operations, newest first; `before` an id from an earlier page."""
        q = sa.select(audit_log).where(audit_log.c.sandbox_id == sandbox_id)
        if before is not None:
            q = q.where(audit_log.c.id < before)
        with self._tx() as c:
            return [AuditLogRecord(**r._mapping) for r in c.execute(q.order_by(audit_log.c.id.desc()).limit(limit))]
