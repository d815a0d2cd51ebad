"""Volumes: a team's named storage that outlives boxes, mounted by many boxes at once, with files
calls that need no box.

The records are the store's (`volumes`, and each box's mounts in `sandboxes.volumes`); each
volume's filesystem is the node's (hutch.node.volumes), and its files are read and written by the
host without following anything a box planted (hutch.node.volfiles). Those calls block, so they run
on a few threads of their own, never the event loop's or the default pool every other call shares:
a box that makes its volume slow to walk holds at most those threads, and only for volume calls.
"""

from __future__ import annotations

import asyncio
import logging
import os
import posixpath
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from hutch.errors import ApiError, Code
from hutch.node import box
from hutch.node.api import Entry, VolumeMount
from hutch.node.volfiles import CHUNK, VolumeFiles
from hutch.node.volumes import VolumeDisks, VolumeGone
from hutch.services.config import ServerConfig
from hutch.services.models import CreateVolume, MountedVolume, Mounts, VolumeInfo, VolumeMountSpec, timestamp
from hutch.services.uploads import capped_body
from hutch.store import Store, VolumeRecord

log = logging.getLogger(__name__)
T = TypeVar("T")

FILE_THREADS = 4
# paths a volume may not be mounted at or under: the box's own filesystems and hutch's mounts
RESERVED = ("/proc", "/dev", "/sys", box.GUEST_ROOT)


def mount_path_problem(path: str) -> str | None:
    """Why a box path cannot take a volume, or None."""
    if posixpath.normpath(path) != path or path.startswith("//"):
        return "must be absolute and normal (no '.', '..', '//' or trailing '/')"
    if path == "/":
        return "cannot be the box's root"
    if any(ch in path for ch in "*?[]\\"):  # a files-only save prunes mount paths by find's patterns
        return "cannot hold *, ?, [, ] or \\"
    if path == box.SYSTEM_BUNDLE:
        return "is the box's trusted certificates"
    for reserved in RESERVED:
        if path == reserved or path.startswith(reserved + "/"):
            return f"is {reserved} or under it"
    return None


def mounts_of(volumes: list[dict[str, Any]] | None) -> tuple[VolumeMount, ...]:
    """What the node mounts for a box's recorded mounts."""
    return tuple(VolumeMount(m["volume_id"], m["path"], bool(m["read_only"])) for m in volumes or ())


