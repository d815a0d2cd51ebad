"""The build queue: builds queued, run a few at a time (`max_builds`), cancelled, and queued again
when the server stops; each build's outcome written back to the store and its log.

    queued ──▶ running ──▶ ready
       │          ├──────▶ failed (error.code: step_failed, image_not_found, ready_timeout, ...)
       └──────────┴──────▶ cancelled

In a fleet the queue is the store's. An API server (`config.fleet` set, no `owner`) stores the build,
queued, and starts nothing; each node runtime (`serve`) claims queued builds, up to `max_builds` at
once, and runs them as a single host does, with roots and logs in the shared directory. Anyone
may end a build in the store (a cancel, a delete, a lost node): the node that runs it sees its
record so within CLAIM_EVERY and stops it. What the node writes back is conditional on the build
being still its own and running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
import uuid
from typing import Any

from hutch.errors import BuildFailure, build_error
from hutch.node import mounts
from hutch.services.build_logs import BuildLogs
from hutch.services.build_roots import RootCollector
from hutch.services.build_sources import BuildSources
from hutch.services.config import ServerConfig
from hutch.store import BuildRecord, BuildStatus, Store, TemplateRecord
from hutch.templates.buildlog import BuildLog
from hutch.templates.builds import Builder, BuildFailed
from hutch.templates.layers import LayerCache

log = logging.getLogger("hutch.server")

BUILD_TIMEOUT = 4 * 3600.0  # a whole build
# a fleet's
CLAIM_EVERY = 1.0  # a node looks for queued builds, and at the records of those it runs, this often
COLLECT_EVERY = 300.0  # a node collects the shared roots nothing uses this often (and after each build)


class BuildQueue:
    def __init__(self, config: ServerConfig, store: Store, builder: Builder, layers: LayerCache,
                 sources: BuildSources, roots: RootCollector, logs: BuildLogs) -> None:
        self.config, self.store, self.builder, self.layers = config, store, builder, layers
        self.sources, self.roots, self.logs = sources, roots, logs
        self._slots = asyncio.Semaphore(config.max_builds)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._closing = False  # builds cut short by a server stop are queued again at the next start
        self.owner: str | None = None  # a fleet node's name, once it serves the store's queue
        self._queue_task: asyncio.Task[None] | None = None
        self._ended_elsewhere: set[str] = set()  # builds this node runs whose record another process ended

    def add(self, rec: TemplateRecord, no_cache: bool, build_id: str | None = None) -> BuildRecord:
        """A new build of the template, queued (a single host starts it at once; a fleet's nodes claim it)."""
        build = BuildRecord(id=build_id or str(uuid.uuid4()), template_id=rec.id, status=BuildStatus.QUEUED, spec=rec.spec,
                            no_cache=no_cache, steps_total=len(rec.spec.get("steps", [])))
        self.store.insert_build(build)
        if self.config.fleet is None:
            self.start(build)  # a fleet's nodes claim it from the store
        return build

    def start(self, build: BuildRecord) -> None:
        task = asyncio.get_running_loop().create_task(self._run(build))
        self._tasks[build.id] = task

    async def stop(self, build_id: str) -> bool:
        """Cancel a build this process runs, and wait for its end; False if it runs none."""
        task = self._tasks.get(build_id)
        if task is None:
            return False
        task.cancel()
        await asyncio.wait({task})
        return True

    def cancel_in_store(self, build_id: str, write_log: bool) -> bool:
        """A fleet's cancel: a queued build ends here (its log says so); a running one is marked
        cancelled, and the node running it stops it when it sees that. False if it had ended."""
        error = build_error(BuildFailure.CANCELLED, "the build was cancelled")
        values: dict[str, Any] = {"status": BuildStatus.CANCELLED, "error": error, "finished_at": time.time()}
        if self.store.update_build(build_id, only_if_status=(BuildStatus.QUEUED,), **values):
            if write_log:  # no node claims it now: nobody else writes its log
                self.logs.end(build_id, BuildStatus.CANCELLED, error, "cancelled")
            return True
        return self.store.update_build(build_id, only_if_status=(BuildStatus.RUNNING,), **values)

    async def reconcile(self) -> None:
        """At start: builds a stopped server was running failed (their logs say so); queued ones
        are queued again; what running builds left on the host is removed. A fleet node fails only
        the builds it was running itself (a lost node's are failed by the API servers' watch);
        the queued ones are the whole fleet's, claimed by `serve`."""
        await asyncio.to_thread(self._clear_work)
        if self.owner is not None:
            reason = f"node {self.owner} stopped during the build"
            for build_id in self.store.fail_builds_of(self.owner, reason):
                self.logs.end(build_id, BuildStatus.FAILED, build_error(BuildFailure.BUILD_FAILED, reason))
            await self.roots.collect(self.owner)
            return
        for build in self.store.list_builds(statuses=(BuildStatus.RUNNING,), limit=10_000):
            error = build_error(BuildFailure.BUILD_FAILED, "the server stopped during the build")
            self.store.update_build(build.id, status=BuildStatus.FAILED, error=error, finished_at=time.time())
            self.logs.end(build.id, BuildStatus.FAILED, error)
        for build in reversed(self.store.list_builds(statuses=(BuildStatus.QUEUED,), limit=10_000)):
            self.start(build)
        await self.roots.collect(self.owner)

    def _clear_work(self) -> None:
        work = self.builder.work_dir
        mounts.unmount_under(work)  # a build's overlay mounts, if the server died in one
        shutil.rmtree(work, ignore_errors=True)
        self.layers.clear_partials()

    async def serve(self, node: str) -> None:
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
                    self.start(build)
                if time.monotonic() - collected >= COLLECT_EVERY:
                    collected = time.monotonic()
                    await self.roots.collect(self.owner)
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

    async def _run(self, build: BuildRecord) -> None:
        """One build, from the queue to its end. A fleet node's was claimed (it is running, on this
        node); what it writes back then holds only while the build is still its own and running:
        one another process ended meanwhile ends as its record says."""
        claimed = self.owner is not None
        try:
            blog = BuildLog(self.logs.path(build.id), sync=self.config.fleet is not None)
        except OSError as e:
            log.error("build %s: its log cannot be written: %s", build.id, e)
            self._settle(build.id, status=BuildStatus.FAILED, finished_at=time.time(),
                         error=build_error(BuildFailure.BUILD_FAILED, "the build's log cannot be written"))
            self._tasks.pop(build.id, None)
            return
        self.logs.live[build.id] = blog
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
                built = await asyncio.wait_for(self.sources.build(build, blog), BUILD_TIMEOUT)
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
            self.sources.forget(build.id)
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
                self.logs.path(build.id).unlink(missing_ok=True)  # its template was deleted meanwhile
            self.logs.live.pop(build.id, None)
            self._tasks.pop(build.id, None)
            self.builder.claimed.pop(build.id, None)
            await asyncio.shield(self.roots.collect(self.owner))

    def _settle(self, build_id: str, **values: Any) -> bool:
        """Write a build's outcome. A fleet node's holds only while the build is still its own and
        running: False if another process ended it meanwhile. A single host's always holds."""
        if self.owner is None:
            self.store.update_build(build_id, **values)
            return True
        return self.store.update_build(build_id, only_if_status=(BuildStatus.RUNNING,), only_if_node=self.owner,
                                       **values)

