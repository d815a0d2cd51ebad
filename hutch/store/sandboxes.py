"""The store's sandboxes: their records, their statuses, and the deadlines of their lifetimes."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from hutch.store.database import Database, hold, hold_all
from hutch.store.events import Event, record
from hutch.store.records import HOLDS_CHECKPOINT, LIVE_STATUSES, SANDBOX_JSON, BindingRecord, SandboxRecord, SandboxStatus
from hutch.store.schema import sandboxes, secret_bindings, snapshots, teams, volumes

COUNTED = (SandboxStatus.ACTIVE, SandboxStatus.RESUMING)  # what a team's limit counts (as the server's check does)


def disk_held(c: sa.Connection) -> int:
    """The bytes every team's checkpoints, snapshots and volumes (by their size) hold on the node's
    disk (one budget: they are on the same disk), in one query."""
    paused = (sa.select(sa.func.coalesce(sa.func.sum(sandboxes.c.checkpoint_bytes), 0))
              .where(sandboxes.c.status.in_(HOLDS_CHECKPOINT)).scalar_subquery())
    kept = sa.select(sa.func.coalesce(sa.func.sum(snapshots.c.size_bytes), 0)).scalar_subquery()
    stored = sa.select(sa.func.coalesce(sa.func.sum(volumes.c.size_mib), 0) * 2**20).scalar_subquery()
    return int(c.execute(sa.select(paused + kept + stored)).scalar_one())


@dataclass(frozen=True)
class CheckpointBudgets:
    """What checkpoints may hold (None: no limit): a team's paused sandboxes, their bytes, and the
    bytes of every sandbox's checkpoint in the store (the node's, or a fleet's shared directory)."""

    team_paused: int | None = None
    team_bytes: int | None = None
    all_bytes: int | None = None


@dataclass(frozen=True)
class PauseRefused:
    """Why `begin_pause` did not mark a sandbox pausing: `budget` is "state" (it was not active:
    another server took it first) or the CheckpointBudgets field it would have passed, which held
    `held` (sandboxes, or bytes) of its `limit`."""

    budget: str
    held: int = 0
    limit: int = 0


def _get_sandbox_query(include_deleted: bool, by_team: bool) -> sa.Select[Any]:
    q = sa.select(sandboxes).where(sandboxes.c.id == sa.bindparam("id"))
    if not include_deleted:
        q = q.where(sandboxes.c.status != SandboxStatus.DELETED)
    if by_team:
        q = q.where(sandboxes.c.team_id == sa.bindparam("team_id"))
    return q


# Every call finds its box: its statements are built once (building one took longer than running
# it on SQLite), keyed by (include_deleted, by team).
_GET_SANDBOX = {(d, t): _get_sandbox_query(d, t) for d in (False, True) for t in (False, True)}