class Volumes:
    def __init__(self, config: ServerConfig, store: Store, disks: VolumeDisks | None,
                 disk_budget: Callable[[], int | None]) -> None:
        self.config, self.store, self.disks = config, store, disks
        self._disk_budget = disk_budget  # the node's bytes for checkpoints, snapshots and volumes
        self._threads = ThreadPoolExecutor(FILE_THREADS, thread_name_prefix="volume-files")
        self.mounting: Counter[str] = Counter()  # volumes of creates not yet recorded: not deleted meanwhile

    def _disks(self) -> VolumeDisks:
        if self.disks is None:
            raise ApiError(Code.VOLUMES_UNAVAILABLE, "this server keeps no volumes")
        return self.disks

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._threads, fn, *args)

    # --- views ------------------------------------------------------------------------------------

    def get(self, team_id: str, ref: str) -> VolumeRecord:
        rec = self.store.get_volume(ref, team_id)
        if rec is None:
            raise ApiError(Code.VOLUME_NOT_FOUND, f"volume {ref!r} does not exist")
        return rec

    async def info(self, rec: VolumeRecord) -> VolumeInfo:
        used: int | None = None
        if self.disks is not None:
            try:
                usage = await self._run(self.disks.usage, rec.id)
                used = usage[0] if usage is not None else None
            except OSError:
                used = None
        return VolumeInfo(id=rec.id, name=rec.name, size_mib=rec.size_mib, used_bytes=used, metadata=rec.metadata,
                          created_at=timestamp(rec.created_at), mounted_by=self.store.volume_users(rec.id))

    # --- lifecycle --------------------------------------------------------------------------------

    def _team_max_mib(self) -> int:
        if self.config.team_max_volume_mib is not None:
            return self.config.team_max_volume_mib
        budget = self._disk_budget()
        return (budget // 2 // 2**20) if budget is not None else 2**31

    async def create(self, team_id: str, req: CreateVolume) -> VolumeRecord:
        """An empty volume; refused (nothing made) past the team's quotas or the node's disk."""
        disks = self._disks()
        rec = VolumeRecord(id=str(uuid.uuid4()), team_id=team_id, name=req.name,
                           size_mib=req.size_mib or self.config.volume_default_mib, metadata=req.metadata or {})
        free = await asyncio.to_thread(disks.disk_free)
        if rec.size_mib * 2**20 > free:  # sparse, but a volume that cannot fill is a lie to its boxes
            raise ApiError(Code.INSUFFICIENT_STORAGE, f"the node has {free // 2**20} MiB free: "
                                                      f"a volume of {rec.size_mib} MiB would not fit")
        refused = self.store.insert_volume(rec, self.config.team_max_volumes, self._team_max_mib(), self._disk_budget())
        if refused == "name":
            raise ApiError(Code.VOLUME_EXISTS, f"the team has a volume named {req.name!r}")
        if refused is not None:
            count, size = self.store.volume_usage(team_id)
            why = {"count": f"a team keeps at most {self.config.team_max_volumes} volumes (it has {count})",
                   "size": f"a team's volumes take at most {self._team_max_mib()} MiB (it has {size})",
                   "all_bytes": "the node's disk budget (checkpoints, snapshots and volumes) is spent"}[refused]
            raise ApiError(Code.TOO_MANY_VOLUMES, why + "; delete one first")
        self.mounting[rec.id] += 1  # not deleted while its filesystem is made (a mount waits on its lock)
        try:
            # shielded: a client that goes away does not leave a filesystem without its record
            await asyncio.shield(asyncio.get_running_loop().run_in_executor(self._threads, self._make, rec))
        finally:
            self.let_go([rec.id])
        return rec

    def _make(self, rec: VolumeRecord) -> None:
        """The volume's filesystem; its record goes if it cannot be made (nothing is left)."""
        disks = self._disks()
        try:
            disks.make(rec.id, rec.size_mib)
        except BaseException as e:
            self.store.delete_volume(rec.id)
            disks.remove(rec.id)
            if isinstance(e, OSError):
                log.error("a volume's filesystem could not be made: %s", e)
                raise ApiError(Code.INSUFFICIENT_STORAGE, f"the volume's filesystem could not be made: {e}") from e
            raise

    def update_metadata(self, team_id: str, ref: str, metadata: dict[str, str]) -> VolumeRecord:
        rec = self.get(team_id, ref)
        self.store.update_volume_metadata(rec.id, metadata)
        rec.metadata = metadata
        return rec

    async def delete(self, team_id: str, ref: str) -> None:
        """The volume and its files; refused while a live box (running or paused) mounts it."""
        rec = self.get(team_id, ref)
        if self.mounting[rec.id]:
            raise ApiError(Code.VOLUME_IN_USE, f"volume {rec.name!r} is being mounted by a sandbox that is starting")
        users = self.store.delete_volume(rec.id)
        if users:
            raise ApiError(Code.VOLUME_IN_USE, f"volume {rec.name!r} is mounted by sandbox(es) {', '.join(users[:5])}: "
                                               "kill them first", sandboxes=users)
        if self.disks is not None:  # on the volume threads: a fleet's is a walk of what boxes wrote
            await self._run(self.disks.remove, rec.id)

    # --- mounts -----------------------------------------------------------------------------------

    def resolve_mounts(self, team_id: str, wanted: Mounts | None) -> list[dict[str, Any]]:
        """A create's `volumes` as the box's recorded mounts; each volume the team's, each path
        one a volume may take, none inside another."""
        if not wanted:
            return []
        self._disks()
        out: list[dict[str, Any]] = []
        for path, ref in sorted(wanted.items()):
            problem = mount_path_problem(path)
            if problem:
                raise ApiError(Code.INVALID_REQUEST, f"volume mount path {path!r} {problem}")
            spec = ref if isinstance(ref, VolumeMountSpec) else VolumeMountSpec(volume=ref)
            rec = self.get(team_id, spec.volume)
            out.append({"volume_id": rec.id, "name": rec.name, "path": path, "read_only": spec.read_only})
        paths = [m["path"] for m in out]
        for a in paths:
            for b in paths:
                if a != b and b.startswith(a + "/"):
                    raise ApiError(Code.INVALID_REQUEST, f"volume mount {b!r} is inside another, {a!r}")
        return out

    def hold(self, mounts: list[dict[str, Any]]) -> list[str]:
        """Keep these volumes from deletion while a box that mounts them starts (`let_go` after)."""
        ids = [m["volume_id"] for m in mounts]
        for volume_id in ids:
            self.mounting[volume_id] += 1
        return ids

    def let_go(self, ids: list[str]) -> None:
        for volume_id in ids:
            self.mounting[volume_id] -= 1
            if self.mounting[volume_id] <= 0:
                del self.mounting[volume_id]

    @staticmethod
    def mounted(volumes: list[dict[str, Any]] | None) -> list[MountedVolume]:
        return [MountedVolume(**m) for m in volumes or ()]

    # --- files ------------------------------------------------------------------------------------

    async def _files(self, team_id: str, ref: str) -> VolumeFiles:
        rec = self.get(team_id, ref)
        try:
            return VolumeFiles(await self._run(self._disks().data, rec.id))
        except VolumeGone as e:
            raise ApiError(Code.VOLUME_NOT_FOUND, f"volume {ref!r} has no filesystem: {e}") from e

    async def stat(self, team_id: str, ref: str, path: str) -> Entry:
        files = await self._files(team_id, ref)
        return await self._run(files.stat, path)

    async def list_dir(self, team_id: str, ref: str, path: str, depth: int) -> list[Entry]:
        files = await self._files(team_id, ref)
        return await self._run(files.list_dir, path, depth)

    async def make_dir(self, team_id: str, ref: str, path: str) -> tuple[Entry, bool]:
        files = await self._files(team_id, ref)
        return await self._run(files.make_dirs, path)

    async def set_attrs(self, team_id: str, ref: str, path: str, uid: int | None, gid: int | None,
                        mode: int | None) -> Entry:
        files = await self._files(team_id, ref)
        return await self._run(files.set_attrs, path, uid, gid, mode)

    async def move(self, team_id: str, ref: str, source: str, destination: str) -> Entry:
        files = await self._files(team_id, ref)
        return await self._run(files.move, source, destination)

    async def remove(self, team_id: str, ref: str, path: str) -> None:
        files = await self._files(team_id, ref)
        await self._run(files.remove, path)

    async def read_file(self, team_id: str, ref: str, path: str) -> tuple[int, AsyncIterator[bytes]]:
        """A regular file's size and its bytes (up to that size: a box may be writing it)."""
        files = await self._files(team_id, ref)
        fd, size = await self._run(files.open_read, path)

        async def body() -> AsyncIterator[bytes]:
            try:
                left = size
                while left > 0:
                    piece = await self._run(os.read, fd, min(CHUNK, left))
                    if not piece:
                        break
                    left -= len(piece)
                    yield piece
            finally:
                os.close(fd)

        return size, body()

    async def write_file(self, team_id: str, ref: str, path: str, body: AsyncIterator[bytes],
                         length: int | None) -> Entry:
        """Write a file whole (a temporary file renamed over it once all is written): a reader
        never sees part of it. A write past the volume's size is insufficient_storage."""
        files = await self._files(team_id, ref)
        capped = capped_body(body, self.config.max_file_bytes, length)
        fd, parent, temp, final = await self._run(files.create_temp, path)
        try:
            pending: list[bytes] = []
            held = 0
            async for chunk in capped:
                pending.append(chunk)
                held += len(chunk)
                if held >= CHUNK:
                    await self._run(files.write_all, fd, b"".join(pending), path)
                    pending, held = [], 0
            if pending:
                await self._run(files.write_all, fd, b"".join(pending), path)
        except BaseException:
            await self._run(files.abandon, fd, parent, temp)
            raise
        await self._run(files.finish, fd, parent, temp, final, path)
        return await self._run(files.stat, path)

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

