"""Filesystem operations of the agent: read, stat, list, mkdir -p, move, remove and watch (inotify).

Standard library only (and the agent's protocol). Two ways of acting, and why each is safe against a box user who swaps path
components for links while a call runs:

- For the box user, the calling thread takes the user's effective uid and gid (raw setresuid,
  setresgid and setgroups syscalls change only the calling thread's credentials; glibc's wrappers
  would change every thread's). The kernel then checks every step with the user's rights: a link the
  user plants can only lead where the user could go anyway. Real and saved ids stay root, so nothing
  running as the user may signal or trace the agent meanwhile, and the thread gets root back after.
- As root, a path is walked one name at a time from "/" with openat, following only links owned by
  root (the template's own, like /lib -> usr/lib); the last name is acted on relative to its
  directory's descriptor without following it. A name swapped for a link after its check fails
  (O_NOFOLLOW) instead of being followed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import stat
import struct
import sys
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

try:
    from hutch.guest import protocol as p
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import protocol as p  # type: ignore[import-not-found, no-redef]

MAX_LIST_ENTRIES = 10_000
MAX_LIST_BYTES = 8 * 2**20  # what one list answer may weigh, as JSON
MAX_DEPTH = 16
MAX_WATCHES = 4096  # directories one recursive watch follows
_NAMES_FILE_LIMIT = 4 * 2**20

# raw syscall numbers: setresuid, setresgid, setgroups (only the calling thread's credentials)
_SYSCALLS = {"x86_64": (117, 119, 116), "aarch64": (147, 149, 159)}
_KEEP = 0xFFFFFFFF  # (uid_t)-1: leave this id as it is

_libc: Any = None


def _ctypes() -> ModuleType:
    """ctypes, imported at the first call that needs it: at boot it cost ~15 ms of every box's."""
    import ctypes

    return ctypes


def _c() -> Any:
    global _libc
    if _libc is None:
        _libc = _ctypes().CDLL(None, use_errno=True)
    return _libc


def _errno() -> int:
    return int(_ctypes().get_errno())


class UnsafePath(OSError):
    """The path goes through a link the box's user made (acting as root)."""


class TooMany(OSError):
    """A listing past MAX_LIST_ENTRIES or MAX_LIST_BYTES."""


class CredentialsLost(BaseException):
    """The thread could not take root back: it must not serve anything else (ends the thread)."""


# --- acting as the box user ------------------------------------------------------------------------

def _syscall(nr: int, *args: Any) -> None:
    if _c().syscall(nr, *args) != 0:
        e = _errno()
        raise OSError(e, os.strerror(e))


@contextlib.contextmanager
def acting_as(uid: int, gid: int) -> Iterator[None]:
    """Run the block with this thread's effective ids (and no supplementary groups) the user's."""
    if uid == 0:
        yield
        return
    setresuid, setresgid, setgroups = _SYSCALLS[os.uname().machine]
    groups = os.getgroups()
    _syscall(setgroups, 0, None)
    try:
        _syscall(setresgid, _KEEP, gid, _KEEP)
        _syscall(setresuid, _KEEP, uid, _KEEP)
        yield
    finally:
        try:
            _syscall(setresuid, _KEEP, 0, _KEEP)
            _syscall(setresgid, _KEEP, 0, _KEEP)
            _syscall(setgroups, len(groups), (_ctypes().c_uint * len(groups))(*groups) if groups else None)
        except OSError as e:
            raise CredentialsLost(f"could not take root back: {e}") from None


# --- walking a path ------------------------------------------------------------------------------

def parts_of(path: str) -> list[str]:
    return [c for c in path.split("/") if c not in ("", ".")]


def open_dir(parts: list[str], trust_all: bool, make: tuple[int, int] | None = None) -> int:
    """An O_PATH descriptor of the directory the names lead to from "/". Links are followed only if
    owned by root, or any with `trust_all` (when the thread acts with the user's own rights). With
    `make`, missing directories are made and given to that uid and gid (mkdir -p)."""
    queue = list(parts)
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    links = 0
    try:
        while queue:
            part = queue.pop(0)
            if part == ".":
                continue
            try:
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if make is None:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                os.chown(part, *make, dir_fd=fd, follow_symlinks=False)
            else:
                if stat.S_ISLNK(st.st_mode):
                    links += 1
                    if st.st_uid != 0 and not trust_all:
                        raise UnsafePath(part)
                    if links > 40:
                        raise OSError(errno.ELOOP, "too many levels of links")
                    target = os.readlink(part, dir_fd=fd)
                    queue = [c for c in target.split("/") if c] + queue
                    if target.startswith("/"):
                        os.close(fd)
                        fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                    continue
            # O_NOFOLLOW: a name swapped for a link since the check fails here instead of being followed
            try:
                next_fd = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as e:
                if e.errno == errno.ELOOP and not trust_all:
                    raise UnsafePath(part) from None
                raise
            os.close(fd)
            fd = next_fd
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_parent(path: str, trust_all: bool, make: tuple[int, int] | None = None) -> tuple[int, str]:
    """The directory that holds `path` (an O_PATH descriptor) and the last name ("" for "/")."""
    parts = parts_of(path)
    if not parts:
        return os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), ""
    return open_dir(parts[:-1], trust_all, make), parts[-1]


