"""A box's disk: a small ext4 filesystem of its own, the size of its template's `disk_mib`.

gVisor keeps what a box writes to its root in an overlay; with `--overlay2=root:dir=D` the file
contents of that overlay live in a file under D. Putting D on a filesystem of the box's disk size
makes a write past it fail in the box with ENOSPC (the box runs on). The filesystem is a sparse
image on the host's disk behind a loop device with direct I/O (no second copy in the page cache),
mounted with discard so the image shrinks as the box frees space. A template build's step writes
its layer onto one too. Directories and empty files of a box live in its memory, bounded by its
memory limit, not here.

A checkpoint copies the overlay's contents into the checkpoint image, so a paused box holds no
disk; a restore needs a little more room than the box used, so it gets RESTORE_SLACK more, taken
up again by a ballast file the box never sees.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
from pathlib import Path

from hutch.node import mounts

RESTORE_SLACK_MIB = 64
BALLAST = ".hutch-ballast"  # beside the overlay's file: outside the box's view
TOOL_TIMEOUT = 60


class DiskError(OSError):
    """The host would not make or mount a box's disk."""


def _run(*argv: str) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DiskError(f"{argv[0]}: {e}") from e
    if out.returncode != 0:
        raise DiskError(f"{' '.join(argv[:2])} failed: {(out.stderr or out.stdout).strip()[-500:]}")
    return out.stdout


def make(image: Path, mountpoint: Path, size_mib: int, layer: bool = False) -> None:
    """A new empty filesystem of `size_mib` in the sparse file `image`, mounted at `mountpoint`.
    Never noexec: gVisor maps programs a box wrote from its disk to run them. A box's disk holds
    one file (the overlay's), a build's `layer` a whole tree: inodes to match."""
    remove(image, mountpoint)  # a leftover of a box that ended badly
    # no journal (thrown away at every stop), no reserved blocks; for a box few inodes (the
    # overlay is one file): 1008 of 1024 MiB usable
    inodes = ["-i", "16384"] if layer else ["-N", "64"]
    _format(image, size_mib, ["-O", "^has_journal,^resize_inode", *inodes])
    try:
        attach(image, mountpoint, nosuid=not layer)
    except BaseException:
        remove(image, mountpoint)
        raise


def make_kept(image: Path, mountpoint: Path, size_mib: int) -> None:
    """A filesystem that outlives boxes and restarts (a volume: hutch.node.volumes): journalled,
    an inode for every 8 KiB (a package cache is many small files), mounted nosuid and nodev. A
    failure leaves nothing."""
    _format(image, size_mib, ["-i", "8192"])
    try:
        attach(image, mountpoint, nosuid=True)
    except BaseException:
        remove(image, mountpoint)
        raise


def _format(image: Path, size_mib: int, options: list[str]) -> None:
    image.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(image, "wb") as f:
        f.truncate(size_mib * 2**20)
    try:
        _run("mkfs.ext4", "-q", "-F", "-m", "0", *options, "-E", "nodiscard,root_owner=0:0", str(image))
    except BaseException:
        image.unlink(missing_ok=True)
        raise


def attach(image: Path, mountpoint: Path, nosuid: bool = True) -> None:
    """Mount the filesystem in `image` at `mountpoint` through a loop device with direct I/O (no
    second copy in the page cache), with discard so the image shrinks as files go."""
    device = _run("losetup", "--find", "--show", "--direct-io=on", str(image)).strip()
    mountpoint.mkdir(parents=True, exist_ok=True, mode=0o700)
    flags = mounts.MS_NODEV | MS_NOATIME | (mounts.MS_NOSUID if nosuid else 0)
    if mounts.libc.mount(device.encode(), str(mountpoint).encode(), b"ext4", flags, b"discard") != 0:
        err = ctypes.get_errno()
        with contextlib.suppress(DiskError):
            _run("losetup", "--detach", device)
        raise DiskError(err, f"mount {device} on {mountpoint}: {os.strerror(err)}")


def remove(image: Path, mountpoint: Path) -> None:
    """Unmount, detach and delete a disk; quiet about what is already gone. Lazily: a box's
    processes may let go of its filesystem a moment after runsc said it was deleted; the loop
    device then goes with the last of them (a busy one is detached when it is free)."""
    if mountpoint.exists():
        mounts.unmount(mountpoint)
        with contextlib.suppress(OSError):
            mountpoint.rmdir()
    if image.exists():
        with contextlib.suppress(DiskError):
            for line in _run("losetup", "--associated", str(image)).splitlines():
                _run("losetup", "--detach", line.split(":", 1)[0])
        image.unlink(missing_ok=True)


def fill_to(mountpoint: Path, size_mib: int) -> None:
    """After a restore onto a disk with slack: take the slack up again with a ballast file, so
    the box has what its limit leaves it and no more."""
    st = os.statvfs(mountpoint)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    allowed = max(0, size_mib * 2**20 - used)
    ballast = st.f_bavail * st.f_frsize - allowed - 256 * 2**10
    if ballast > 0:
        fd = os.open(mountpoint / BALLAST, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.posix_fallocate(fd, 0, ballast)
        finally:
            os.close(fd)


MS_NOATIME = 1024
