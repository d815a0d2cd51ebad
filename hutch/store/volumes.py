"""The store's volumes: a team's named storage, within its quotas by count and by size, and which
boxes mount each (`sandboxes.volumes`), so one in use is never deleted."""

from __future__ import annotations

from typing import Literal

import sqlalchemy as sa

from hutch.store.database import Database, hold, hold_all
from hutch.store.events import record
from hutch.store.records import LIVE_STATUSES, VOLUME_JSON, VolumeRecord
from hutch.store.sandboxes import disk_held
from hutch.store.schema import sandboxes, teams, volumes

Refusal = Literal["name", "count", "size", "all_bytes"]


def _mounting(volume_id: str) -> sa.ColumnElement[bool]:
    """Live sandboxes whose mounts name the volume by its id (ids are uuids: nothing to escape in a
    LIKE; the key is matched too, so a volume *named* like another's id is not taken for it)."""
    return sa.and_(sandboxes.c.status.in_(LIVE_STATUSES), sandboxes.c.volumes.like(f'%"volume_id": "{volume_id}"%'))


class VolumeQueries(Database):
    def insert_volume(self, rec: VolumeRecord, team_max: int, team_max_mib: int,
                      all_bytes: int | None = None) -> Refusal | None:
        """Record a volume unless its team has one of that name, or would pass its quota by count
        or by size, or the node's disk budget (checkpoints, snapshots and volumes) would pass
        `all_bytes`. None once inserted, else why not (nothing changed)."""
        v = volumes.c
        with self._tx() as c:
            hold_all(c, sandboxes)
            hold(c, teams, teams.c.id == rec.team_id)
            if c.execute(sa.select(v.id).where(v.team_id == rec.team_id, v.name == rec.name)).first():
                return "name"
            count, size = c.execute(sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(v.size_mib), 0))
                                    .where(v.team_id == rec.team_id)).one()
            if count >= team_max:
                return "count"
            if size + rec.size_mib > team_max_mib:
                return "size"
            if all_bytes is not None and disk_held(c) + rec.size_mib * 2**20 > all_bytes:
                return "all_bytes"
            c.execute(volumes.insert().values(**VOLUME_JSON.row(rec)))
            record(c, rec.team_id, "volume.created", None, volume_id=rec.id, name=rec.name, size_mib=rec.size_mib)
        return None

    def volume_usage(self, team_id: str) -> tuple[int, int]:
        """A team's volumes: how many, and their MiB."""
        v = volumes.c
        with self._tx() as c:
            count, size = c.execute(sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(v.size_mib), 0))
                                    .where(v.team_id == team_id)).one()
        return int(count), int(size)

    def get_volume(self, ref: str, team_id: str | None = None) -> VolumeRecord | None:
        """By id or, within a team, by name (an id before a name that looks like one)."""
        v = volumes.c
        q = sa.select(volumes)
        if team_id is None:
            q = q.where(v.id == ref)
        else:
            q = (q.where(v.team_id == team_id, sa.or_(v.id == ref, v.name == ref))
                 .order_by(sa.case((v.id == ref, 0), else_=1)))
        with self._tx() as c:
            row = c.execute(q).first()
        return VOLUME_JSON.record(VolumeRecord, row) if row else None

    def list_volumes(self, team_id: str | None, metadata: dict[str, str] | None = None) -> list[VolumeRecord]:
        """A team's (every team's, with None), oldest first, with all the given metadata."""
        q = sa.select(volumes).order_by(volumes.c.created_at, volumes.c.id)
        if team_id is not None:
            q = q.where(volumes.c.team_id == team_id)
        with self._tx() as c:
            recs = [VOLUME_JSON.record(VolumeRecord, r) for r in c.execute(q)]
        wanted = (metadata or {}).items()
        return [r for r in recs if all(r.metadata.get(k) == v for k, v in wanted)]

    def volume_users(self, volume_id: str) -> list[str]:
        """The live sandboxes that mount the volume."""
        with self._tx() as c:
            return [r[0] for r in c.execute(sa.select(sandboxes.c.id).where(_mounting(volume_id)))]

    def delete_volume(self, volume_id: str) -> list[str] | None:
        """Delete the volume's record unless a live sandbox mounts it: None once deleted, else
        those sandboxes (an empty list: it was not there). Holds what sandbox inserts hold, so a
        box recorded at once either is seen here or finds the volume gone."""
        with self._tx() as c:
            hold_all(c, sandboxes)
            users = [r[0] for r in c.execute(sa.select(sandboxes.c.id).where(_mounting(volume_id)))]
            if users:
                return users
            gone = c.execute(volumes.delete().where(volumes.c.id == volume_id)
                             .returning(volumes.c.team_id, volumes.c.name)).first()
            if gone is None:
                return []
            record(c, gone.team_id, "volume.deleted", None, volume_id=volume_id, name=gone.name)
        return None

    def update_volume_metadata(self, volume_id: str, metadata: dict[str, str]) -> None:
        with self._tx() as c:
            c.execute(volumes.update().where(volumes.c.id == volume_id).values(**VOLUME_JSON.encoded({"metadata": metadata})))