_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # O_NONBLOCK: opening a FIFO must not wait for a writer


def open_file(path: str, trust_all: bool) -> int:
    """A descriptor to read what `path` leads to (a file, or anything: the caller looks with
    fstat). With `trust_all` (the thread acting as the user) the kernel follows every link with
    the user's rights; else the walk follows only root's links, the last name's too."""
    if trust_all:
        return os.open(path, _READ)
    parts = parts_of(path)
    for _ in range(40):
        if not parts:
            return os.open("/", _READ)
        fd = open_dir(parts[:-1], trust_all=False)
        try:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISLNK(st.st_mode):
                try:  # O_NOFOLLOW: a name swapped for a link since the check fails here
                    return os.open(parts[-1], _READ | os.O_NOFOLLOW, dir_fd=fd)
                except OSError as e:
                    if e.errno == errno.ELOOP:
                        raise UnsafePath(parts[-1]) from None
                    raise
            if st.st_uid != 0:
                raise UnsafePath(parts[-1])
            target = os.readlink(parts[-1], dir_fd=fd)
        finally:
            os.close(fd)
        parts = parts_of(target) if target.startswith("/") else [*parts[:-1], *parts_of(target)]
    raise OSError(errno.ELOOP, "too many levels of links")


def open_tree(path: str, trust_all: bool) -> int:
    """The directory `path` leads to, opened for listing (so a directory the acting user may not
    read fails here, before anything is sent), walked as open_dir walks."""
    top = open_dir(parts_of(path), trust_all)
    try:
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=top)
    finally:
        os.close(top)


def walk_files(top: int) -> Iterator[tuple[str, int | None, os.stat_result]]:
    """Everything under the directory `top` (a descriptor), parents first, sorted by name: for a
    directory (name relative to top, None, its stat), for a regular file (name, a descriptor
    the caller closes, its stat). Nothing is followed: each directory is opened relative to its
    parent and checked to be what was listed (os.fwalk), each file with O_NOFOLLOW, so a link
    swapped in anywhere leads nowhere. What cannot be opened, links, devices and pipes are left
    out."""
    for dirpath, dirs, files, dir_fd in os.fwalk(".", dir_fd=top):
        dirs.sort()
        rel = os.path.normpath(dirpath)
        if rel != ".":
            yield rel, None, os.fstat(dir_fd)
        for name in sorted(files):
            try:
                fd = os.open(name, _READ | os.O_NOFOLLOW, dir_fd=dir_fd)
            except OSError:
                continue
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                continue
            os.set_blocking(fd, True)
            yield os.path.normpath(os.path.join(rel, name)), fd, st


# --- entries -------------------------------------------------------------------------------------

