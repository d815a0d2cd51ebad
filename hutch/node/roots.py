"""Looking into a box's root directory from the host, which runs as root, without following it.

A root is written by whoever made it: an image's author, a build step's commands, a box with a
writable root. Its paths are looked at one component at a time, each opened relative to the last
with O_NOFOLLOW, so a link planted anywhere in a path is seen as a link, never followed onto the
host (the root's own path is the host's and is taken as it is).

`scrub` takes out of a root what no root holds: sockets (a build box can bind one; with runsc's
--host-uds the file is a real host socket), FIFOs (useless to a box, runsc opens no host FIFO, and
one that the host opened would block it) and device nodes. Overlayfs whiteouts (0:0 character
devices) stay in a layer when asked: they are how a layer says "deleted".
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

SCRUB_TIMEOUT = 600.0  # seconds for the walk of one root
MAX_DROPPED = 100_000  # more special files than this in one root: it is refused, not cleaned
_MAX_RECORD = 1 << 20  # bytes of one path as find prints it (deep trees print long paths)
SHOWN = 10  # dropped entries named in the log; the rest are counted

_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_KINDS = {"s": "socket", "p": "FIFO", "b": "block device", "c": "character device"}


class RootError(Exception):
    """The root could not be checked: too many special files, the walk's time ran out, or it failed."""


@dataclass
class Dropped:
    """What scrub took out of a root."""

    count: int = 0
    shown: list[str] = field(default_factory=list)  # the first SHOWN, e.g. "socket /run/app.sock"

    def lines(self, where: str) -> list[str]:
        """For a build log: nothing if nothing was dropped."""
        if not self.count:
            return []
        more = f" (and {self.count - len(self.shown)} more)" if self.count > len(self.shown) else ""
        return [f"dropped {self.count} socket(s), FIFO(s) or device node(s) from {where}: "
                "a template root holds none" + more, *[f"  dropped {s}" for s in self.shown]]


def lstat_in(root: Path, path: str) -> os.stat_result | None:
    """The lstat of `path` (relative to `root`, or absolute in it), or None if it is not there or
    some directory on the way is a link or not a directory."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    try:
        with _parent(root, parts) as fd:
            return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None


def is_file_in(root: Path, path: str) -> bool:
    """Whether `path` in `root` is a regular file, itself and every directory on the way no link."""
    st = lstat_in(root, path)
    return st is not None and stat.S_ISREG(st.st_mode)


def scrub(root: Path, *, keep_whiteouts: bool = False, timeout: float = SCRUB_TIMEOUT,
          limit: int = MAX_DROPPED) -> Dropped:
    """Remove every socket, FIFO and device node under the directory `root` (keeping 0:0 character
    devices, whiteouts, if `keep_whiteouts`); return what went. Nothing is followed: `find -P` lists
    without following links, and each entry is removed by a walk of `_parent`. The walk runs in a
    process of its own under `timeout`, so a root with millions of entries costs its own time, not
    the server's descriptors or stack. Raises RootError. The root must not change meanwhile (a
    build box's layer once the box has ended, an unpacked image before it is renamed into place)."""
    argv = ["find", "-P", str(root), "-mindepth", "1",
            "(", "-type", "s", "-o", "-type", "p", "-o", "-type", "b", "-o", "-type", "c", ")",
            "-printf", r"%y %P\0"]
    dropped = Dropped()
    with tempfile.TemporaryFile() as errors:  # not a pipe: find never waits on a reader of its complaints
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors,
                                start_new_session=True)
        assert proc.stdout is not None
        late = threading.Event()

        def expire() -> None:
            late.set()
            kill_group(proc)

        timer = threading.Timer(timeout, expire)
        deadline = time.monotonic() + timeout
        timer.start()
        try:
            for entry in _split0(proc.stdout):
                kind, _, rel = entry.decode(errors="surrogateescape").partition(" ")
                if _drop(root, rel, keep_whiteouts):
                    dropped.count += 1
                    if len(dropped.shown) < SHOWN:
                        dropped.shown.append(f"{_KINDS.get(kind, kind)} /{rel}"[:300])
                    if dropped.count > limit:
                        raise RootError(f"more than {limit} sockets, FIFOs or device nodes")
            code = proc.wait()
            if late.is_set() or time.monotonic() > deadline:
                raise RootError(f"checking the root took longer than {timeout:.0f} s")
            if code != 0:
                errors.seek(max(0, errors.seek(0, os.SEEK_END) - 500))
                err = errors.read().decode(errors="replace").strip()
                raise RootError(f"checking the root failed: {err or f'find exited with {code}'}")
        finally:
            timer.cancel()
            kill_group(proc)
            proc.stdout.close()
    return dropped


def _drop(root: Path, rel: str, keep_whiteouts: bool) -> bool:
    parts = rel.split("/")
    try:
        with _parent(root, parts) as fd:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            if keep_whiteouts and stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                return False
            if stat.S_ISSOCK(st.st_mode) or stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                os.unlink(parts[-1], dir_fd=fd)
                return True
    except FileNotFoundError:
        pass
    except OSError as e:  # a link where find saw a directory: the root changed under the walk
        raise RootError(f"/{rel}: {e.strerror}") from None
    return False


@contextmanager
def _parent(root: Path, parts: list[str]) -> Iterator[int]:
    """An O_PATH descriptor of the directory holding parts[-1], each step opened with O_NOFOLLOW."""
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts[:-1]:
            child = os.open(name, _DIR, dir_fd=fd)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _split0(pipe: IO[bytes]) -> Iterator[bytes]:
    """NUL-ended records from a pipe, read in chunks; a record is one path, at most _MAX_RECORD."""
    buf = b""
    while chunk := os.read(pipe.fileno(), 65536):
        buf += chunk
        *records, buf = buf.split(b"\0")
        if len(buf) > _MAX_RECORD:
            raise RootError(f"a path in the root is longer than {_MAX_RECORD} bytes")
        yield from records


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """End a tool started with `start_new_session` and every process it made, and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
