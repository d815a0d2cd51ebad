"""The store's snapshots: a team's saved box states, within its quotas by count and by bytes."""

from __future__ import annotations

from typing import Literal

import sqlalchemy as sa

from hutch.store.database import Database, hold, hold_all
from hutch.store.events import record
from hutch.store.records import SNAPSHOT_JSON, SnapshotRecord
from hutch.store.sandboxes import disk_held
from hutch.store.schema import sandboxes, snapshots, teams

Refusal = Literal["name", "count", "bytes", "all_bytes"]


class SnapshotQueries(Database):
    def insert_snapshot(self, rec: SnapshotRecord, team_max: int, team_max_bytes: int,
                        all_bytes: int | None = None) -> Refusal | None:
        """Record a snapshot unless its team has one of that name, or would pass its quota by count
        or by bytes, or every checkpoint and snapshot would pass `all_bytes` (the node's budget,
        which pauses are held to as well). The sums and the insert hold what pauses hold
        (hold_all) and the team's row, so two servers cannot both take the last room. None once
        inserted, else why not (nothing changed)."""
        s = snapshots.c
        with self._tx() as c:
            hold_all(c, sandboxes)
            hold(c, teams, teams.c.id == rec.team_id)
            if rec.name is not None and c.execute(sa.select(s.id).where(s.team_id == rec.team_id,
                                                                         s.name == rec.name)).first():
                return "name"
            count, size = c.execute(sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(s.size_bytes), 0))
                                    .where(s.team_id == rec.team_id)).one()
            if count >= team_max:
                return "count"
            if size + rec.size_bytes > team_max_bytes:
                return "bytes"
            if all_bytes is not None and disk_held(c) + rec.size_bytes > all_bytes:
                return "all_bytes"
            c.execute(snapshots.insert().values(**SNAPSHOT_JSON.row(rec)))
            record(c, rec.team_id, "snapshot.created", rec.source_sandbox_id, snapshot_id=rec.id, name=rec.name,
                   memory=rec.memory, size_bytes=rec.size_bytes)
        return None

    def snapshot_usage(self, team_id: str) -> tuple[int, int]:
        """A team's snapshots: how many, and their bytes."""
        s = snapshots.c
        with self._tx() as c:
            count, size = c.execute(sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(s.size_bytes), 0))
                                    .where(s.team_id == team_id)).one()
        return int(count), int(size)

    def get_snapshot(self, ref: str, team_id: str | None = None) -> SnapshotRecord | None:
        """By id or, within a team, by name (an id before a name that looks like one)."""
        s = snapshots.c
        q = sa.select(snapshots)
        if team_id is None:
            q = q.where(s.id == ref)
        else:
            q = (q.where(s.team_id == team_id, sa.or_(s.id == ref, s.name == ref))
                 .order_by(sa.case((s.id == ref, 0), else_=1)))
        with self._tx() as c:
            row = c.execute(q).first()
        return SNAPSHOT_JSON.record(SnapshotRecord, row) if row else None

    def list_snapshots(self, team_id: str | None, metadata: dict[str, str] | None = None,
                       source_sandbox_id: str | None = None) -> list[SnapshotRecord]:
        """A team's (every team's, with None) newest first, with all the given metadata."""
        q = sa.select(snapshots).order_by(snapshots.c.created_at.desc())
        if team_id is not None:
            q = q.where(snapshots.c.team_id == team_id)
        if source_sandbox_id is not None:
            q = q.where(snapshots.c.source_sandbox_id == source_sandbox_id)
        with self._tx() as c:
            recs = [SNAPSHOT_JSON.record(SnapshotRecord, r) for r in c.execute(q)]
        wanted = (metadata or {}).items()
        return [r for r in recs if all(r.metadata.get(k) == v for k, v in wanted)]

    def delete_snapshot(self, snapshot_id: str) -> bool:
        with self._tx() as c:
            row = c.execute(sa.select(snapshots.c.team_id, snapshots.c.name, snapshots.c.source_sandbox_id)
                            .where(snapshots.c.id == snapshot_id)).first()
            if row is None or not c.execute(snapshots.delete().where(snapshots.c.id == snapshot_id)).rowcount:
                return False
            record(c, row.team_id, "snapshot.deleted", row.source_sandbox_id, snapshot_id=snapshot_id, name=row.name)
            return True
