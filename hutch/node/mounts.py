"""Host mounts the node makes for a box: a tiny tmpfs for its channel directory.

The channel directory is the only host directory a box may write to; a tmpfs of a fixed small
size means root inside the box cannot fill the host's disk through it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MNT_DETACH = 2


def mount_channel_tmpfs(path: Path, size: str = "1m") -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    rc = _libc.mount(b"hutch-chan", str(path).encode(), b"tmpfs", flags, f"size={size},nr_inodes=64,mode=0700".encode())
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {path}: {os.strerror(err)}")


def unmount(path: Path) -> None:
    """Detach a mount; quiet when nothing is mounted there."""
    _libc.umount2(str(path).encode(), MNT_DETACH)


def is_mount(path: Path) -> bool:
    return os.path.ismount(path)


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Adopt the processes that runsc leaves behind (each box's sandbox and gofer), so their exit
    is reaped here and not left to a PID 1 that may never reap (a container's init, a CI agent):
    `runsc delete` waits for them to be gone, ~1.8 s for every box when they linger as zombies."""
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
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