class _Names:
    """uid -> user name and gid -> group name, from the box's /etc/passwd and /etc/group (read
    again when they change); a number without a name is itself."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.key: tuple[int, int] | None = None
        self.names: dict[int, str] = {}
        self.lock = threading.Lock()

    def get(self, ident: int) -> str:
        with self.lock:
            try:
                st = os.stat(self.path)
                if (st.st_mtime_ns, st.st_size) != self.key:
                    self.key, self.names = (st.st_mtime_ns, st.st_size), self._read()
            except OSError:
                self.key, self.names = None, {}
            return self.names.get(ident, str(ident))

    def _read(self) -> dict[int, str]:
        names: dict[int, str] = {}
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as f:
            text = f.read(_NAMES_FILE_LIMIT).decode("utf-8", "replace")
        for line in text.splitlines():
            fields = line.split(":")
            if len(fields) >= 3 and fields[2].isdigit() and fields[0]:
                names.setdefault(int(fields[2]), fields[0][:64])
        return names


USERS = _Names("/etc/passwd")
GROUPS = _Names("/etc/group")


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def entry(dir_fd: int, name: str, path: str, st: os.stat_result) -> dict[str, Any]:
    target = link = None
    if stat.S_ISLNK(st.st_mode):
        with contextlib.suppress(OSError):
            target = os.readlink(name, dir_fd=dir_fd)
        link = _resolve(path)
    out = {"name": name or "/", "path": path, "type": _kind(st.st_mode), "size": st.st_size,
           "mode": stat.S_IMODE(st.st_mode), "permissions": stat.filemode(st.st_mode),
           "owner": USERS.get(st.st_uid), "group": GROUPS.get(st.st_gid), "mtime": st.st_mtime,
           "target": target, "link": link}
    if not stat.S_ISLNK(st.st_mode):  # user.* xattrs are not allowed on links
        meta = read_metadata(f"/proc/self/fd/{dir_fd}/{name}" if name else f"/proc/self/fd/{dir_fd}")
        if meta:
            out["metadata"] = meta
    return out


def _resolve(path: str) -> dict[str, Any] | None:
    """Where a link leads with every link on the way resolved, and what is there; None if it
    leads nowhere. Only read (readlink and stat), with the acting thread's rights: as the box
    user the kernel checks each step; as root it describes, never opens, what the links name."""
    try:
        resolved = os.path.realpath(path, strict=True)
        st = os.stat(resolved)
    except (OSError, ValueError):
        return None
    return {"path": resolved, "type": _kind(st.st_mode), "mode": stat.S_IMODE(st.st_mode)}


# --- metadata: E2B's `user.e2b.<key>` extended attributes (protocol.metadata_problem: their rules) --

def write_metadata(fd: int, meta: dict[str, str]) -> None:
    """Set the file's metadata (a new file: nothing to clear). A filesystem without xattrs
    refuses it (ENOTSUP) rather than drop it silently."""
    for key, value in meta.items():
        os.setxattr(fd, p.METADATA_PREFIX + key, value.encode())


def read_metadata(where: str | int) -> dict[str, str] | None:
    """The `user.e2b.*` attributes of a file or directory (not followed if a link), prefix
    stripped; None if there are none. What is not UTF-8, or past p.MAX_METADATA_BYTES (set in the
    box by other means), is left out."""
    try:
        names = os.listxattr(where, follow_symlinks=False) if isinstance(where, str) else os.listxattr(where)
    except OSError:
        return None
    meta: dict[str, str] = {}
    total = 0
    for attr in sorted(names):
        if not attr.startswith(p.METADATA_PREFIX):
            continue
        try:
            raw = (os.getxattr(where, attr, follow_symlinks=False) if isinstance(where, str)
                   else os.getxattr(where, attr))
            value = raw.decode()
            attr.encode()  # listxattr's surrogate-escaped names are not UTF-8
        except (OSError, UnicodeError):
            continue
        total += len(attr) + len(raw)
        if total > p.MAX_METADATA_BYTES:
            break
        meta[attr[len(p.METADATA_PREFIX):]] = value
    return meta or None


def _join(parts: list[str]) -> str:
    return "/" + "/".join(parts)


# --- the operations (each raises OSError; the caller turns it into an answer) ---------------------

def stat_path(path: str, trust_all: bool) -> dict[str, Any]:
    fd, name = open_parent(path, trust_all)
    try:
        st = os.stat(name or ".", dir_fd=fd, follow_symlinks=False)
        return entry(fd, name, _join(parts_of(path)), st)
    finally:
        os.close(fd)


def list_dir(path: str, depth: int, trust_all: bool) -> list[dict[str, Any]]:
    """The entries under `path` (a directory, or a link to one), `depth` levels down, sorted by
    name in each directory, parents before their children. Links inside are listed, never
    followed; subdirectories that cannot be read are listed but not entered."""
    parts = parts_of(path)
    top = open_dir(parts, trust_all)
    out: list[dict[str, Any]] = []
    weight = [0]

    def walk(dir_fd: int, prefix: list[str], level: int) -> None:
        rfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            for name in sorted(os.listdir(rfd)):
                try:
                    st = os.stat(name, dir_fd=rfd, follow_symlinks=False)
                except OSError:
                    continue  # gone meanwhile
                e = entry(rfd, name, _join([*prefix, name]), st)
                out.append(e)
                weight[0] += len(json.dumps(e)) + 2
                if len(out) > MAX_LIST_ENTRIES or weight[0] > MAX_LIST_BYTES:
                    raise TooMany(errno.E2BIG, f"more than {MAX_LIST_ENTRIES} entries (or {MAX_LIST_BYTES} bytes)")
                if stat.S_ISDIR(st.st_mode) and level < depth:
                    try:
                        sub = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=rfd)
                    except OSError:
                        continue
                    try:
                        walk(sub, [*prefix, name], level + 1)
                    except PermissionError:
                        pass  # listed, not entered
                    finally:
                        os.close(sub)
        finally:
            os.close(rfd)

    try:
        walk(top, parts, 1)
    finally:
        os.close(top)
    return out


def make_dir(path: str, trust_all: bool, owner: tuple[int, int]) -> tuple[dict[str, Any], bool]:
    """mkdir -p; False if it was a directory already. An existing non-directory: FileExistsError."""
    fd, name = open_parent(path, trust_all, make=owner)
    try:
        created = False
        if name:
            try:  # looked at first: mkdir in a directory the user may not write says EACCES, not EEXIST
                exists = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                    os.chown(name, *owner, dir_fd=fd, follow_symlinks=False)
                    created = True
                except FileExistsError:  # made meanwhile
                    exists = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if not created and not stat.S_ISDIR(exists.st_mode):
                raise FileExistsError(errno.EEXIST, f"{path} exists and is not a directory")
        st = os.stat(name or ".", dir_fd=fd, follow_symlinks=False)
        return entry(fd, name, _join(parts_of(path)), st), created
    finally:
        os.close(fd)


def move(source: str, destination: str, trust_all: bool) -> dict[str, Any]:
    if not parts_of(source) or not parts_of(destination):
        raise IsADirectoryError(errno.EBUSY, "/ cannot be moved or replaced")
    sfd, sname = open_parent(source, trust_all)
    try:
        dfd, dname = open_parent(destination, trust_all)
        try:
            os.stat(sname, dir_fd=sfd, follow_symlinks=False)  # a missing source is about the source
            os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
            st = os.stat(dname, dir_fd=dfd, follow_symlinks=False)
            return entry(dfd, dname, _join(parts_of(destination)), st)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)


def remove(path: str, trust_all: bool) -> None:
    """A file or link (never what it points to), or a directory and everything in it."""
    fd, name = open_parent(path, trust_all)
    try:
        if not name:
            raise IsADirectoryError(errno.EBUSY, "/ cannot be removed")
        # looked at first: a missing name is 404 even where the user may not write
        if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
            # rmtree opens every directory relative to the last and checks it is what lstat saw:
            # links inside are removed, never followed
            import shutil  # here: it is slow to import, and boots must be fast

            shutil.rmtree(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


# --- watch ---------------------------------------------------------------------------------------

IN_MODIFY, IN_ATTRIB, IN_MOVED_FROM, IN_MOVED_TO = 0x2, 0x4, 0x40, 0x80
IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF = 0x100, 0x200, 0x400, 0x800
IN_IGNORED, IN_ISDIR, IN_ONLYDIR = 0x8000, 0x40000000, 0x01000000
IN_NONBLOCK, IN_CLOEXEC = 0o4000, 0o2000000
_MASK = IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then the name, NUL-padded
# what each inotify event is called (fsnotify's words, which E2B's clients know)
_KINDS = ((IN_CREATE | IN_MOVED_TO, "create"), (IN_MODIFY, "write"), (IN_DELETE, "remove"),
          (IN_MOVED_FROM, "rename"), (IN_ATTRIB, "chmod"))


# A file write goes to a temp file beside the target, renamed over it when complete (readers never
# see half a file). Its name says which agent wrote it and whether the target was there before, so
# a watch shows the write as E2B's envd would (create if new, chmod, write of the real name) and
# nothing of the temp file.
_TEMP_MARK = ".hutch-"


def temp_name(name: str, existed: bool) -> str:
    return f".{name[:200]}{_TEMP_MARK}{os.getpid()}-{time.monotonic_ns()}-{'w' if existed else 'c'}"


def _temp_write(name: str) -> str | None:
    """For one of this agent's temp names, "w" (it replaces a file) or "c" (it makes one)."""
    at = name.rfind(_TEMP_MARK)
    if not name.startswith(".") or at < 1:
        return None
    pid, _, rest = name[at + len(_TEMP_MARK):].partition("-")
    stamp, _, kind = rest.partition("-")
    if pid != str(os.getpid()) or not stamp.isdigit() or kind not in ("w", "c"):
        return None
    return kind


