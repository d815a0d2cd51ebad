"""Templates: what create, get, list, delete, rebuild, cancel and the build logs do to the store,
and the queue that runs builds (a few at a time, in the server's process).

A template's spec never changes; each build of it makes a new root. Sandboxes record the root
they booted from, so a rebuild never changes the root under a running or paused box; a root is
removed once nothing may boot from it again. Builds that were queued when the server stopped are
queued again at start; one that was running is marked failed.

    queued ──▶ running ──▶ ready
       │          ├──────▶ failed (error.code: step_failed, image_not_found, ready_timeout, ...)
       └──────────┴──────▶ cancelled

In a fleet the queue is the store's. An API server (`config.fleet` set, no `owner`) stores the build, queued,
and starts nothing; each node runtime (`serve_queue`) claims queued builds, up to `max_builds` at
once, and runs them as a single host does, with roots and logs in the shared directory. Anyone
may end a build in the store (a cancel, a delete, a lost node): the node that runs it sees its
record so within CLAIM_EVERY and stops it. What the node writes back is conditional on the build
being still its own and running.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Literal

from hutch.egress.policy import Policy
from hutch.egress.rules import NetworkRules
from hutch.errors import ApiError, BuildFailure, Code, build_error
from hutch.node import base_image, box, mounts
from hutch.node.api import NodeRuntime
from hutch.services.config import ServerConfig
from hutch.services.models import BuildErrorInfo, BuildInfo, CreateTemplate, TemplateInfo, timestamp
from hutch.store import BuildRecord, BuildStatus, Store, TemplateRecord
from hutch.templates import oci
from hutch.templates.buildlog import BuildLog, Ended, follow, follow_file
from hutch.templates.builds import Builder, BuildFailed, Built, Parent
from hutch.templates.layers import LayerCache

log = logging.getLogger("hutch.server")

BASE_TEMPLATE = "hutch/base"
BASE_TEMPLATE_ID = str(uuid.uuid5(uuid.NAMESPACE_URL, "hutch/base"))
# The code interpreter (base_image.CODE_INTERPRETER), under E2B's name and hutch's: its start command
# is hutch/guest/interpreter.py (mounted with the agent), ready once its /health answers. One killed
# by a signal (by hand, or the box's memory limit) is started again a second later, as E2B's systemd
# does; one that exits ends the start command, so a box that cannot run it fails its create at once.
CODE_INTERPRETER_TEMPLATES = ("code-interpreter-v1", "hutch/code-interpreter")
CODE_INTERPRETER_START = (f"while :; do /usr/bin/python3 {box.AGENT_DIR}/interpreter.py; s=$?; "
                          "[ $s -gt 128 ] || exit $s; sleep 1; done")
CODE_INTERPRETER_READY = "curl -sf --max-time 5 -o /dev/null http://127.0.0.1:49999/health"
BUILD_BOX_PREFIX = "build-"  # the host directory names of build boxes (their egress policy)
DEFAULT_DISK_MIB = 4096
BUILD_TIMEOUT = 4 * 3600.0  # a whole build
# a fleet's
CLAIM_EVERY = 1.0  # a node looks for queued builds, and at the records of those it runs, this often
COLLECT_EVERY = 300.0  # a node collects the shared roots nothing uses this often (and after each build)
# A shared root nothing refers to is removed only once it has been so this long: longer than a
# create on any API server takes from reading a template's root to storing its sandbox (room,
# boot, up to an hour of readiness probe), which no other process can see meanwhile.
UNUSED_GRACE = 2 * 3600.0
UNUSED_MARK = ".unused"  # <root dir>.unused beside a shared root: since when nothing refers to it
TRASH = ".trash-"  # <root dir>.trash-<time>-<n>: a root being removed (moved first, looked at again)
TRASH_AGE = 600.0  # a collector's trash left this long is its own no more (it died midway)


class Templates:
    def __init__(self, config: ServerConfig, store: Store, node: NodeRuntime) -> None:
        self.config, self.store = config, store
        self.layers = LayerCache(config.cache_dir / "layers", config.run_dir.name)  # per host: a cache
        self.images_dir = config.cache_dir / "images"
        home = config.fleet.shared_dir if config.fleet is not None else config.data_dir  # roots every node boots
        self.logs_dir = home / "build-logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.files_dir = home / "template-files"  # <team id>/<hash>: uploads for copy steps (E2B's COPY)
        self.builder = Builder(node, self.layers, home / "templates", config.run_dir / "builds", config.pids)
        self._slots = asyncio.Semaphore(config.max_builds)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._live: dict[str, BuildLog] = {}
        self._building_from: dict[str, str] = {}  # build id -> the template id it builds on
        self._image_locks: dict[str, asyncio.Lock] = {}
        self._closing = False  # builds cut short by a server stop are queued again at the next start
        self._parent_roots: dict[str, str] = {}  # build id -> the root it builds on
        self.booting_roots: Callable[[], set[str]] = set  # roots of sandboxes being created (Sandboxes)
        self.owner: str | None = None  # a fleet node's name, once it serves the store's queue
        self._queue_task: asyncio.Task[None] | None = None
        self._ended_elsewhere: set[str] = set()  # builds this node runs whose record another process ended
        if config.fleet is not None:
            self.builder.on_root = self._root_chosen

    # --- the base -------------------------------------------------------------------------------

    def register_base(self, rootfs: Path) -> None:
        """The system templates: the base, and the code interpreter once `hutch build-base` has
        built its root on this host (in a fleet, every node's cache has the same paths)."""
        self._register_system(BASE_TEMPLATE, rootfs, {})
        if base_image.is_built(self.config.cache_dir, base_image.CODE_INTERPRETER):
            interpreter = base_image.base_root_path(self.config.cache_dir, base_image.CODE_INTERPRETER)
            for name in CODE_INTERPRETER_TEMPLATES:
                self._register_system(name, interpreter, {"start_cmd": CODE_INTERPRETER_START,
                                                          "ready_cmd": CODE_INTERPRETER_READY,
                                                          "ready_timeout_seconds": 120})

    def _register_system(self, name: str, rootfs: Path, extra: dict[str, Any]) -> None:
        spec = CreateTemplate.model_validate({"name": "base", "vcpu": self.config.vcpu, "memory_mib": self.config.memory_mib,
                                              **extra}).model_dump(by_alias=True)
        spec.update(name=name, **{"from": None})
        self.store.put_system_template(TemplateRecord(id=str(uuid.uuid5(uuid.NAMESPACE_URL, name)), team_id=None,
                                                      name=name, spec=spec, rootfs=str(rootfs), build_id=None))

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
        self._queue(rec, no_cache=False)
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
        return self._queue(rec, no_cache, build_id)

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
        return rec, self._queue(rec, no_cache)

    def _queue(self, rec: TemplateRecord, no_cache: bool, build_id: str | None = None) -> BuildRecord:
        build = BuildRecord(id=build_id or str(uuid.uuid4()), template_id=rec.id, status=BuildStatus.QUEUED, spec=rec.spec,
                            no_cache=no_cache, steps_total=len(rec.spec.get("steps", [])))
        self.store.insert_build(build)
        if self.config.fleet is None:
            self._start(build)  # a fleet's nodes claim it from the store
        return build

    def _start(self, build: BuildRecord) -> None:
        task = asyncio.get_running_loop().create_task(self._run(build))
        self._tasks[build.id] = task

    async def cancel(self, team_id: str, ref: str, build_id: str) -> BuildRecord:
        _rec, build = self.get_build(team_id, ref, build_id)
        if self.config.fleet is not None:
            if not self._cancel_in_store(build.id, write_log=True):
                raise ApiError(Code.BUILD_FINISHED, f"build {build.id} has already ended ({build.status})")
            return self.get_build(team_id, ref, build_id)[1]
        task = self._tasks.get(build.id)
        if build.status not in (BuildStatus.QUEUED, BuildStatus.RUNNING) or task is None:
            raise ApiError(Code.BUILD_FINISHED, f"build {build.id} has already ended ({build.status})")
        task.cancel()
        await asyncio.wait({task})
        return self.get_build(team_id, ref, build_id)[1]

    def _cancel_in_store(self, build_id: str, write_log: bool) -> bool:
        """A fleet's cancel: a queued build ends here (its log says so); a running one is marked
        cancelled, and the node running it stops it when it sees that. False if it had ended."""
        error = build_error(BuildFailure.CANCELLED, "the build was cancelled")
        values: dict[str, Any] = {"status": BuildStatus.CANCELLED, "error": error, "finished_at": time.time()}
        if self.store.update_build(build_id, only_if_status=(BuildStatus.QUEUED,), **values):
            if write_log:  # no node claims it now: nobody else writes its log
                try:
                    blog = BuildLog(self._log_path(build_id), sync=True)
                    blog.system("cancelled")
                    blog.finish(BuildStatus.CANCELLED, error)
                except OSError as e:
                    log.warning("build %s: its log cannot be ended: %s", build_id, e)
            return True
        return self.store.update_build(build_id, only_if_status=(BuildStatus.RUNNING,), **values)

    def _built_on_elsewhere(self, rec: TemplateRecord) -> bool:
        """A fleet's: whether a running build of the team's (on any node) builds on `rec`."""
        team = {t.id for t in self.store.list_templates(rec.team_id or "")}
        return any(b.template_id in team and b.template_id != rec.id and b.spec.get("from") in (rec.name, rec.id)
                   for b in self.store.list_builds(statuses=(BuildStatus.RUNNING,), limit=10_000))

    async def delete(self, team_id: str, ref: str) -> None:
        rec = self.get(team_id, ref)
        if rec.team_id is None:
            raise ApiError(Code.SYSTEM_TEMPLATE, f"{rec.name} belongs to the server")
        if rec.id in self._building_from.values() or (self.config.fleet is not None and self._built_on_elsewhere(rec)):
            raise ApiError(Code.TEMPLATE_IN_USE, f"a build of another template builds on {rec.name!r}")
        if rec.id in self.store.templates_in_use():
            raise ApiError(Code.TEMPLATE_IN_USE, f"sandboxes boot from {rec.name!r}: kill them first")
        for build in self.store.list_builds(rec.id, statuses=(BuildStatus.QUEUED, BuildStatus.RUNNING)):
            if self.config.fleet is not None:  # its node stops it, and leaves its root to the collector
                self._cancel_in_store(build.id, write_log=False)
                continue
            task = self._tasks.get(build.id)
            if task is not None:
                task.cancel()
                await asyncio.wait({task})
        builds = self.store.list_builds(rec.id, limit=1_000_000)
        if not self.store.delete_template(rec.id):  # a sandbox was created meanwhile
            raise ApiError(Code.TEMPLATE_IN_USE, f"sandboxes boot from {rec.name!r}: kill them first")
        for build in builds:
            self._log_path(build.id).unlink(missing_ok=True)
        await self.collect_roots()

    # --- logs -----------------------------------------------------------------------------------

    async def logs(self, team_id: str, ref: str, build_id: str, after: int, wait: bool) -> AsyncIterator[bytes]:
        self.get_build(team_id, ref, build_id)  # 404 before the stream starts
        if self.config.fleet is None or build_id in self._live:
            return follow(self._live.get(build_id), self._log_path(build_id), after, wait)
        return follow_file(self._log_path(build_id), after, wait, lambda: self._ended(build_id))  # a node writes it

    def _ended(self, build_id: str) -> Ended | None:
        """How a build ended, by its record; None while it is queued or running."""
        build = self.store.get_build(build_id)
        if build is None:
            return BuildStatus.CANCELLED, build_error(BuildFailure.CANCELLED, "the template was deleted")
        if build.status in (BuildStatus.QUEUED, BuildStatus.RUNNING):
            return None
        return build.status, build.error

    def log_path(self, build_id: str) -> Path:
        return self._log_path(build_id)

    def _log_path(self, build_id: str) -> Path:
        return self.logs_dir / f"{build_id}.ndjson"

    # --- running a build ------------------------------------------------------------------------

    async def _run(self, build: BuildRecord) -> None:
        """One build, from the queue to its end. A fleet node's was claimed (it is running, on this
        node); what it writes back then holds only while the build is still its own and running:
        one another process ended meanwhile ends as its record says."""
        claimed = self.owner is not None
        try:
            blog = BuildLog(self._log_path(build.id), sync=self.config.fleet is not None)
        except OSError as e:
            log.error("build %s: its log cannot be written: %s", build.id, e)
            self._settle(build.id, status=BuildStatus.FAILED, finished_at=time.time(),
                         error=build_error(BuildFailure.BUILD_FAILED, "the build's log cannot be written"))
            self._tasks.pop(build.id, None)
            return
        self._live[build.id] = blog
        status: str = BuildStatus.FAILED
        error: dict[str, Any] | None = None
        mine = True  # False once another process ended the build's record
        slot: contextlib.AbstractAsyncContextManager[Any] = contextlib.nullcontext() if claimed else self._slots
        try:
            blog.system(f"running on node {self.owner}" if claimed else "queued")
            async with slot:
                if not claimed:
                    self.store.update_build(build.id, status=BuildStatus.RUNNING, started_at=time.time())
                blog.system(f"building from {build.spec.get('from')}")
                built = await asyncio.wait_for(self._build(build, blog), BUILD_TIMEOUT)
                mine = self._settle(build.id, status=BuildStatus.READY, finished_at=time.time(), rootfs=str(built.rootfs),
                                    env=built.env, workdir=built.workdir, user=built.user,
                                    steps_cached=built.steps_cached)
                if mine:
                    current = self.store.get_template(build.template_id)
                    newest = current and current.build_id and self.store.get_build(current.build_id)
                    if not newest or newest.created_at <= build.created_at:  # an older build never wins
                        self.store.update_template(build.template_id, rootfs=str(built.rootfs), build_id=build.id,
                                                   env=built.env, workdir=built.workdir, user=built.user)
                    status = BuildStatus.READY
                    blog.system(f"ready: {built.steps_cached} of {build.steps_total} step(s) from the cache")
        except BuildFailed as e:
            error = e.info()
            blog.system(f"failed: {e.code}: {e.message}", e.step)
        except TimeoutError:
            error = build_error(BuildFailure.BUILD_FAILED, f"the build took longer than {BUILD_TIMEOUT:.0f} s")
            blog.system(f"failed: {error['message']}")
        except asyncio.CancelledError:
            if build.id in self._ended_elsewhere:
                mine = False
            elif self._closing:
                status = BuildStatus.QUEUED
                blog.system("the server is stopping: the build starts again when it is back" if not claimed else
                            f"node {self.owner} is stopping: the build starts again on a node")
            else:
                status, error = BuildStatus.CANCELLED, build_error(BuildFailure.CANCELLED, "the build was cancelled")
                blog.system("cancelled")
        except Exception as e:  # a bug or the host (disk full, a mount refused): the build fails, not the server
            log.exception("build %s failed", build.id)
            error = build_error(BuildFailure.BUILD_FAILED, f"the build failed on the server: {e}"[:2000])
            blog.system(f"failed: {error['message']}")
        finally:
            self._building_from.pop(build.id, None)
            self._parent_roots.pop(build.id, None)
            self._ended_elsewhere.discard(build.id)
            gone = False
            if mine and status == BuildStatus.QUEUED:
                blog.flush()  # all written before another may take the build (and its log)
                mine = self._settle(build.id, status=BuildStatus.QUEUED, started_at=None,
                                    **({"node": None} if claimed else {}))
                if mine:
                    blog.close()
            elif mine and status != BuildStatus.READY:
                mine = self._settle(build.id, status=status, error=error, finished_at=time.time())
            if not mine:  # its record says how it ended (a cancel, a lost node, a delete)
                record = self.store.get_build(build.id)
                gone = record is None
                status, error = ((BuildStatus.CANCELLED, build_error(BuildFailure.CANCELLED, "the template was deleted"))
                                 if record is None else (record.status, record.error))
                blog.system("cancelled" if status == BuildStatus.CANCELLED else
                            f"ended elsewhere: {status}" + (f": {error.get('message')}" if error else ""))
            if status != BuildStatus.QUEUED:
                blog.finish(status, error)
            if gone:
                self._log_path(build.id).unlink(missing_ok=True)  # its template was deleted meanwhile
            self._live.pop(build.id, None)
            self._tasks.pop(build.id, None)
            self.builder.claimed.pop(build.id, None)
            await asyncio.shield(self.collect_roots())

    def _settle(self, build_id: str, **values: Any) -> bool:
        """Write a build's outcome. A fleet node's holds only while the build is still its own and
        running: False if another process ended it meanwhile. A single host's always holds."""
        if self.owner is None:
            self.store.update_build(build_id, **values)
            return True
        return self.store.update_build(build_id, only_if_status=(BuildStatus.RUNNING,), only_if_node=self.owner,
                                       **values)

    async def _build(self, build: BuildRecord, blog: BuildLog) -> Built:
        parent = await self._parent(build, blog)
        self._parent_roots[build.id] = str(parent.root)  # kept while this build reads it
        if self.config.fleet is not None:  # and by every other host's collector
            self.store.update_build(build.id, parent_rootfs=str(parent.root))
        template = self.store.get_template(build.template_id)
        files = self.files_dir / template.team_id if template is not None and template.team_id else None
        return await self.builder.build(build.id, build.spec, parent, blog, no_cache=build.no_cache, files=files)

    async def _parent(self, build: BuildRecord, blog: BuildLog) -> Parent:
        """What the build starts from. Its cache key starts with the team: a layer of another
        team's is never reused (a cache hit would tell one team what another built, env values
        included)."""
        source = build.spec.get("from") or BASE_TEMPLATE
        rec = self.store.get_template(build.template_id)
        if rec is None or rec.team_id is None:
            raise BuildFailed(BuildFailure.BUILD_FAILED, "the template was deleted")
        try:
            image = oci.parse_source(source, allowed_dirs=self.config.allowed_image_dirs)
        except ValueError as e:
            raise BuildFailed(BuildFailure.INVALID_SPEC, f"from: {e}") from None
        if image is not None:
            parent = await self._image(image, blog, rec.team_id)
        else:
            found = self.store.get_template(source, rec.team_id)
            if found is None or found.rootfs is None:
                raise BuildFailed(BuildFailure.IMAGE_NOT_FOUND, f"template {source!r} does not exist or has no finished build")
            self._building_from[build.id] = found.id
            # a system template's layers are keyed by its recipe (its root's directory names it)
            system_key = base_image.BASE.key() if found.id == BASE_TEMPLATE_ID else Path(found.rootfs).parent.name
            key = f"template:{found.build_id or system_key}"
            parent = Parent(Path(found.rootfs), key, dict(found.env), found.workdir, found.user)
        parent.key = f"team:{rec.team_id}:{parent.key}"
        return parent

    async def _image(self, image: oci.ImageSource, blog: BuildLog, team_id: str) -> Parent:
        """An OCI image, unpacked once per team and digest into the host's cache (per team: one
        team's import can neither stand in for another's nor tell it was made)."""
        loop = asyncio.get_running_loop()
        cancel = threading.Event()

        def say(line: str) -> None:
            loop.call_soon_threadsafe(blog.system, line)

        images = self.images_dir / team_id
        images.mkdir(parents=True, exist_ok=True, mode=0o700)
        scratch = images / "tmp"
        try:
            digest = await asyncio.to_thread(oci.image_digest, image, scratch, cancel=cancel)
            lock = self._image_locks.setdefault(f"{team_id}:{digest}", asyncio.Lock())
            async with lock:
                dest = images / oci.cache_key(digest)
                config_file = dest / "config.json"
                if config_file.exists():
                    blog.system(f"image {digest[:19]} (unpacked before)")
                    config = oci.ImageConfig(**json.loads(config_file.read_text()))
                else:
                    blog.system(f"unpacking image {digest[:19]}")
                    await asyncio.to_thread(shutil.rmtree, dest, True)
                    config = await asyncio.to_thread(oci.import_image, image, dest / "rootfs", scratch, say, cancel)
                    if config.digest != digest:  # it changed between the two reads: never cache it as the first
                        await asyncio.to_thread(shutil.rmtree, dest, True)
                        raise BuildFailed(BuildFailure.IMAGE_PULL_FAILED, f"{image} changed while it was read; try again")
                    config_file.write_text(json.dumps(dataclasses.asdict(config)))  # written last: the mark
        except asyncio.CancelledError:
            cancel.set()  # the import's tools are killed
            raise
        except oci.ImageError as e:
            raise BuildFailed(e.code, e.message) from None
        user = "root" if config.user in ("root", "0", "0:0") else None
        return Parent(dest / "rootfs", f"image:{digest}", dict(config.env), config.workdir, user)

    # --- start, housekeeping --------------------------------------------------------------------

    async def reconcile(self) -> None:
        """At start: builds a stopped server was running failed (their logs say so); queued ones
        are queued again; what running builds left on the host is removed. A fleet node fails only
        the builds it was running itself (a lost node's are failed by the API servers' watch);
        the queued ones are the whole fleet's, claimed by `serve_queue`."""
        await asyncio.to_thread(self._clear_work)
        if self.owner is not None:
            reason = f"node {self.owner} stopped during the build"
            for build_id in self.store.fail_builds_of(self.owner, reason):
                self._end_log(build_id, BuildStatus.FAILED, build_error(BuildFailure.BUILD_FAILED, reason))
            await self.collect_roots()
            return
        for build in self.store.list_builds(statuses=(BuildStatus.RUNNING,), limit=10_000):
            error = build_error(BuildFailure.BUILD_FAILED, "the server stopped during the build")
            self.store.update_build(build.id, status=BuildStatus.FAILED, error=error, finished_at=time.time())
            self._end_log(build.id, BuildStatus.FAILED, error)
        for build in reversed(self.store.list_builds(statuses=(BuildStatus.QUEUED,), limit=10_000)):
            self._start(build)
        await self.collect_roots()

    def _end_log(self, build_id: str, status: str, error: dict[str, Any]) -> None:
        try:
            BuildLog(self._log_path(build_id), sync=self.config.fleet is not None).finish(status, error)
        except OSError as e:
            log.warning("build %s: its log cannot be ended: %s", build_id, e)

    def _clear_work(self) -> None:
        work = self.builder.work_dir
        mounts.unmount_under(work)  # a build's overlay mounts, if the server died in one
        shutil.rmtree(work, ignore_errors=True)
        self.layers.clear_partials()

    async def collect_roots(self) -> None:
        """Remove the roots nothing may boot from again: not a template's current root, not the
        root of a sandbox that may run again or is booting, not one a build makes or reads. A
        fleet's roots are collected by its nodes (`_collect_shared`), not its API servers."""
        if self.config.fleet is not None:
            if self.owner is not None:
                keep = set(self._parent_roots.values()) | self.booting_roots()
                await asyncio.to_thread(self._collect_shared, keep, set(self.builder.claimed.values()))
            return
        keep = self.store.roots_in_use() | set(self._parent_roots.values()) | self.booting_roots()
        claimed = set(self.builder.claimed.values())
        roots = self.builder.roots_dir
        for d in roots.iterdir() if roots.exists() else ():
            name = d.name.split(".partial-")[0]
            if name not in claimed and str(d / "rootfs") not in keep:
                await asyncio.to_thread(shutil.rmtree, d, True)

    def _shared_in_use(self) -> tuple[set[str], set[str]]:
        """The builds queued or running in the fleet, and the names of the root directories
        something in the store refers to (by name: a host may reach the shared directory by
        another path; a name of another directory's only keeps more)."""
        builds, build_roots = self.store.builds_in_flight()
        return builds, _root_names(self.store.roots_in_use() | build_roots)

    def _collect_shared(self, keep: set[str], claimed: set[str]) -> None:
        """A fleet's shared roots, collected from any node, while other hosts build and boot from
        them. The store says which roots are referred to (templates, sandboxes that may run again,
        builds queued or running: what they make and what they build on); a create on an API
        server refers to a root the store does not show until its sandbox is stored, so a root is
        removed only once it has been seen unreferred to for UNUSED_GRACE (a mark beside it says
        since when; a build that takes the root again removes the mark). The removal moves the
        root aside and reads the store again: a build that took it meanwhile gets it back, or
        (it found it gone) makes it anew. A partial root goes once its build is not queued or running."""
        roots = self.builder.roots_dir
        if not roots.is_dir():
            return
        builds, in_use = self._shared_in_use()
        in_use |= _root_names(keep)
        now = time.time()
        for d in list(roots.iterdir()):
            name = d.name
            if TRASH in name:
                _, _, stamp = name.partition(TRASH)
                at = stamp.split("-", 1)[0]
                if not at.isdigit() or now - int(at) >= TRASH_AGE:
                    shutil.rmtree(d, ignore_errors=True)
            elif name.endswith(UNUSED_MARK):
                if not (roots / name.removesuffix(UNUSED_MARK)).exists():
                    d.unlink(missing_ok=True)
            elif ".partial-" in name:
                key, _, build_id = name.partition(".partial-")
                if build_id not in builds and key not in claimed:
                    shutil.rmtree(d, ignore_errors=True)
            elif name in claimed or name in in_use:
                _mark(d).unlink(missing_ok=True)
            else:
                since = _unused_since(d)
                if since is None:
                    _mark(d).write_text(f"{now}\n")
                elif now - since >= UNUSED_GRACE:
                    self._remove_shared(d)

    def _remove_shared(self, d: Path) -> None:
        trash = d.with_name(f"{d.name}{TRASH}{int(time.time())}-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(d, trash)
        except FileNotFoundError:
            return  # another node's collector was first
        if d.name in self._shared_in_use()[1]:  # a build took it again meanwhile
            try:
                os.rename(trash, d)
            except OSError:  # it found it gone and made it anew
                shutil.rmtree(trash, ignore_errors=True)
            return
        log.info("removing the shared template root %s: nothing has referred to it for %.0f s", d.name, UNUSED_GRACE)
        shutil.rmtree(trash, ignore_errors=True)
        _mark(d).unlink(missing_ok=True)

    def _root_chosen(self, build_id: str, rootfs: Path) -> None:
        """A fleet build is about to make or reuse a shared root: the store says so first (every
        collector keeps it from then on), and a mark of it being unused goes."""
        self.store.update_build(build_id, rootfs=str(rootfs))
        _mark(rootfs.parent).unlink(missing_ok=True)

    # --- a fleet node's share of the queue ------------------------------------------------------

    async def serve_queue(self, node: str) -> None:
        """On a fleet node: fail the builds this node was running when it stopped, then claim
        queued builds from the store (up to max_builds at once) until `close`."""
        self.owner = node
        await self.reconcile()
        self._queue_task = asyncio.get_running_loop().create_task(self._claim_loop())

    async def _claim_loop(self) -> None:
        collected = time.monotonic()
        while True:
            try:
                await self._check_running()
                while len(self._tasks) < self.config.max_builds and not self._closing:
                    assert self.owner is not None
                    build = await asyncio.to_thread(self.store.claim_build, self.owner)
                    if build is None:
                        break
                    log.info("build %s of template %s: claimed by node %s", build.id, build.template_id, self.owner)
                    self._start(build)
                if time.monotonic() - collected >= COLLECT_EVERY:
                    collected = time.monotonic()
                    await self.collect_roots()
            except Exception:
                log.exception("the build queue's loop failed; trying again")
            await asyncio.sleep(CLAIM_EVERY)

    async def _check_running(self) -> None:
        """Stop the builds whose record says they are no longer running here (cancelled, failed
        with a node taken for lost, deleted with their template)."""
        if not self._tasks:
            return
        running = {b.id for b in await asyncio.to_thread(self.store.list_builds, statuses=(BuildStatus.RUNNING,),
                                                         limit=10_000, node=self.owner)}
        for build_id, task in list(self._tasks.items()):
            if build_id not in running and build_id not in self._ended_elsewhere:
                log.info("build %s: ended elsewhere (cancelled, deleted or failed): stopping it", build_id)
                self._ended_elsewhere.add(build_id)
                task.cancel()

    async def close(self) -> None:
        self._closing = True
        if self.owner is None:
            # Queued again in the store first: a stop that is cut short (a service manager's kill
            # after its timeout, with build boxes slow to go) must not leave them running there.
            for build_id in list(self._tasks):
                self.store.update_build(build_id, only_if_status=(BuildStatus.RUNNING,), status=BuildStatus.QUEUED,
                                        started_at=None)
        if self._queue_task is not None:
            self._queue_task.cancel()
            await asyncio.wait({self._queue_task})
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def egress_policy(self, box_key: str) -> Policy | None:
        """A build box reaches the internet (packages, registries) under the rules every box has
        (never private ranges or the host); its connections are told in the build's log."""
        if not box_key.startswith(BUILD_BOX_PREFIX):
            return None
        return Policy(box_key, NetworkRules.parse((), ()))

    def egress_record(self, box_key: str, line: str) -> None:
        for build_id, blog in self._live.items():
            if box_key.startswith(f"{BUILD_BOX_PREFIX}{build_id[:12]}"):
                blog.system(line)
                return



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


def _root_names(rootfs: set[str]) -> set[str]:
    """The directories (by name) that hold these roots (each `<dir>/rootfs`)."""
    return {Path(r).parent.name for r in rootfs}


def _mark(root: Path) -> Path:
    return root.with_name(root.name + UNUSED_MARK)


def _unused_since(root: Path) -> float | None:
    """When a collector first saw the shared root unreferred to (its mark), if one did."""
    try:
        return float(_mark(root).read_text(errors="replace")[:64])
    except (FileNotFoundError, ValueError):
        return None
