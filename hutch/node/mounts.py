"""Host mounts the node makes: a tiny tmpfs for each box's channel directory, and the overlay
mounts a template build runs on.

The channel directory is the only host directory a box may write to; a tmpfs of a fixed small
size means root inside the box cannot fill the host's disk through it. (A build box writes to its
layer's directory too: see hutch.templates.layers.)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MNT_DETACH = 2


def mount_channel_tmpfs(path: Path, size: str = "1m") -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    rc = libc.mount(b"hutch-chan", str(path).encode(), b"tmpfs", flags, f"size={size},nr_inodes=64,mode=0700".encode())
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {path}: {os.strerror(err)}")


def mount_overlay(target: Path, lowers: list[Path], upper: Path | None = None, work: Path | None = None) -> None:
    """An overlayfs at `target`: `lowers` topmost first; with `upper` (and its `work`, on the same
    filesystem) writes land there, else the mount is read-only. No index or metacopy: a layer
    then holds whole files, and reads the same over any mount of the same stack."""
    target.mkdir(parents=True, exist_ok=True, mode=0o700)
    options = "lowerdir=" + ":".join(str(p) for p in lowers)
    if upper is not None and work is not None:
        options += f",upperdir={upper},workdir={work}"
    options += ",index=off,metacopy=off"
    flags = MS_NODEV if upper is not None else MS_NODEV | MS_RDONLY
    rc = libc.mount(b"hutch-layers", str(target).encode(), b"overlay", flags, options.encode())
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount overlay on {target}: {os.strerror(err)}")


def unmount(path: Path) -> None:
    """Detach a mount; quiet when nothing is mounted there."""
    libc.umount2(str(path).encode(), MNT_DETACH)


def mounts_under(root: Path) -> list[str]:
    """The mount points at or below `root`."""
    prefix = str(root).rstrip("/") + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")  # spaces and the like are \ooo-escaped
        if point == str(root) or point.startswith(prefix):
            points.append(point)
    return points


def unmount_under(root: Path) -> None:
    """Detach every mount at or below `root`, deepest first (what a crashed process left)."""
    for point in sorted(mounts_under(root), key=len, reverse=True):
        unmount(Path(point))


def is_mount(path: Path) -> bool:
    return os.path.ismount(path)


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Adopt the processes that runsc leaves behind (each box's sandbox and gofer), so their exit
    is reaped here and not left to a PID 1 that may never reap (a container's init, a CI agent):
    `runsc delete` waits for them to be gone, ~1.8 s for every box when they linger as zombies."""
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")


def process_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def adopted_children() -> set[int]:
    """The pids of this process' children (its own and adopted ones)."""
    kids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            kids.update(int(p) for p in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return kids
