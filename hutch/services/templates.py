"""Templates: what create, get, list, delete, rebuild, cancel and the build logs do to the store.

A template's spec never changes; each build of it makes a new root. Sandboxes record the root
they booted from, so a rebuild never changes the root under a running or paused box; a root is
removed once nothing may boot from it again.

The builds themselves are others' jobs: build_queue.py runs them (and, in a fleet, claims them from
the store's queue), build_sources.py makes each from its parent, build_logs.py keeps their logs,
build_roots.py collects the roots nothing uses; system_templates.py registers the server's own.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

from hutch.errors import ApiError, Code
from hutch.node.api import NodeRuntime
from hutch.services.build_logs import BuildLogs
from hutch.services.build_queue import BuildQueue
from hutch.services.build_roots import RootCollector
from hutch.services.build_sources import BuildSources
from hutch.services.config import ServerConfig
from hutch.services.models import BuildErrorInfo, BuildInfo, CreateTemplate, TemplateInfo, timestamp
from hutch.services.system_templates import register_system_templates
from hutch.store import BuildRecord, BuildStatus, Store, TemplateRecord
from hutch.templates import oci
from hutch.templates.builds import Builder
from hutch.templates.layers import LayerCache

DEFAULT_DISK_MIB = 4096


class Templates:
    def __init__(self, config: ServerConfig, store: Store, node: NodeRuntime) -> None:
        self.config, self.store = config, store
        layers = LayerCache(config.cache_dir / "layers", config.run_dir.name)  # per host: a cache
        home = config.fleet.shared_dir if config.fleet is not None else config.data_dir  # roots every node boots
        self.builder = Builder(node, layers, home / "templates", config.run_dir / "builds", config.pids)
        self.files_dir = home / "template-files"  # <team id>/<hash>: uploads for copy steps (E2B's COPY)
        self.build_logs = BuildLogs(config, store, home / "build-logs")
        self.sources = BuildSources(config, store, self.builder, self.files_dir)
        self.roots = RootCollector(config, store, self.builder, self.sources)
        self.queue = BuildQueue(config, store, self.builder, layers, self.sources, self.roots, self.build_logs)

    def register_base(self, rootfs: Path) -> None:
        """The system templates (system_templates.py)."""
        register_system_templates(self.config, self.store, rootfs)

    # --- views ----------------------------------------------------------------------------------

    def get(self, team_id: str, ref: str) -> TemplateRecord:
        rec = self.store.get_template(ref, team_id)
        if rec is None:
            raise ApiError(Code.TEMPLATE_NOT_FOUND, f"template {ref!r} does not exist")
        return rec

    def info(self, rec: TemplateRecord, latest: BuildRecord | None) -> TemplateInfo:
        status: Literal["building", "ready", "failed"] = "ready"
        if not rec.rootfs:
            ended = latest is not None and latest.status in (BuildStatus.FAILED, BuildStatus.CANCELLED)
            status = "failed" if ended else "building"
        spec = rec.spec
        return TemplateInfo(
            id=rec.id, name=rec.name, system=rec.team_id is None, status=status, **{"from": spec.get("from")},
            steps=spec.get("steps", []), start_cmd=spec.get("start_cmd"), ready_cmd=spec.get("ready_cmd"),
            ready_timeout_seconds=spec["ready_timeout_seconds"], vcpu=spec["vcpu"], memory_mib=spec["memory_mib"],
            disk_mib=spec.get("disk_mib", DEFAULT_DISK_MIB), env=rec.env, workdir=rec.workdir, user=rec.user,
            created_at=timestamp(rec.created_at), latest_build=self.build_info(latest, rec) if latest else None,
        )

    def build_info(self, b: BuildRecord, rec: TemplateRecord) -> BuildInfo:
        return BuildInfo(
            id=b.id, template_id=b.template_id, template=rec.name, status=b.status,  # type: ignore[arg-type]
            error=BuildErrorInfo.model_validate(b.error) if b.error else None,
            steps_total=b.steps_total, steps_cached=b.steps_cached, created_at=timestamp(b.created_at),
            started_at=timestamp(b.started_at) if b.started_at else None,
            finished_at=timestamp(b.finished_at) if b.finished_at else None,
        )

    def describe(self, rec: TemplateRecord) -> TemplateInfo:
        return self.info(rec, self.store.latest_builds([rec.id]).get(rec.id))

    def all(self, team_id: str) -> list[TemplateInfo]:
        recs = self.store.list_templates(team_id)
        latest = self.store.latest_builds([r.id for r in recs])
        return [self.info(r, latest.get(r.id)) for r in recs]

    def get_build(self, team_id: str, ref: str, build_id: str) -> tuple[TemplateRecord, BuildRecord]:
        rec = self.get(team_id, ref)
        build = self.store.get_build(build_id, rec.id)
        if build is None:
            raise ApiError(Code.BUILD_NOT_FOUND, f"template {rec.name!r} has no build {build_id!r}")
        return rec, build

    def list_builds(self, team_id: str, ref: str) -> list[BuildInfo]:
        rec = self.get(team_id, ref)
        return [self.build_info(b, rec) for b in self.store.list_builds(rec.id)]


    # --- create, rebuild, cancel, delete --------------------------------------------------------

    def _check_quota(self, team_id: str, new_template: bool) -> None:
        templates, builds = self.store.count_templates(team_id)
        if new_template and templates >= self.config.team_max_templates:
            raise ApiError(Code.TOO_MANY_TEMPLATES, f"a team has at most {self.config.team_max_templates} "
                                                      "templates; delete one")
        if builds >= self.config.team_max_builds:
            raise ApiError(Code.TOO_MANY_BUILDS, f"a team has at most {self.config.team_max_builds} builds "
                                                   "queued or running; wait for one or cancel it")

    def create(self, team_id: str, req: CreateTemplate) -> TemplateRecord:
        spec = req.model_dump(by_alias=True)
        self._check_quota(team_id, new_template=True)
        spec.update(_inherited_start(req, self._check_source(team_id, req.from_)))
        rec = TemplateRecord(id=str(uuid.uuid4()), team_id=team_id, name=req.name, spec=spec)
        try:
            self.store.put_template(rec)
        except KeyError:
            raise ApiError(Code.TEMPLATE_EXISTS, f"a template named {req.name!r} exists") from None
        self.queue.add(rec, no_cache=False)
        return rec

    def reserve(self, team_id: str, name: str) -> TemplateRecord:
        """The team's template of that name, made with no build if it has none (E2B's build from
        code names its template, uploads its files, then sends its steps: `build_spec`)."""
        rec = self.store.get_template(name, team_id)
        if rec is not None and rec.team_id == team_id:
            return rec
        self._check_quota(team_id, new_template=True)
        spec = CreateTemplate(name=name).model_dump(by_alias=True)
        rec = TemplateRecord(id=str(uuid.uuid4()), team_id=team_id, name=name, spec=spec)
        try:
            self.store.put_template(rec)
        except KeyError:  # made meanwhile
            found = self.store.get_template(name, team_id)
            if found is None or found.team_id != team_id:
                raise ApiError(Code.TEMPLATE_EXISTS, f"a template named {name!r} exists") from None
            return found
        return rec

    def build_spec(self, team_id: str, ref: str, req: CreateTemplate, no_cache: bool,
                   build_id: str | None = None) -> BuildRecord:
        """A new build of the team's template with a new spec (what E2B's build from code does at
        each build): the template's spec is replaced, its boxes keep the root they booted from,
        and it serves the new root once the build is ready."""
        rec = self.get(team_id, ref)
        if rec.team_id is None:
            raise ApiError(Code.SYSTEM_TEMPLATE, f"{rec.name} is built by the server itself")
        self._check_quota(team_id, new_template=False)
        spec = req.model_dump(by_alias=True)
        spec["name"] = rec.name
        spec.update(_inherited_start(req, self._check_source(team_id, req.from_)))
        self.store.update_template(rec.id, spec=spec)
        rec.spec = spec
        return self.queue.add(rec, no_cache, build_id)

    def _check_source(self, team_id: str, source: str) -> TemplateRecord | None:
        """A `from` that names nothing buildable is refused before anything is stored. The
        template it names (None: an image)."""
        try:
            image = oci.parse_source(source, allowed_dirs=self.config.allowed_image_dirs)
        except ValueError as e:
            raise ApiError(Code.INVALID_SPEC, f"from: {e}") from None
        if image is None:
            parent = self.store.get_template(source, team_id)
            if parent is None:
                raise ApiError(Code.TEMPLATE_NOT_FOUND, f"from: template {source!r} does not exist")
            if parent.rootfs is None:
                raise ApiError(Code.TEMPLATE_NOT_READY, f"from: template {source!r} has no finished build yet")
            return parent
        if image.remote and not self.config.registry_pulls:
            raise ApiError(Code.INVALID_SPEC, "from: this server does not pull from registries "
                                                "(hutch serve --registry-pulls)")
        return None

    def rebuild(self, team_id: str, ref: str, no_cache: bool) -> tuple[TemplateRecord, BuildRecord]:
        rec = self.get(team_id, ref)
        if rec.team_id is None:
            raise ApiError(Code.SYSTEM_TEMPLATE, f"{rec.name} is built by the server itself")
        self._check_quota(team_id, new_template=False)
        return rec, self.queue.add(rec, no_cache)

    async def cancel(self, team_id: str, ref: str, build_id: str) -> BuildRecord:
        _rec, build = self.get_build(team_id, ref, build_id)
        if self.config.fleet is not None:
            if not self.queue.cancel_in_store(build.id, write_log=True):
                raise ApiError(Code.BUILD_FINISHED, f"build {build.id} has already ended ({build.status})")
            return self.get_build(team_id, ref, build_id)[1]
        if build.status not in (BuildStatus.QUEUED, BuildStatus.RUNNING) or not await self.queue.stop(build.id):
            raise ApiError(Code.BUILD_FINISHED, f"build {build.id} has already ended ({build.status})")
        return self.get_build(team_id, ref, build_id)[1]

    def _built_on_elsewhere(self, rec: TemplateRecord) -> bool:
        """A fleet's: whether a running build of the team's (on any node) builds on `rec`."""
        team = {t.id for t in self.store.list_templates(rec.team_id or "")}
        return any(b.template_id in team and b.template_id != rec.id and b.spec.get("from") in (rec.name, rec.id)
                   for b in self.store.list_builds(statuses=(BuildStatus.RUNNING,), limit=10_000))

    async def delete(self, team_id: str, ref: str) -> None:
        rec = self.get(team_id, ref)
        if rec.team_id is None:
            raise ApiError(Code.SYSTEM_TEMPLATE, f"{rec.name} belongs to the server")
        if rec.id in self.sources.building_from.values() or (self.config.fleet is not None and self._built_on_elsewhere(rec)):
            raise ApiError(Code.TEMPLATE_IN_USE, f"a build of another template builds on {rec.name!r}")
        if rec.id in self.store.templates_in_use():
            raise ApiError(Code.TEMPLATE_IN_USE, f"sandboxes boot from {rec.name!r}: kill them first")
        for build in self.store.list_builds(rec.id, statuses=(BuildStatus.QUEUED, BuildStatus.RUNNING)):
            if self.config.fleet is not None:  # its node stops it, and leaves its root to the collector
                self.queue.cancel_in_store(build.id, write_log=False)
                continue
            await self.queue.stop(build.id)
        builds = self.store.list_builds(rec.id, limit=1_000_000)
        if not self.store.delete_template(rec.id):  # a sandbox was created meanwhile
            raise ApiError(Code.TEMPLATE_IN_USE, f"sandboxes boot from {rec.name!r}: kill them first")
        for build in builds:
            self.build_logs.path(build.id).unlink(missing_ok=True)
        await self.roots.collect(self.queue.owner)


    async def logs(self, team_id: str, ref: str, build_id: str, after: int, wait: bool) -> AsyncIterator[bytes]:
        self.get_build(team_id, ref, build_id)  # 404 before the stream starts
        return self.build_logs.follow(build_id, after, wait)


def _inherited_start(req: CreateTemplate, parent: TemplateRecord | None) -> dict[str, Any]:
    """As E2B's builds: a template built from another that sets neither a start nor a ready command
    runs its parent's, with the parent's ready timeout unless it gives its own (so one made from the
    code interpreter still serves it). Written into its spec, which then shows what its boxes run."""
    if parent is None or req.start_cmd is not None or req.ready_cmd is not None:
        return {}
    inherited: dict[str, Any] = {key: parent.spec.get(key) for key in ("start_cmd", "ready_cmd")}
    if not any(inherited.values()):
        return {}
    if "ready_timeout_seconds" not in req.model_fields_set:
        inherited["ready_timeout_seconds"] = parent.spec["ready_timeout_seconds"]
    return inherited