class SandboxQueries(Database):
    def insert_sandbox(self, rec: SandboxRecord, bindings: Sequence[BindingRecord] = (), *,
                       team_max: int | None = None, event: Event | None = None) -> bool:
        """The sandbox and its secret bindings, in one transaction. With `team_max`, only while its
        team runs fewer boxes than that (active or resuming): the count and the insert hold the
        team's row, so two servers cannot both take a team's last place. Returns whether it was
        inserted. Raises LookupError, with nothing inserted, if a volume it mounts is gone (its
        delete holds the same as this)."""
        with self._tx() as c:
            if rec.volumes:
                hold_all(c, sandboxes)
                wanted = {m["volume_id"] for m in rec.volumes}
                found = {r[0] for r in c.execute(sa.select(volumes.c.id).where(volumes.c.id.in_(wanted)))}
                if wanted - found:
                    raise LookupError(f"volume {sorted(wanted - found)[0]} was deleted")
            if team_max is not None:
                hold(c, teams, teams.c.id == rec.team_id)
                running = c.execute(sa.select(sa.func.count()).select_from(sandboxes).where(
                    sandboxes.c.team_id == rec.team_id, sandboxes.c.status.in_(COUNTED))).scalar_one()
                if running >= team_max:
                    return False
            c.execute(sandboxes.insert().values(**SANDBOX_JSON.row(rec)))
            for b in bindings:
                c.execute(secret_bindings.insert().values(**b.to_row()))
            if event is not None:
                record(c, rec.team_id, event.type, rec.id, **event.data)
        return True

    def get_sandbox(self, sandbox_id: str, team_id: str | None = None,
                    include_deleted: bool = False) -> SandboxRecord | None:
        """A sandbox by id (within a team if given); a deleted one only when asked for."""
        with self._tx() as c:
            row = c.execute(_GET_SANDBOX[include_deleted, team_id is not None],
                            {"id": sandbox_id, "team_id": team_id}).first()
        return SANDBOX_JSON.record(SandboxRecord, row) if row else None

    def list_sandboxes(self, team_id: str | None, status: str | None = None,
                       metadata: dict[str, str] | None = None) -> list[SandboxRecord]:
        q = sa.select(sandboxes).where(sandboxes.c.status != SandboxStatus.DELETED).order_by(sandboxes.c.created_at)
        if team_id is not None:
            q = q.where(sandboxes.c.team_id == team_id)
        if status is not None:
            q = q.where(sandboxes.c.status == status)
        with self._tx() as c:
            recs = [SANDBOX_JSON.record(SandboxRecord, r) for r in c.execute(q)]
        wanted = (metadata or {}).items()
        return [r for r in recs if all(r.metadata.get(k) == v for k, v in wanted)]

    def update_sandbox(self, sandbox_id: str, *, only_if_status: tuple[str, ...] | None = None,
                       node: str | None = None, event: Event | None = None, **values: Any) -> bool:
        """Change a sandbox; with `only_if_status`, only while it is in one of those states (one
        conditional UPDATE: of two processes asking the same change, one sees it made). `node`: the
        fleet node whose box it now is, given with the box's runtime id; without it the node stays
        (a stopped box keeps the node it last ran on). `event`: recorded with the change, in its
        transaction, if it was made. Returns whether it changed."""
        if node is not None:
            values["node"] = node
        values = SANDBOX_JSON.encoded(values)
        values["updated_at"] = time.time()
        q = sandboxes.update().where(sandboxes.c.id == sandbox_id)
        if only_if_status is not None:
            q = q.where(sandboxes.c.status.in_(only_if_status))
        with self._tx() as c:
            if event is None:
                return bool(c.execute(q.values(**values)).rowcount)
            # the row's team with the change itself (no second read), for its event
            team_id = c.execute(q.values(**values).returning(sandboxes.c.team_id)).scalar()
            if team_id is None:
                return False
            record(c, team_id, event.type, sandbox_id, **event.data)
            return True

    def begin_pause(self, sandbox_id: str, reserve: int, budgets: CheckpointBudgets) -> PauseRefused | None:
        """Mark an active sandbox pausing, with `reserve` bytes (the most its checkpoint may take)
        recorded as its checkpoint's size, unless that takes its team or the store past a budget.
        None once it is pausing. The sums and the change are one transaction that holds every
        other's (hold_all): pauses at once, on any API server, cannot pass a budget between them."""
        s = sandboxes.c
        size = sa.func.coalesce(sa.func.sum(s.checkpoint_bytes), 0)
        with self._tx() as c:
            hold_all(c, sandboxes)
            row = c.execute(sa.select(s.team_id, s.status).where(s.id == sandbox_id)).first()
            if row is None or row.status != SandboxStatus.ACTIVE:
                return PauseRefused("state")
            if budgets.team_paused is not None or budgets.team_bytes is not None:
                count, held = c.execute(sa.select(sa.func.count(), size).where(
                    s.team_id == row.team_id, s.status.in_(HOLDS_CHECKPOINT))).one()
                if budgets.team_paused is not None and count >= budgets.team_paused:
                    return PauseRefused("team_paused", int(count), budgets.team_paused)
                if budgets.team_bytes is not None and held + reserve > budgets.team_bytes:
                    return PauseRefused("team_bytes", int(held), budgets.team_bytes)
            if budgets.all_bytes is not None:
                held = disk_held(c)
                if held + reserve > budgets.all_bytes:
                    return PauseRefused("all_bytes", int(held), budgets.all_bytes)
            c.execute(sandboxes.update().where(s.id == sandbox_id, s.status == SandboxStatus.ACTIVE)
                      .values(status=SandboxStatus.PAUSING, checkpoint_bytes=reserve, updated_at=time.time()))
        return None

    def count_by_status(self, team_id: str | None = None) -> dict[str, int]:
        q = sa.select(sandboxes.c.status, sa.func.count()).group_by(sandboxes.c.status)
        if team_id is not None:
            q = q.where(sandboxes.c.team_id == team_id)
        with self._tx() as c:
            return {str(status): int(n) for status, n in c.execute(q)}

    def sandbox_by_runtime(self, runtime_id: str) -> SandboxRecord | None:
        with self._tx() as c:
            row = c.execute(sa.select(sandboxes).where(sandboxes.c.runtime_id == runtime_id)).first()
        return SANDBOX_JSON.record(SandboxRecord, row) if row else None

    def token_generations(self) -> list[tuple[str, int]]:
        """Every sandbox that may run again, as (id, token generation): what its access token is
        derived from. E2B's signed file links name no box, only a signature made with its token."""
        q = sa.select(sandboxes.c.id, sandboxes.c.token_generation).where(sandboxes.c.status.in_(LIVE_STATUSES))
        with self._tx() as c:
            return [(str(i), int(g)) for i, g in c.execute(q)]

    def sandbox_by_box_key(self, box_key: str) -> SandboxRecord | None:
        """The live sandbox whose box has this host directory."""
        q = sa.select(sandboxes).where(sandboxes.c.box_key == box_key, sandboxes.c.status.in_(
            (SandboxStatus.ACTIVE, SandboxStatus.PAUSING, SandboxStatus.RESUMING)))
        with self._tx() as c:
            row = c.execute(q).first()
        return SANDBOX_JSON.record(SandboxRecord, row) if row else None

    def due(self, now: float) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(id, team id) of active sandboxes past their pause deadline, and of paused ones past
        deletion, the longest due first."""
        c_ = sandboxes.c
        with self._tx() as c:
            to_pause = c.execute(sa.select(c_.id, c_.team_id).where(c_.status == SandboxStatus.ACTIVE, c_.pause_at <= now)
                                 .order_by(c_.pause_at)).all()
            to_delete = c.execute(sa.select(c_.id, c_.team_id).where(c_.status == SandboxStatus.PAUSED,
                                                                      c_.delete_at <= now).order_by(c_.delete_at)).all()
        return [(r[0], r[1]) for r in to_pause], [(r[0], r[1]) for r in to_delete]
