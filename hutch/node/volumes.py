"""Volumes on the host: storage that outlives boxes, mounted into any number of them at once.

Each volume is a sparse ext4 image of its size (`<dir>/<id>.img`, hutch.node.disks), loop-mounted
at `<dir>/<id>/` for as long as the node runs, nodev and nosuid. Boxes bind its `data/` directory
(the filesystem's root holds `lost+found`, which no box needs to see), so a write past the size
fails in the box with ENOSPC and never fills the host's disk. One filesystem per volume, not a
directory on a shared disk: the size cap is the filesystem's own, and its use is one statvfs,
never a walk of what a box wrote.

Many boxes see the same files: runsc serves a bind mount through its gofer with the "shared"
file access of mounts (`--file-access-mounts`, its default), which revalidates what the sentry
cached against the host at each open, so a file one box has closed is whole when another opens it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
from pathlib import Path

from hutch.guest import protocol
from hutch.node import disks, mounts

DATA = "data"  # the directory of the volume's filesystem that boxes mount
_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class VolumeGone(OSError):
    """The volume's filesystem is not on this node (never made, or removed)."""


class VolumeDisks:
    """Every volume's filesystem on this host, under `root` (on the host's disk)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def _lock(self, volume_id: str) -> threading.Lock:
        """One volume's: its filesystem is looked at and mounted, made or removed by one thread at
        a time (two mounts of one image would be two filesystems writing one disk)."""
        with self._guard:
            return self._locks.setdefault(volume_id, threading.Lock())

    def _image(self, volume_id: str) -> Path:
        if not _ID.fullmatch(volume_id):  # ids are the server's uuids: never a path of anyone's
            raise VolumeGone(f"{volume_id!r} is not a volume id")
        return self.root / f"{volume_id}.img"

    def _mountpoint(self, volume_id: str) -> Path:
        return self._image(volume_id).with_suffix("")

    def data(self, volume_id: str) -> Path:
        """The directory boxes mount and the files API works in; the volume is mounted first (a
        node that restarted finds its images unmounted). Raises VolumeGone."""
        mountpoint = self._mountpoint(volume_id)
        with self._lock(volume_id):
            if not mounts.is_mount(mountpoint):
                image = self._image(volume_id)
                if not image.is_file():
                    raise VolumeGone(f"volume {volume_id} has no filesystem on this node")
                disks.attach(image, mountpoint)
        return mountpoint / DATA

    def make(self, volume_id: str, size_mib: int) -> None:
        """A new empty volume of `size_mib`; its data directory belongs to the box user."""
        image, mountpoint = self._image(volume_id), self._mountpoint(volume_id)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        with self._lock(volume_id):
            disks.make_kept(image, mountpoint, size_mib)
            try:
                data = mountpoint / DATA
                data.mkdir(mode=0o755)
                os.chown(data, protocol.BOX_UID, protocol.BOX_GID)
            except BaseException:
                disks.remove(image, mountpoint)
                raise

    def remove(self, volume_id: str) -> None:
        """Unmount and delete; quiet about what is already gone. Lazily: a box that ended a moment
        ago may still hold the mount, which then goes with it."""
        with contextlib.suppress(VolumeGone), self._lock(volume_id):
            disks.remove(self._image(volume_id), self._mountpoint(volume_id))

    def usage(self, volume_id: str) -> tuple[int, int] | None:
        """(bytes used, bytes the files may take in all), from the filesystem's own counts."""
        st = os.statvfs(self.data(volume_id))
        total = st.f_blocks * st.f_frsize
        return total - st.f_bfree * st.f_frsize, total

    def disk_free(self) -> int:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        return shutil.disk_usage(self.root).free


class SharedVolumes(VolumeDisks):
    """A fleet's volumes: plain directories in the shared directory (`<shared>/volumes/<id>/data`),
    which every node's boxes bind, so boxes on two nodes see one volume. An ext4 image cannot be
    mounted by two hosts at once, so here a volume's size is a quota the team is held to, not a
    filesystem's: a box's write past it is not stopped (the shared filesystem's own space is)."""

    def data(self, volume_id: str) -> Path:
        data = self._mountpoint(volume_id) / DATA
        if not data.is_dir() or data.is_symlink():
            raise VolumeGone(f"volume {volume_id} has no directory in the shared directory")
        return data

    def make(self, volume_id: str, size_mib: int) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        top = self._mountpoint(volume_id)
        top.mkdir(mode=0o700)
        try:
            (top / DATA).mkdir(mode=0o755)
            os.chown(top / DATA, protocol.BOX_UID, protocol.BOX_GID)
        except BaseException:
            shutil.rmtree(top, ignore_errors=True)
            raise

    def remove(self, volume_id: str) -> None:
        """Its directory and all in it; rmtree walks by descriptors and follows no link."""
        with contextlib.suppress(VolumeGone):
            shutil.rmtree(self._mountpoint(volume_id), ignore_errors=True)

    def usage(self, volume_id: str) -> tuple[int, int] | None:
        return None  # only a walk of what boxes wrote would tell: none is made
