"""A sandbox's delete: its box stopped, its checkpoint, network log, secret bindings and published
ports gone, and one `sandbox.killed` event, however many servers of a fleet try at once."""

from __future__ import annotations

import asyncio
import shutil
import time

from hutch.node.api import NodeRuntime
from hutch.services.checkpoints import Checkpoints
from hutch.services.lifecycle import BoxLocks, find_sandbox
from hutch.store import Event, SandboxRecord, SandboxStatus, Store


class Kills:
    def __init__(self, store: Store, node: NodeRuntime, locks: BoxLocks, checkpoints: Checkpoints) -> None:
        self.store, self.node, self.locks, self.checkpoints = store, node, locks, checkpoints

    async def kill(self, team_id: str | None, sandbox_id: str, *, only_if_due: bool = False) -> None:
        """Delete a sandbox and all it holds. With `only_if_due` (auto-delete), only if it is
        still paused past its deadline once the lock is held: a call may have resumed it since.
        A files-only pause or resume under way is cut short (its box's programs pace it), never
        waited for."""
        if only_if_due:
            await self._kill(team_id, sandbox_id, only_if_due)
            return
        find_sandbox(self.store, team_id, sandbox_id)  # only the box's own team cuts its work short
        async with self.locks.killing(sandbox_id) as paced:
            if paced is not None:
                paced.cancel()  # its caller hears "deleted": the kill goes on even if this one's caller goes
                await asyncio.shield(self._kill(team_id, sandbox_id, only_if_due))
            else:
                await self._kill(team_id, sandbox_id, only_if_due)

    async def _kill(self, team_id: str | None, sandbox_id: str, only_if_due: bool) -> None:
        async with self.locks[sandbox_id]:
            rec = find_sandbox(self.store, team_id, sandbox_id)
            due = rec.delete_at is not None and rec.delete_at <= time.time()
            if only_if_due and not (rec.status == SandboxStatus.PAUSED and due):
                return
            await self.remove(rec, "auto_delete" if only_if_due else "asked")
        self.locks.forget(sandbox_id)

    async def remove(self, rec: SandboxRecord, why: str) -> None:
        """With the box's lock held; `why`: asked, timeout (a deadline that deletes) or auto_delete."""
        if rec.runtime_id:
            await self.node.stop(rec.runtime_id, rec.box_key)
        shutil.rmtree(self.checkpoints.image_dir(rec.id), ignore_errors=True)
        # (not if another API server of a fleet deleted it first: one kill, one event)
        self.store.update_sandbox(rec.id, only_if_status=tuple(s for s in SandboxStatus if s != SandboxStatus.DELETED),
                                  status=SandboxStatus.DELETED, runtime_id=None, pause_at=None, delete_at=None,
                                  event=Event("sandbox.killed", {"reason": why}))
        self.store.delete_network_log(rec.id)
        self.store.delete_bindings(rec.id)
        self.store.unpublish_port(rec.id)
