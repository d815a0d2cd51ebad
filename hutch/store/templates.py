"""The store's templates and their builds, and which template roots something may still boot from.

In a fleet the builds are a queue every node takes from: `claim_build` moves one queued build to
running on one node (a conditional UPDATE, so of nodes that claim at once one gets it), and what
a node writes back is conditional on the build being still its own and running.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hutch.errors import BuildFailure, build_error
from hutch.store.database import Database, conflict_insert
from hutch.store.events import record
from hutch.store.records import BUILD_JSON, LIVE_STATUSES, TEMPLATE_JSON, BuildRecord, BuildStatus, TemplateRecord
from hutch.store.schema import sandboxes, snapshots, template_builds, templates

_REF: sa.BindParameter[str] = sa.bindparam("ref")
# Every command reads its box's template (its env, workdir, user): built once, not per call.
_BY_ID = sa.select(templates).where(templates.c.id == _REF)
_BY_REF = (sa.select(templates)  # the team's own or a system one; an id before a name that looks like one
           .where(sa.or_(templates.c.id == _REF, templates.c.name == _REF),
                  sa.or_(templates.c.team_id == sa.bindparam("team_id"), templates.c.team_id.is_(None)))
           .order_by(sa.case((templates.c.id == _REF, 0), else_=1)))


class TemplateQueries(Database):
    def put_template(self, rec: TemplateRecord) -> None:
        """Insert a template; a name its team (or the system) already uses raises KeyError, also
        when another process inserted it meanwhile (the unique key on team and name refuses it)."""
        taken = sa.select(templates.c.id).where(templates.c.name == rec.name, _team_is(rec.team_id))
        try:
            with self._tx() as c:
                if c.execute(taken).first():
                    raise KeyError(rec.name)
                c.execute(templates.insert().values(**TEMPLATE_JSON.row(rec)))
        except sa.exc.IntegrityError:
            with self._tx() as c:
                if c.execute(taken).first():
                    raise KeyError(rec.name) from None
            raise

    def put_system_template(self, rec: TemplateRecord) -> None:
        """Insert or replace a system template (the base, at each start: its root may have moved).
        One INSERT ... ON CONFLICT: servers that start at once each leave theirs, none fails."""
        row = TEMPLATE_JSON.row(rec)
        with self._tx() as c:
            q = conflict_insert(c, templates).values(**row)
            c.execute(q.on_conflict_do_update(index_elements=[templates.c.id],
                                              set_={k: v for k, v in row.items() if k != "id"}))

    def get_template(self, ref: str, team_id: str | None = None) -> TemplateRecord | None:
        """By id or name: the team's own, or a system template. With no team, by id only."""
        with self._tx() as c:
            row = c.execute(_BY_ID if team_id is None else _BY_REF, {"ref": ref, "team_id": team_id}).first()
        return TEMPLATE_JSON.record(TemplateRecord, row) if row else None

    def list_templates(self, team_id: str) -> list[TemplateRecord]:
        q = (sa.select(templates).where(sa.or_(templates.c.team_id == team_id, templates.c.team_id.is_(None)))
             .order_by(templates.c.created_at))
        with self._tx() as c:
            return [TEMPLATE_JSON.record(TemplateRecord, r) for r in c.execute(q)]

    def count_templates(self, team_id: str) -> tuple[int, int]:
        """A team's templates, and its builds queued or running."""
        with self._tx() as c:
            n = c.execute(sa.select(sa.func.count()).where(templates.c.team_id == team_id)).scalar() or 0
            b = c.execute(sa.select(sa.func.count()).select_from(template_builds.join(
                templates, templates.c.id == template_builds.c.template_id)).where(
                templates.c.team_id == team_id,
                template_builds.c.status.in_((BuildStatus.QUEUED, BuildStatus.RUNNING)))).scalar() or 0
        return int(n), int(b)

    def update_template(self, template_id: str, **values: Any) -> None:
        values = TEMPLATE_JSON.encoded(values)
        with self._tx() as c:
            c.execute(templates.update().where(templates.c.id == template_id).values(**values))

    def delete_template(self, template_id: str) -> bool:
        """Remove a template and its builds, unless a sandbox that may run again or a snapshot
        boots from it (then False, nothing changed)."""
        with self._tx() as c:
            if c.execute(sa.select(sandboxes.c.id).where(sandboxes.c.template_id == template_id,
                                                         sandboxes.c.status.in_(LIVE_STATUSES))).first():
                return False
            if c.execute(sa.select(snapshots.c.id).where(snapshots.c.template_id == template_id)).first():
                return False
            c.execute(template_builds.delete().where(template_builds.c.template_id == template_id))
            c.execute(templates.delete().where(templates.c.id == template_id))
        return True

    def templates_in_use(self) -> set[str]:
        """Ids of the templates some sandbox that may run again, or some snapshot, boots from."""
        q = sa.select(sandboxes.c.template_id).where(sandboxes.c.status.in_(LIVE_STATUSES)).distinct()
        with self._tx() as c:
            return {str(t) for t in (*c.execute(q).scalars(),
                                     *c.execute(sa.select(snapshots.c.template_id).distinct()).scalars()) if t}

    def roots_in_use(self) -> set[str]:
        """Every template root something may still boot from: templates' current roots, the roots
        of sandboxes that may run again, and snapshots' roots."""
        with self._tx() as c:
            a = c.execute(sa.select(templates.c.rootfs).where(templates.c.rootfs.is_not(None))).scalars().all()
            b = c.execute(sa.select(sandboxes.c.rootfs).where(sandboxes.c.rootfs.is_not(None),
                                                              sandboxes.c.status.in_(LIVE_STATUSES))).scalars().all()
            d = c.execute(sa.select(snapshots.c.rootfs).where(snapshots.c.rootfs.is_not(None))).scalars().all()
        return {str(r) for r in (*a, *b, *d)}

    # --- builds ---------------------------------------------------------------------------------

    def insert_build(self, rec: BuildRecord) -> None:
        with self._tx() as c:
            c.execute(template_builds.insert().values(**BUILD_JSON.row(rec)))
            _build_event(c, rec.id, rec.status)

    def get_build(self, build_id: str, template_id: str | None = None) -> BuildRecord | None:
        q = sa.select(template_builds).where(template_builds.c.id == build_id)
        if template_id is not None:
            q = q.where(template_builds.c.template_id == template_id)
        with self._tx() as c:
            row = c.execute(q).first()
        return BUILD_JSON.record(BuildRecord, row) if row else None

    def list_builds(self, template_id: str | None = None, statuses: Sequence[str] | None = None,
                    limit: int = 100, node: str | None = None) -> list[BuildRecord]:
        """Newest first; only `node`'s if given."""
        q = sa.select(template_builds).order_by(template_builds.c.created_at.desc()).limit(limit)
        if template_id is not None:
            q = q.where(template_builds.c.template_id == template_id)
        if statuses is not None:
            q = q.where(template_builds.c.status.in_(statuses))
        if node is not None:
            q = q.where(template_builds.c.node == node)
        with self._tx() as c:
            return [BUILD_JSON.record(BuildRecord, r) for r in c.execute(q)]

    def latest_builds(self, template_ids: Sequence[str]) -> dict[str, BuildRecord]:
        """Each template's newest build, in one query."""
        newest = (sa.select(template_builds.c.template_id, sa.func.max(template_builds.c.created_at).label("at"))
                  .where(template_builds.c.template_id.in_(template_ids)).group_by(template_builds.c.template_id)
                  .subquery())
        q = sa.select(template_builds).join(newest, sa.and_(template_builds.c.template_id == newest.c.template_id,
                                                            template_builds.c.created_at == newest.c.at))
        with self._tx() as c:
            builds = [BUILD_JSON.record(BuildRecord, r) for r in c.execute(q)]
        return {b.template_id: b for b in builds}

    def update_build(self, build_id: str, *, only_if_status: tuple[str, ...] | None = None,
                     only_if_node: str | None = None, **values: Any) -> bool:
        """Change a build; with `only_if_status`, only while it is in one of those states; with
        `only_if_node`, only while that node holds it. True if it changed."""
        error = values.get("error")
        values = BUILD_JSON.encoded(values)
        q = template_builds.update().where(template_builds.c.id == build_id)
        if only_if_status is not None:
            q = q.where(template_builds.c.status.in_(only_if_status))
        if only_if_node is not None:
            q = q.where(template_builds.c.node == only_if_node)
        with self._tx() as c:
            changed = bool(c.execute(q.values(**values)).rowcount)
            if changed and "status" in values:
                _build_event(c, build_id, str(values["status"]), error)
            return changed

    # --- a fleet's queue ------------------------------------------------------------------------

    def claim_build(self, node: str, now: float | None = None, look_at: int = 16) -> BuildRecord | None:
        """The oldest queued build, now running on `node`; None if none is queued. Each try is one
        conditional UPDATE (queued to running): of nodes that claim the same build at once, one
        gets it, and the others try the next."""
        b = template_builds.c
        with self._tx() as c:
            ids = c.execute(sa.select(b.id).where(b.status == BuildStatus.QUEUED)
                            .order_by(b.created_at, b.id).limit(look_at)).scalars().all()
        for build_id in ids:
            q = (template_builds.update().where(b.id == build_id, b.status == BuildStatus.QUEUED)
                 .values(status=BuildStatus.RUNNING, node=node, started_at=time.time() if now is None else now)
                 .returning(*template_builds.c))
            with self._tx() as c:
                row = c.execute(q).first()
            if row is not None:
                return BUILD_JSON.record(BuildRecord, row)
        return None

    def fail_builds_of(self, node: str, reason: str) -> list[str]:
        """Every build running on `node` becomes failed (`build_failed`, with `reason` as its
        message), in one UPDATE; returns their ids. For a node that was lost, or that starts again
        (what it was building is gone with its process)."""
        b = template_builds.c
        error = build_error(BuildFailure.BUILD_FAILED, reason)
        q = (template_builds.update().where(b.node == node, b.status == BuildStatus.RUNNING)
             .values(**BUILD_JSON.encoded({"status": BuildStatus.FAILED, "error": error, "finished_at": time.time()}))
             .returning(b.id))
        with self._tx() as c:
            return sorted(str(i) for i in c.execute(q).scalars())

    def builds_in_flight(self) -> tuple[set[str], set[str]]:
        """The builds queued or running, and the roots they make or build on (a fleet's collector
        of shared roots keeps those)."""
        b = template_builds.c
        q = sa.select(b.id, b.rootfs, b.parent_rootfs).where(b.status.in_((BuildStatus.QUEUED, BuildStatus.RUNNING)))
        with self._tx() as c:
            rows = c.execute(q).all()
        return {str(r.id) for r in rows}, {str(p) for r in rows for p in (r.rootfs, r.parent_rootfs) if p}


def _team_is(team_id: str | None) -> Any:
    return templates.c.team_id.is_(None) if team_id is None else templates.c.team_id == team_id


def _build_event(c: Connection, build_id: str, status: str, error: Any = None) -> None:
    """A build's change of state as an event of its template's team (none for the system's)."""
    b, t = template_builds.c, templates.c
    row = c.execute(sa.select(b.template_id, t.team_id, t.name).select_from(template_builds.join(
        templates, t.id == b.template_id)).where(b.id == build_id)).first()
    if row is None or row.team_id is None:
        return
    extra = {"error": error} if status == BuildStatus.FAILED and error else {}
    record(c, row.team_id, f"template.build.{status}", None, template_id=row.template_id, template=row.name,
           build_id=build_id, **extra)
