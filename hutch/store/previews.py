"""The store's preview ports: which ports of a sandbox are published, to whom, and their credentials' generation."""

from __future__ import annotations

import sqlalchemy as sa

from hutch.store.database import Database, conflict_insert
from hutch.store.records import PreviewPortRecord, SandboxStatus
from hutch.store.schema import preview_ports, sandboxes


class PreviewQueries(Database):
    def publish_port(self, rec: PreviewPortRecord) -> PreviewPortRecord:
        """Publish, or change the access of a published port (its credentials stay valid). Two
        publishes at once both succeed: the insert gives way to a row already there."""
        p = preview_ports.c
        with self._tx() as c:
            q = (conflict_insert(c, preview_ports).values(**vars(rec))
                 .on_conflict_do_nothing(index_elements=[p.sandbox_id, p.port])
                 .execution_options(preserve_rowcount=True))  # an INSERT's count is kept only when asked
            if c.execute(q).rowcount:
                return rec
            c.execute(preview_ports.update().where(p.sandbox_id == rec.sandbox_id, p.port == rec.port)
                      .values(access=rec.access))
            found = c.execute(sa.select(preview_ports).where(p.sandbox_id == rec.sandbox_id, p.port == rec.port)).one()
            return PreviewPortRecord(**found._mapping)

    def published_port(self, sandbox_id: str, port: int) -> tuple[PreviewPortRecord, str] | None:
        """A published port of a sandbox that still exists, and the sandbox's team, in one query
        (every preview request)."""
        p, sb = preview_ports.c, sandboxes.c
        with self._tx() as c:
            row = c.execute(sa.select(preview_ports, sb.team_id)
                            .select_from(preview_ports.join(sandboxes, sb.id == p.sandbox_id))
                            .where(p.sandbox_id == sandbox_id, p.port == port, sb.status != SandboxStatus.DELETED)).first()
        if row is None:
            return None
        fields = dict(row._mapping)
        team_id = fields.pop("team_id")
        return PreviewPortRecord(**fields), team_id

    def preview_port(self, sandbox_id: str, port: int) -> PreviewPortRecord | None:
        with self._tx() as c:
            row = c.execute(sa.select(preview_ports).where(preview_ports.c.sandbox_id == sandbox_id,
                                                           preview_ports.c.port == port)).first()
        return PreviewPortRecord(**row._mapping) if row else None

    def preview_ports(self, sandbox_id: str) -> list[PreviewPortRecord]:
        with self._tx() as c:
            rows = c.execute(sa.select(preview_ports).where(preview_ports.c.sandbox_id == sandbox_id)
                             .order_by(preview_ports.c.port))
            return [PreviewPortRecord(**r._mapping) for r in rows]

    def rotate_preview_port(self, sandbox_id: str, port: int) -> bool:
        with self._tx() as c:
            return bool(c.execute(preview_ports.update().where(
                preview_ports.c.sandbox_id == sandbox_id, preview_ports.c.port == port).values(
                generation=preview_ports.c.generation + 1)).rowcount)

    def unpublish_port(self, sandbox_id: str, port: int | None = None) -> bool:
        """One port, or (None) every port of the sandbox."""
        q = preview_ports.delete().where(preview_ports.c.sandbox_id == sandbox_id)
        if port is not None:
            q = q.where(preview_ports.c.port == port)
        with self._tx() as c:
            return bool(c.execute(q).rowcount)
