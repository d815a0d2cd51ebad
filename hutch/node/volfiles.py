"""A volume's files, read and written by the host (which runs as root) with no box.

A volume is written by boxes' root: anything may be in it (links, FIFOs, sockets, device nodes,
deep or wide trees, names of any bytes). So every path is resolved with openat2 beneath the
volume's directory with no link followed anywhere (RESOLVE_NO_SYMLINKS: a link on the way or at
the end is ELOOP, reported as unsafe_path), never across another mount, and what is opened is
checked by fstat before use: only regular files are read or replaced, opened O_NONBLOCK so a FIFO
never holds the host. The volume is mounted nodev, so no device node there opens as one. Walks
(list, remove) are bounded in entries and depth. Every call blocks: the caller runs it on a thread.

Files the host writes belong to the box user, as files a box's user writes do.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from hutch.errors import ApiError, Code
from hutch.guest import protocol
from hutch.node.api import Entry

MAX_ENTRIES = 10_000  # a listing's, as the box's (too_many_entries past it)
MAX_REMOVED = 1_000_000  # entries one remove takes out; past it: too_many_entries, part removed
MAX_DEPTH = 256  # a remove's depth
CHUNK = 1 << 20

_SYS_OPENAT2 = 437  # the same number on every architecture Linux gave it
_RESOLVE = 0x01 | 0x02 | 0x04 | 0x08  # NO_XDEV | NO_MAGICLINKS | NO_SYMLINKS | BENEATH
_libc = ctypes.CDLL(None, use_errno=True)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _openat2(dirfd: int, rel: str, flags: int, mode: int = 0) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, mode, _RESOLVE)
    fd = _libc.syscall(_SYS_OPENAT2, dirfd, rel.encode(errors="surrogateescape"), ctypes.byref(how),
                       ctypes.sizeof(how))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), rel)
    return int(fd)


def _parts(path: str) -> list[str]:
    problem = protocol.path_problem(path)
    if problem:
        raise ApiError(Code.INVALID_PATH, f"{problem}: {path!r}")
    return [p for p in path.split("/") if p not in ("", ".")]


def _failure(e: OSError, path: str) -> ApiError:
    """What an OSError in a volume means to the caller."""
    code = {errno.ENOENT: Code.FILE_NOT_FOUND, errno.ENOTDIR: Code.NOT_A_DIRECTORY,
            errno.EISDIR: Code.IS_A_DIRECTORY, errno.EEXIST: Code.ALREADY_EXISTS, errno.ENOTEMPTY: Code.ALREADY_EXISTS,
            errno.ELOOP: Code.UNSAFE_PATH, errno.EXDEV: Code.UNSAFE_PATH, errno.EACCES: Code.PERMISSION_DENIED,
            errno.EPERM: Code.PERMISSION_DENIED, errno.ENOSPC: Code.INSUFFICIENT_STORAGE,
            errno.EDQUOT: Code.INSUFFICIENT_STORAGE, errno.ENAMETOOLONG: Code.INVALID_PATH}.get(e.errno or 0, Code.IO_ERROR)
    why = {Code.UNSAFE_PATH: "a link, or another filesystem, on the way", Code.INSUFFICIENT_STORAGE:
           "the volume is full"}.get(code, e.strerror or "failed")
    return ApiError(code, f"{path}: {why}")


class VolumeFiles:
    """The files of one volume, whose data directory is `data` (hutch.node.volumes)."""

    def __init__(self, data: Path) -> None:
        self.data = data

    @contextmanager
    def _root(self) -> Iterator[int]:
        fd = os.open(self.data, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            yield fd
        finally:
            os.close(fd)

    def _open(self, path: str, flags: int, parts: list[str] | None = None) -> int:
        """`path` (or the directories `parts`) opened beneath the volume with `flags`, nothing followed."""
        parts = _parts(path) if parts is None else parts
        with self._root() as root:
            try:
                return _openat2(root, "/".join(parts) or ".", flags)
            except OSError as e:
                raise _failure(e, path) from None

    @contextmanager
    def _parent(self, parts: list[str], path: str) -> Iterator[int]:
        """The directory holding the last of `parts` (the volume's root for a top-level name)."""
        with self._root() as root:
            if len(parts) <= 1:
                yield root
                return
            try:
                fd = _openat2(root, "/".join(parts[:-1]), os.O_PATH | os.O_DIRECTORY)
            except OSError as e:
                raise _failure(e, path) from None
            try:
                yield fd
            finally:
                os.close(fd)

    def _entry(self, dirfd: int, name: str, path: str) -> Entry:
        """`name` in `dirfd` as lstat sees it ("": `dirfd` itself, the volume's root)."""
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False) if name else os.stat(dirfd)
        kind: Literal["file", "dir", "symlink", "other"] = (
            "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode)
            else "symlink" if stat.S_ISLNK(st.st_mode) else "other")
        target = None
        if kind == "symlink":
            target = _shown(os.readlink(name, dir_fd=dirfd)[:4096])  # the text only: never followed
        return Entry(name=_shown(name) or "/", path=_shown(path), type=kind, size=st.st_size, mode=stat.S_IMODE(st.st_mode),
                     permissions=stat.filemode(st.st_mode), owner=_who(st.st_uid), group=_who(st.st_gid),
                     mtime=_time(st.st_mtime), target=target, link=None, uid=st.st_uid, gid=st.st_gid,
                     atime=_time(st.st_atime), ctime=_time(st.st_ctime))

    # --- reads ------------------------------------------------------------------------------------

    def stat(self, path: str) -> Entry:
        parts = _parts(path)
        if not parts:
            with self._root() as root:
                return self._entry(root, "", "/")
        with self._parent(parts, path) as parent:
            try:
                return self._entry(parent, parts[-1], "/" + "/".join(parts))
            except OSError as e:
                raise _failure(e, path) from None

    def open_read(self, path: str) -> tuple[int, int]:
        """A regular file opened for reading, and its size; the caller closes the descriptor. It
        is looked at (O_PATH) before it is opened, through the descriptor itself: a FIFO, socket
        or device node is never opened, and nothing can be swapped in between."""
        found = self._open(path, os.O_PATH)
        try:
            st = os.fstat(found)
            if stat.S_ISDIR(st.st_mode):
                raise ApiError(Code.IS_A_DIRECTORY, f"{path} is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise ApiError(Code.NOT_A_REGULAR_FILE, f"{path} is not a regular file")
            fd = os.open(f"/proc/self/fd/{found}", os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as e:
            raise _failure(e, path) from None
        finally:
            os.close(found)
        return fd, os.fstat(fd).st_size

    def list_dir(self, path: str, depth: int) -> list[Entry]:
        parts = _parts(path)
        out: list[Entry] = []
        top = self._open(path, os.O_RDONLY | os.O_DIRECTORY, parts)
        try:
            self._walk(top, "/" + "/".join(parts), depth, out)
        finally:
            os.close(top)
        return sorted(out, key=lambda e: e["path"])

    def _walk(self, dirfd: int, at: str, depth: int, out: list[Entry]) -> None:
        names: list[str] = []
        with os.scandir(dirfd) as it:  # read as it goes: a box can make a directory of millions
            for e in it:
                if len(out) + len(names) >= MAX_ENTRIES:
                    raise ApiError(Code.TOO_MANY_ENTRIES,
                                   f"more than {MAX_ENTRIES} entries: list less deep, or deeper down")
                names.append(e.name)
        for name in names:
            if len(out) >= MAX_ENTRIES:
                raise ApiError(Code.TOO_MANY_ENTRIES, f"more than {MAX_ENTRIES} entries: list less deep, or deeper down")
            path = f"{at.rstrip('/')}/{name}"
            try:
                entry = self._entry(dirfd, name, path)
            except FileNotFoundError:
                continue  # gone meanwhile (a box writes the volume as it is listed)
            out.append(entry)
            if entry["type"] == "dir" and depth > 1:
                try:
                    sub = _openat2(dirfd, name, os.O_RDONLY | os.O_DIRECTORY)
                except OSError:
                    continue  # replaced by a link or a file meanwhile: not followed
                try:
                    self._walk(sub, path, depth - 1, out)
                finally:
                    os.close(sub)

    # --- writes -----------------------------------------------------------------------------------

    def make_dirs(self, path: str) -> tuple[Entry, bool]:
        """mkdir -p, each directory the box user's; False if it was a directory already."""
        parts = _parts(path)
        if not parts:
            return self.stat("/"), False
        created = False
        with self._root() as root:
            fd = os.dup(root)
            try:
                for part in parts:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                        os.chown(part, protocol.BOX_UID, protocol.BOX_GID, dir_fd=fd, follow_symlinks=False)
                        created = True
                    except FileExistsError:
                        pass
                    try:
                        nxt = _openat2(fd, part, os.O_PATH | os.O_DIRECTORY)
                    except OSError as e:
                        if e.errno == errno.ENOTDIR:
                            raise ApiError(Code.ALREADY_EXISTS, f"{path}: a file is in the way") from None
                        raise _failure(e, path) from None
                    os.close(fd)
                    fd = nxt
            except OSError as e:
                raise _failure(e, path) from None
            finally:
                os.close(fd)
        return self.stat(path), created

    def create_temp(self, path: str) -> tuple[int, int, str, str]:
        """For a write: the parents made, a new temporary file beside `path`. Answers the file's
        descriptor, its directory's, the temporary name and the final one."""
        parts = _parts(path)
        if not parts:
            raise ApiError(Code.IS_A_DIRECTORY, "/ is a directory")
        if len(parts) > 1:
            self.make_dirs("/" + "/".join(parts[:-1]))
        parent = self._open(path, os.O_PATH | os.O_DIRECTORY, parts[:-1])
        temp = f".{parts[-1][:200]}.hutch-{os.urandom(6).hex()}"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=parent)
            os.fchown(fd, protocol.BOX_UID, protocol.BOX_GID)
        except OSError as e:
            os.close(parent)
            raise _failure(e, path) from None
        return fd, parent, temp, parts[-1]

    @staticmethod
    def write_all(fd: int, data: bytes, path: str) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view):]
        except OSError as e:
            raise _failure(e, path) from None

    @staticmethod
    def finish(fd: int, parent: int, temp: str, final: str, path: str) -> None:
        """The temporary file renamed over `final`, which must not be a directory; else removed."""
        try:
            os.close(fd)
            try:
                st = os.stat(final, dir_fd=parent, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    raise ApiError(Code.IS_A_DIRECTORY, f"{path} is a directory")
            except FileNotFoundError:
                pass
            os.rename(temp, final, src_dir_fd=parent, dst_dir_fd=parent)
        except (OSError, ApiError) as e:
            try:
                os.unlink(temp, dir_fd=parent)
            except OSError:
                pass
            raise e if isinstance(e, ApiError) else _failure(e, path) from None
        finally:
            os.close(parent)

    @staticmethod
    def abandon(fd: int, parent: int, temp: str) -> None:
        try:
            os.close(fd)
            os.unlink(temp, dir_fd=parent)
        except OSError:
            pass
        finally:
            os.close(parent)

    def set_attrs(self, path: str, uid: int | None = None, gid: int | None = None, mode: int | None = None) -> Entry:
        """chown and chmod, never through a link; setuid and setgid bits are not given."""
        fd = self._open(path, os.O_PATH)
        try:
            target = f"/proc/self/fd/{fd}"  # the inode just opened, whatever the name holds now
            if uid is not None or gid is not None:
                os.chown(target, -1 if uid is None else uid, -1 if gid is None else gid)
            if mode is not None:
                os.chmod(target, mode & 0o1777)
        except OSError as e:
            raise _failure(e, path) from None
        finally:
            os.close(fd)
        return self.stat(path)

    def move(self, source: str, destination: str) -> Entry:
        src, dst = _parts(source), _parts(destination)
        if not src or not dst:
            raise ApiError(Code.INVALID_PATH, "the volume's root cannot be moved, nor replaced")
        if len(dst) > 1:
            self.make_dirs("/" + "/".join(dst[:-1]))
        with self._parent(src, source) as a, self._parent(dst, destination) as b:
            try:
                os.rename(src[-1], dst[-1], src_dir_fd=a, dst_dir_fd=b)
            except OSError as e:
                raise _failure(e, source) from None
        return self.stat(destination)

    def remove(self, path: str) -> None:
        """A file, link or special file, or a directory with all in it; nothing is followed."""
        parts = _parts(path)
        if not parts:
            raise ApiError(Code.INVALID_PATH, "the volume's root cannot be removed: remove what is in it")
        removed = [0]
        with self._parent(parts, path) as parent:
            try:
                self._remove_at(parent, parts[-1], 0, removed)
            except OSError as e:
                raise _failure(e, path) from None

    def _remove_at(self, dirfd: int, name: str, depth: int, removed: list[int]) -> None:
        removed[0] += 1
        if removed[0] > MAX_REMOVED or depth > MAX_DEPTH:
            raise ApiError(Code.TOO_MANY_ENTRIES, f"more than {MAX_REMOVED} entries, or deeper than {MAX_DEPTH}: "
                                                  "part was removed; remove the rest deeper down")
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=dirfd)
            return
        sub = _openat2(dirfd, name, os.O_RDONLY | os.O_DIRECTORY)
        try:
            while True:
                with os.scandir(sub) as it:
                    names = [e.name for _, e in zip(range(1024), it, strict=False)]
                if not names:
                    break
                for child in names:
                    try:
                        self._remove_at(sub, child, depth + 1, removed)
                    except FileNotFoundError:
                        pass
        finally:
            os.close(sub)
        os.rmdir(name, dir_fd=dirfd)


def _shown(name: str) -> str:
    """A name as an answer can carry it: bytes that are not UTF-8 (a box may make any) shown as U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _time(t: float) -> float:
    return max(0.0, min(t, 253402300799.0))  # a time datetime can hold, whatever a box set


def _who(uid: int) -> str:
    """The box's names: the host's own users are not the box's."""
    return {0: "root", protocol.BOX_UID: protocol.BOX_USER}.get(uid, str(uid))
