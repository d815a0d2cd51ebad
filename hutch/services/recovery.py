"""What a server that stopped left behind: at start, the boxes that still run taken back, a pause
or resume it left midway settled, the rest marked failed, stray checkpoints cleared; and, now and
then, a pause or resume some other server of a fleet left midway when it died.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time

from hutch.node.api import NodeRuntime
from hutch.services.checkpoints import CHECKPOINT_DONE, Checkpoints, checkpoint_size
from hutch.services.config import ServerConfig
from hutch.services.failures import Failures
from hutch.services.lifecycle import BoxLocks, deadline
from hutch.store import Event, SandboxRecord, SandboxStatus, Store

log = logging.getLogger("hutch.server")

STUCK_SECONDS = 1800.0  # a pause or resume older than this was left by a server that died (a pause may take 10 min)


class Recovery:
    def __init__(self, config: ServerConfig, store: Store, node: NodeRuntime, locks: BoxLocks,
                 checkpoints: Checkpoints, failures: Failures) -> None:
        self.config, self.store, self.node, self.locks = config, store, node, locks
        self.checkpoints, self.failures = checkpoints, failures
        self.owner: str | None = None  # a fleet node's name: its start takes back only its own boxes

    async def reconcile(self) -> None:
        """At start: take back the boxes that still run, settle what a crash left half-done,
        mark the rest failed, and clear strays."""
        records = [r for r in self.store.list_sandboxes(None) if self.owner is None or r.node == self.owner]
        for rec in records:
            if rec.status == SandboxStatus.PAUSING:
                await self._settle_pausing(rec)
            elif rec.status == SandboxStatus.RESUMING and self.owner is None:  # a fleet's may be under way elsewhere
                self.store.update_sandbox(rec.id, status=SandboxStatus.PAUSED)  # the image was kept until resumed
        live = [r for r in self.store.list_sandboxes(None, status=SandboxStatus.ACTIVE)
                if r.runtime_id and (self.owner is None or r.node == self.owner)]
        alive = await self.node.adopt({r.runtime_id: r.box_key for r in live if r.runtime_id})
        for rec in live:
            if rec.runtime_id not in alive:
                self.failures.mark_failed(rec.id, "the sandbox was not running when the server started")
        if self.owner is not None:
            return  # a fleet's checkpoints are every node's: not one node's to clear
        paused = self.store.list_sandboxes(None, status=SandboxStatus.PAUSED)
        keep = {r.id for r in paused}
        for rec in paused:
            if rec.checkpoint_bytes is None:  # paused by a hutch that kept no sizes: measured once
                size = await asyncio.to_thread(checkpoint_size, self.checkpoints.image_dir(rec.id))
                self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.PAUSED,), checkpoint_bytes=size)
        images = self.config.checkpoint_dir
        for d in images.iterdir() if images.exists() else ():
            if d.name not in keep:
                shutil.rmtree(d, ignore_errors=True)  # reclaim the disk of boxes that are gone

    async def settle_stuck(self, now: float | None = None) -> None:
        """A pause or resume unchanged for longer than any takes: its server died midway. A
        pause is settled as at a start (kept if its checkpoint is whole, else the box runs on or
        has failed); a resume goes back to paused (its image is kept until a resume succeeds; a
        box the node restored meanwhile belongs to no record, and the node stops it)."""
        cutoff = (now or time.time()) - STUCK_SECONDS
        for status in (SandboxStatus.PAUSING, SandboxStatus.RESUMING):
            for rec in self.store.list_sandboxes(None, status=status):
                if rec.updated_at > cutoff or self.locks[rec.id].locked():
                    continue
                async with self.locks[rec.id]:
                    current = self.store.get_sandbox(rec.id)
                    if current is None or current.status != status or current.updated_at > cutoff:
                        continue
                    log.warning("sandbox %s was left %s by a server that stopped: settling it", rec.id, status)
                    if status == SandboxStatus.PAUSING:
                        await self._settle_pausing(current)
                    else:
                        self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.RESUMING,),
                                                  status=SandboxStatus.PAUSED)

    async def _settle_pausing(self, rec: SandboxRecord) -> None:
        image = self.checkpoints.image_dir(rec.id)
        if (image / CHECKPOINT_DONE).exists():
            if rec.runtime_id:
                await self.node.stop(rec.runtime_id, rec.box_key)
            self.store.update_sandbox(rec.id, status=SandboxStatus.PAUSED, runtime_id=None, pause_at=None,
                                      delete_at=deadline(rec.auto_delete_seconds),
                                      checkpoint_bytes=await asyncio.to_thread(checkpoint_size, image),
                                      event=Event("sandbox.paused", {"memory": not self.checkpoints.files_only(rec),
                                                                     "reason": "settled"}))
        elif rec.runtime_id and await self.node.is_alive(rec.runtime_id):
            await self.node.wake(rec.runtime_id)  # it may have quiesced: listen again
            shutil.rmtree(image, ignore_errors=True)
            self.store.update_sandbox(rec.id, status=SandboxStatus.ACTIVE, checkpoint_bytes=None)
        else:
            self.failures.mark_failed(rec.id, "the server stopped while the sandbox was pausing")

