"""A paused box's resume: restored from its checkpoint (or, if it kept its files only, booted
afresh with them), its token rotated unless E2B's ways keep it; and the live box a call reaches,
resumed first if need be.

    paused ──resume (or any data-plane call)──▶ resuming ──▶ active
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from pathlib import Path

from hutch.errors import ApiError, Code, not_found
from hutch.node import boxcmd, boxfiles
from hutch.node.api import BoxAgent, BoxRef, BoxStartError, NodeRuntime
from hutch.node.spec import Limits
from hutch.services.boxsetup import BoxSetup
from hutch.services.checkpoints import Checkpoints, mount_paths
from hutch.services.lifecycle import BoxLocks, CutShort, deadline, find_sandbox
from hutch.services.metrics import Metrics
from hutch.services.volumes import mounts_of
from hutch.store import Event, SandboxRecord, SandboxStatus, Store

log = logging.getLogger("hutch.server")


class Resumes:
    def __init__(self, store: Store, node: NodeRuntime, locks: BoxLocks, setup: BoxSetup, checkpoints: Checkpoints,
                 metrics: Metrics) -> None:
        self.store, self.node, self.locks, self.setup = store, node, locks, setup
        self.checkpoints, self.metrics = checkpoints, metrics

    async def resume(self, team_id: str | None, sandbox_id: str) -> SandboxRecord:
        """Restore a paused box (a no-op for an active one); the access token rotates, except for
        a box made through E2B's API (`stable_token`): E2B's SDK keeps the token it was first given."""
        async with self.locks[sandbox_id]:
            rec = find_sandbox(self.store, team_id, sandbox_id)
            if rec.status == SandboxStatus.ACTIVE:
                return rec
            if rec.status != SandboxStatus.PAUSED:
                raise ApiError(Code.SANDBOX_FAILED if rec.status == SandboxStatus.FAILED else Code.INVALID_STATE,
                               f"sandbox {rec.id} is {rec.status}: {rec.failure or 'it cannot be resumed'}")
            self.setup.check_capacity(rec.team_id)
            rootfs, limits = self.setup.limits(rec)
            image = self.checkpoints.image_dir(rec.id)
            if not self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.PAUSED,), status=SandboxStatus.RESUMING):
                raise ApiError(Code.INVALID_STATE, f"sandbox {rec.id} is being resumed elsewhere; connect again")
            files_only = self.checkpoints.files_only(rec)
            started = time.perf_counter()
            try:
                if files_only:
                    box = await self._boot_files(rec, rootfs, limits, image)
                else:
                    box = await self.node.restore(rec.box_key, rootfs, limits, image, volumes=mounts_of(rec.volumes))
                self.metrics.resume_seconds.observe(time.perf_counter() - started)
            except CutShort:  # its kill waits for the lock: it finds the box paused, as it was
                self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.RESUMING,), status=SandboxStatus.PAUSED)
                raise ApiError(Code.NOT_FOUND, f"sandbox {rec.id} was deleted while it was resumed") from None
            except Exception as e:
                log.error("resuming %s failed: %s", rec.id, e)
                # the image is still there: try again (unless the sandbox was killed meanwhile)
                self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.RESUMING,), status=SandboxStatus.PAUSED)
                raise ApiError(Code.RESUME_FAILED, f"the sandbox could not be resumed: {e}") from e
            if not self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.RESUMING,), status=SandboxStatus.ACTIVE,
                                             event=Event("sandbox.resumed", {"memory": not files_only}),
                                             runtime_id=box.runtime_id, node=box.node, delete_at=None,
                                             checkpoint_bytes=None,
                                             token_generation=rec.token_generation + (0 if rec.stable_token else 1),
                                             pause_at=deadline(rec.timeout_seconds)):
                await self.node.stop(box.runtime_id, rec.box_key)  # killed meanwhile (on another server): no box without a record
                raise not_found("sandbox", sandbox_id)
            shutil.rmtree(image, ignore_errors=True)  # restored: the image is no longer needed
            return find_sandbox(self.store, team_id, sandbox_id)

    async def connect(self, team_id: str, sandbox_id: str) -> SandboxRecord:
        """The record a client reconnects to: resumed if paused; a failed one as it is."""
        rec = find_sandbox(self.store, team_id, sandbox_id)
        if rec.status in (SandboxStatus.PAUSING, SandboxStatus.PAUSED, SandboxStatus.RESUMING):
            rec = await self.resume(team_id, sandbox_id)
        return rec

    async def running_box(self, rec: SandboxRecord, *, asked: bool = False) -> BoxAgent:
        """The agent of the live box behind a record, resumed first if it is paused (or pausing,
        or resuming: the lock makes this wait for that to finish), unless traffic may not wake it
        (auto-resume off) and the resume was not `asked` for by the call itself (a snapshot of it).
        Raises ChannelError if a pause takes the box meanwhile."""
        current = find_sandbox(self.store, None, rec.id)  # the caller's record may be older than a pause
        if current.status != SandboxStatus.ACTIVE:
            if not asked and current.auto_resume is False and current.status in (SandboxStatus.PAUSING,
                                                                                 SandboxStatus.PAUSED):
                raise ApiError(Code.SANDBOX_PAUSED, f"sandbox {rec.id} is paused, and traffic does not wake it "
                                                    "(auto-resume is off): resume or connect to it first")
            current = await self.resume(None, rec.id)  # a failed box raises here
        agent = self.node.agent(current.runtime_id) if current.runtime_id else None
        if agent is None:
            raise ApiError(Code.SANDBOX_NOT_RUNNING, f"sandbox {rec.id} is {current.status}")
        return agent

    async def _boot_files(self, rec: SandboxRecord, rootfs: Path, limits: Limits, image: Path) -> BoxRef:
        """The resume of a files-only pause: a fresh box of the template with the saved files (the
        box's own, so they pace it: a kill cuts it short), its start command run; nothing of it is
        left if that fails."""
        box = await self.node.boot(rec.box_key, rootfs, limits, volumes=mounts_of(rec.volumes))
        try:
            agent = self.node.agent(box.runtime_id)
            if agent is None:
                raise BoxStartError("the box ended as it started")
            await self.locks.paced(rec.id, self._take_files_back(rec, agent, image))
        except BaseException:
            await asyncio.shield(self.node.stop(box.runtime_id, rec.box_key))
            raise
        return box

    async def _take_files_back(self, rec: SandboxRecord, agent: BoxAgent, image: Path) -> None:
        await boxfiles.restore(agent, image, mount_paths(rec))
        template = self.store.get_template(rec.template_id) if rec.template_id else None
        spec = template.spec if template else {}
        if spec.get("start_cmd") or spec.get("ready_cmd"):
            await boxcmd.start_and_wait_ready(agent, spec.get("start_cmd"), spec.get("ready_cmd"),
                                              self.setup.defaults(rec, template), spec["ready_timeout_seconds"])