class Watch:
    """inotify on a directory (and, recursively, the directories that are or come to be under it),
    opened as root through `open_dir` (only root's links followed). Subdirectories are opened one
    name at a time from the watched one without following links, and watched through their
    descriptor (/proc/self/fd), so a link swapped in cannot point the watch elsewhere. No
    descriptor is held between events: a held directory is not deleted, and its IN_DELETE_SELF,
    which ends the watch, would never come."""

    def __init__(self, path: str, recursive: bool) -> None:
        self.parts, self.recursive = parts_of(path), recursive
        self.fd = _c().inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            e = _errno()
            raise OSError(e, f"inotify: {os.strerror(e)}")
        self.dirs: dict[int, list[str]] = {}  # watch descriptor -> the directory, relative to the root
        self.writes: dict[int, str] = {}  # rename cookie -> "w"/"c", of a temp file moved away
        self.ended = False
        try:
            root = open_dir(self.parts, trust_all=False)
            try:
                st = os.fstat(root)
                if not stat.S_ISDIR(st.st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, path)
                self.ident = (st.st_dev, st.st_ino)
                self._add(root, [], top=True)
                if recursive:
                    self._add_tree(root, [], [])
            finally:
                os.close(root)
        except BaseException:
            self.close()
            raise

    def _add(self, dir_fd: int, rel: list[str], top: bool = False) -> None:
        if len(self.dirs) >= MAX_WATCHES:
            return
        wd = _c().inotify_add_watch(self.fd, f"/proc/self/fd/{dir_fd}".encode(), _MASK | IN_ONLYDIR)
        if wd < 0:
            if top:
                e = _errno()
                raise OSError(e, os.strerror(e))
            return  # unreadable, or gone: not followed
        self.dirs[wd] = rel

    def _add_tree(self, dir_fd: int, rel: list[str], found: list[str] | None) -> None:
        """Watch the subdirectories under dir_fd (watched itself already), depth first. With
        `found`, the names already there are added to it (they came before the watch did)."""
        try:
            rfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return
        try:
            for name in sorted(os.listdir(rfd)):
                if found is not None:
                    found.append("/".join([*rel, name]))
                self._add_sub(rfd, [*rel, name], found)
        finally:
            os.close(rfd)

    def _add_sub(self, parent_fd: int, rel: list[str], found: list[str] | None) -> None:
        try:
            sub = os.open(rel[-1], os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
        except OSError:
            return  # not a directory, a link, or gone
        try:
            self._add(sub, rel)
            self._add_tree(sub, rel, found)
        finally:
            os.close(sub)

    def _open_rel(self, rel: list[str]) -> int | None:
        """The watched directory's subdirectory `rel`, if the path still leads to the watched one."""
        try:
            fd = open_dir(self.parts, trust_all=False)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != self.ident:
                raise OSError(errno.ESTALE, "moved")
            for name in rel:
                next_fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = next_fd
        except OSError:
            os.close(fd)
            return None
        return fd

    def read(self, timeout: float) -> list[tuple[str, str]]:
        """The events of the next `timeout` seconds at most, as (name relative to the root, kind)."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return []
        try:
            data = os.read(self.fd, 64 * 1024)
        except BlockingIOError:
            return []
        out: list[tuple[str, str]] = []
        pos = 0
        while pos + _EVENT.size <= len(data):
            wd, mask, cookie, size = _EVENT.unpack_from(data, pos)
            raw = data[pos + _EVENT.size: pos + _EVENT.size + size]
            pos += _EVENT.size + size
            name = raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            rel = self.dirs.get(wd)
            if rel is None:
                continue
            if mask & IN_IGNORED:
                del self.dirs[wd]
                self.ended = self.ended or not rel  # the watched directory itself is gone
                continue
            if not rel and mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                self.ended = True
                continue
            if not name:
                continue
            full = "/".join([*rel, name])
            write = _temp_write(name)
            if write is not None:  # our temp file: nothing shows, its rename below becomes the write
                if mask & IN_MOVED_FROM:
                    if len(self.writes) >= 1024:
                        self.writes.clear()
                    self.writes[cookie] = write
                continue
            if mask & IN_MOVED_TO and (write := self.writes.pop(cookie, "")):
                out.extend((full, kind) for kind in (("create", "chmod", "write") if write == "c" else ("chmod", "write")))
                continue
            for bits, kind in _KINDS:
                if mask & bits:
                    out.append((full, kind))
            if self.recursive and mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
                parent = self._open_rel(rel)
                if parent is not None:
                    found: list[str] = []
                    try:
                        self._add_sub(parent, [*rel, name], found)
                    finally:
                        os.close(parent)
                    out.extend((n, "create") for n in found)
        return [(n.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), k) for n, k in out]

    def entry(self, name: str) -> dict[str, Any] | None:
        """What is at `name` (relative to the root) now, as root sees it; None if nothing is."""
        try:
            return stat_path(_join([*self.parts, *parts_of(name)]), trust_all=False)
        except OSError:
            return None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
