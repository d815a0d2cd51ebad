"""Snapshots: a box's saved state (memory, processes and files), booted any number of times.

A snapshot is a checkpoint of a box that runs on (`Sandboxes.checkpoint_in_place`), kept in the
snapshots' directory under its id and recorded with the box's template, shape, env, egress rules
and secrets. A box booted from one (`boot`, `fork`) is a new sandbox restored from that image: new
id, token, egress listener and stand-ins; the processes of the source continue in it from where
they were saved. An image is only ever read once it is whole, so many boxes restore from it at
once; a delete waits for none of them but refuses while any boots from it (snapshot_in_use).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
import uuid
from collections import Counter
from pathlib import Path

from hutch.errors import ApiError, Code
from hutch.node import boxfiles
from hutch.node.api import AgentUnreachable, ChannelError
from hutch.services.checkpoints import checkpoint_bound, checkpoint_size, own_bytes
from hutch.services.config import ServerConfig
from hutch.services.creation import E2BTraits
from hutch.services.models import BootSnapshot, CreateSandbox, SnapshotInfo, timestamp
from hutch.services.sandboxes import Sandboxes
from hutch.store import CheckpointBudgets, SandboxRecord, SnapshotRecord, Store

log = logging.getLogger("hutch.server")


class Snapshots:
    def __init__(self, config: ServerConfig, store: Store, sandboxes: Sandboxes) -> None:
        self.config, self.store, self.sandboxes = config, store, sandboxes
        self._booting: Counter[str] = Counter()  # snapshot id -> boxes being restored from it here

    def info(self, rec: SnapshotRecord) -> SnapshotInfo:
        return SnapshotInfo(id=rec.id, name=rec.name, metadata=rec.metadata, source_sandbox_id=rec.source_sandbox_id,
                            template=rec.template, vcpu_count=rec.vcpu, memory_mib=rec.memory_mib, memory=rec.memory,
                            size_bytes=rec.size_bytes, created_at=timestamp(rec.created_at))

    def box_name(self, rec: SnapshotRecord) -> str:
        """What a box booted from a snapshot is called unless its create says: its source box's name."""
        source = self.store.get_sandbox(rec.source_sandbox_id, include_deleted=True) if rec.source_sandbox_id else None
        return source.name if source else rec.name or rec.template

    def image(self, snapshot_id: str) -> Path:
        return self.config.snapshot_dir / snapshot_id

    def get(self, team_id: str, ref: str) -> SnapshotRecord:
        rec = self.store.get_snapshot(ref, team_id)
        if rec is None:
            raise ApiError(Code.SNAPSHOT_NOT_FOUND, f"snapshot {ref!r} does not exist")
        return rec

    def find(self, team_id: str, metadata: dict[str, str] | None = None,
             source_sandbox_id: str | None = None) -> list[SnapshotRecord]:
        return self.store.list_snapshots(team_id, metadata, source_sandbox_id)

    def _quota(self, budgets: CheckpointBudgets) -> tuple[int, int]:
        """A team's most snapshots, and most bytes of them (by default, its checkpoints' bytes)."""
        size = self.config.team_max_snapshot_bytes
        return self.config.team_max_snapshots, (budgets.team_bytes or 0) if size is None else size

    # --- take -----------------------------------------------------------------------------------

    async def take(self, team_id: str, sandbox_id: str, *, name: str | None = None,
                   metadata: dict[str, str] | None = None, memory: bool = True) -> SnapshotRecord:
        """A snapshot of a box, which runs on (paused only while it is checkpointed)."""
        source = self.sandboxes.get(team_id, sandbox_id)
        budgets = self.sandboxes.checkpoints.budgets()  # a statfs: once
        most, most_bytes = quota = self._quota(budgets)
        held, held_bytes = self.store.snapshot_usage(team_id)
        if name is not None and self.store.get_snapshot(name, team_id) is not None:
            self._refuse("name", name, 0, quota)
        if held >= most:
            self._refuse("count", name, 0, quota)
        left = most_bytes - held_bytes  # what the checkpoint may take: at most the box's bound, or its files
        if left < (checkpoint_bound(source) if memory else 1):
            raise ApiError(Code.TOO_MANY_SNAPSHOTS, f"the team's snapshots may take {max(left, 0) / 2**20:.0f} MiB "
                           "more, and a snapshot of this box may take more than that; delete one")
        rec = SnapshotRecord(id=str(uuid.uuid4()), team_id=team_id, name=name, template=source.template,
                             vcpu=source.vcpu, memory_mib=source.memory_mib, memory=memory, size_bytes=0,
                             metadata=metadata or {}, env_vars=source.env_vars, network=source.network,
                             secrets={b.env: b.secret for b in self.sandboxes.secrets.bindings(source.id) if not b.revoked},
                             source_sandbox_id=source.id, template_id=source.template_id, rootfs=source.rootfs,
                             disk_mib=source.disk_mib, created_at=time.time(), volumes=source.volumes)
        image = self.image(rec.id)
        try:
            if memory:
                await self.sandboxes.checkpoint_in_place(team_id, sandbox_id, image)
                rec.memory = not (image / boxfiles.MARKER).exists()  # a box paused with its files only: so is this
            else:
                await self._save_files(source, image, left)
            rec.size_bytes = await asyncio.to_thread(checkpoint_size, image)
            refused = self.store.insert_snapshot(rec, most, most_bytes, budgets.all_bytes)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(shutil.rmtree, image, True))
            raise
        if refused is not None:
            await asyncio.to_thread(shutil.rmtree, image, True)
            self._refuse(refused, name, rec.size_bytes, quota)
        return rec

    async def _save_files(self, source: SandboxRecord, image: Path, limit: int) -> None:
        """A files-only snapshot: what the box changed of its template root, read while it runs
        (a paused box is resumed first, as by any call to it)."""
        if source.rootfs is None or not Path(source.rootfs).is_dir():
            raise ApiError(Code.TEMPLATE_ROOT_GONE, f"the template root of sandbox {source.id} is not on this server")
        try:
            agent = await self.sandboxes.running_box(source, asked=True)
            await boxfiles.save(agent, Path(source.rootfs), image, limit, own_bytes(source),
                                tuple(m["path"] for m in source.volumes or ()))
        except boxfiles.TooLarge as e:
            if e.what != "files":  # too many paths for a files-only snapshot: not the team's quota
                raise ApiError(Code.SNAPSHOT_FAILED, f"{e}: take a full snapshot instead") from e
            raise ApiError(Code.TOO_MANY_SNAPSHOTS, f"{e}: the team's snapshots may take no more; delete one") from e
        except ChannelError as e:
            raise ApiError(Code.SANDBOX_PAUSED, f"sandbox {source.id} was paused while its files were saved") from e
        except AgentUnreachable:
            raise await self.sandboxes.box_unreachable(source) from None

    @staticmethod
    def _refuse(why: str, name: str | None, size: int, quota: tuple[int, int]) -> None:
        most, most_bytes = quota
        if why == "all_bytes":
            raise ApiError(Code.CHECKPOINT_BUDGET, "the server's checkpoints and snapshots would pass its budget "
                           "(checkpoint_budget_bytes) with this one; delete a snapshot or kill a paused sandbox")
        if why == "name":
            raise ApiError(Code.SNAPSHOT_EXISTS, f"the team has a snapshot named {name!r} already")
        if why == "count":
            raise ApiError(Code.TOO_MANY_SNAPSHOTS, f"a team keeps at most {most} snapshots; delete one")
        raise ApiError(Code.TOO_MANY_SNAPSHOTS, f"a team's snapshots take at most {most_bytes / 2**20:.0f} MiB"
                       + (f", and this one takes {size / 2**20:.0f} MiB" if size else "") + "; delete one")

    # --- boot -----------------------------------------------------------------------------------

    async def boot(self, team_id: str, ref: str, req: CreateSandbox, count: int = 1, *,
                   e2b: E2BTraits | None = None) -> list[SandboxRecord | ApiError]:
        """`count` new boxes from a snapshot, restored at once; each one's outcome in order (a box
        that could not start is its error, and nothing of it is left)."""
        snap = self.get(team_id, ref)
        image = self.image(snap.id)
        self._booting[snap.id] += count  # a delete meanwhile is refused
        try:
            results = await asyncio.gather(*(self.sandboxes.create(team_id, req, e2b=e2b, snapshot=(snap, image))
                                             for _ in range(count)),
                                           return_exceptions=True)
        finally:
            self._booting[snap.id] -= count
            if not self._booting[snap.id]:
                del self._booting[snap.id]
        out: list[SandboxRecord | ApiError] = []
        for r in results:
            if isinstance(r, ApiError | SandboxRecord):
                out.append(r)
            elif isinstance(r, Exception):
                log.error("a box from snapshot %s did not start: %s", snap.id, r)
                out.append(ApiError(Code.BOOT_FAILED, f"the sandbox could not start: {r}"))
        cut = next((r for r in results if not isinstance(r, Exception | SandboxRecord)), None)
        if cut is not None:  # a boot was cancelled: no box is left that nobody was told of
            for made in out:
                if isinstance(made, SandboxRecord):
                    await asyncio.shield(self.sandboxes.kill(None, made.id))
            raise cut
        return out

    async def boot_one(self, team_id: str, ref: str, req: CreateSandbox, *,
                       e2b: E2BTraits | None = None) -> SandboxRecord:
        """One box from a snapshot (a create with `from_snapshot`); its failure raised."""
        [one] = await self.boot(team_id, ref, req, 1, e2b=e2b)
        if isinstance(one, ApiError):
            raise one
        return one

    async def fork(self, team_id: str, sandbox_id: str, req: BootSnapshot, *,
                   e2b: bool = False) -> list[SandboxRecord | ApiError]:
        """`req.count` copies of a box as it is now: a snapshot taken for them (not kept); with
        `e2b` (E2B's API), each with the box's E2B traits (E2BTraits)."""
        source = self.sandboxes.get(team_id, sandbox_id)
        snap = await self.take(team_id, sandbox_id, metadata={"hutch.fork_of": source.id})
        try:
            return await self.boot(team_id, snap.id, req.create(source.name, snap.id), req.count,
                                   e2b=(E2BTraits.of(source) or E2BTraits()) if e2b else None)
        finally:
            try:
                await self.delete(team_id, snap.id)
            except ApiError as e:  # booted from meanwhile by another call: it stays, listed
                log.warning("the snapshot taken for a fork of %s was kept: %s", sandbox_id, e.message)

    # --- delete ---------------------------------------------------------------------------------

    async def delete(self, team_id: str, ref: str) -> None:
        """Remove a snapshot and its image; refused while boxes boot from it (they keep running
        once restored: they need the image no more)."""
        snap = self.get(team_id, ref)
        if self._booting[snap.id]:
            raise ApiError(Code.SNAPSHOT_IN_USE, f"snapshot {ref!r} has {self._booting[snap.id]} sandboxes booting "
                           "from it; delete it once they run")
        self.store.delete_snapshot(snap.id)
        await asyncio.to_thread(shutil.rmtree, self.image(snap.id), True)

    def reconcile(self) -> None:
        """At a single host's start: the images no snapshot record names (a take cut short) go."""
        root = self.config.snapshot_dir
        keep = {s.id for s in self.store.list_snapshots(None)}
        for d in root.iterdir() if root.exists() else ():
            if d.name not in keep:
                shutil.rmtree(d, ignore_errors=True)
