"""The file routes: read a file, write one (with its metadata), and zip a directory's tree.

Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
import time
from typing import IO, TYPE_CHECKING, cast

try:
    from hutch.guest import fsops
    from hutch.guest import launch as L
    from hutch.guest import protocol as p
    from hutch.guest.exchange import Exchange
    from hutch.guest.routes_fs import as_user
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fsops  # type: ignore[import-not-found, no-redef]
    import launch as L  # type: ignore[import-not-found, no-redef]
    import protocol as p  # type: ignore[import-not-found, no-redef]
    from exchange import Exchange  # type: ignore[import-not-found, no-redef]
    from routes_fs import as_user  # type: ignore[import-not-found, no-redef]

if TYPE_CHECKING:
    import zipfile  # imported where it is used: it is slow to import, and boots must be fast

CHUNK = L.CHUNK


def read_file(ex: Exchange) -> None:
    """The file's bytes, read as the box user (the kernel checking each step, so a link the
    user planted leads nowhere the user could not read) unless user=root."""
    path = ex.path_arg()
    fd = as_user(lambda trust: fsops.open_file(path, trust), ex.query().get("user"), path)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise p.Refusal(p.ERR_IS_DIR, f"is a directory: {path}")
        raise p.Refusal(p.ERR_NOT_REGULAR, f"not a regular file: {path}")  # may never end
    os.set_blocking(fd, True)
    with open(fd, "rb") as f:
        if st.st_size == 0:  # /proc and /sys files say 0 and still have content: read to EOF
            ex.start_chunked("application/octet-stream")
            while data := f.read(CHUNK):
                ex.chunk(data)
            ex.end_chunked()
            return
        ex.send_response(200)
        ex.send_header("Content-Type", "application/octet-stream")
        ex.send_header("Content-Length", str(st.st_size))
        ex.end_headers()
        remaining = st.st_size  # a file growing meanwhile must not break the framing
        while remaining:
            data = f.read(min(CHUNK, remaining))
            if not data:
                break
            ex.wfile.write(data)
            remaining -= len(data)
        if remaining:  # it shrank: the declared length cannot be honoured
            ex.close_connection = True


def write_file(ex: Exchange) -> None:
    """The body becomes the file, whole or not at all (written beside it, then renamed over it),
    owned by the box user unless user=root; `metadata` (a JSON object) is stored with it."""
    path = ex.path_arg()
    query = ex.query()
    uid, gid = (0, 0) if query.get("user") == "root" else (p.BOX_UID, p.BOX_GID)
    try:
        meta = json.loads(query.get("metadata") or "{}")
    except ValueError:
        meta = None
    problem = p.metadata_problem(meta)
    if problem:  # refused before anything is made
        raise p.Refusal(p.ERR_BAD_REQUEST, problem)
    try:
        dir_fd, name = _open_parent(path, uid, gid)
    except fsops.UnsafePath as e:
        raise p.Refusal(p.ERR_UNSAFE_PATH, f"{path} goes through a link the box's user made ({e})") from None
    except NotADirectoryError:
        raise p.Refusal(p.ERR_NOT_DIR, f"a parent of {path} is not a directory") from None
    except OSError as e:
        raise p.Refusal(p.ERR_IO, f"{path}: {e.strerror}") from None
    try:
        size = _replace(ex, dir_fd, name, path, (uid, gid), meta)
    except NotADirectoryError:
        raise p.Refusal(p.ERR_NOT_DIR, f"a parent of {path} is not a directory") from None
    except ConnectionError:  # the host went away mid-body: nobody to answer
        ex.close_connection = True
        return
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            raise p.Refusal(p.ERR_IO, f"{path}: this filesystem does not keep metadata (xattrs)") from None
        raise p.Refusal(p.ERR_IO, f"{path}: {e.strerror}") from None
    finally:
        os.close(dir_fd)
    ex.answer_json({"path": path, "size": size, "metadata": len(meta)})  # how many keys it stored


def _replace(ex: Exchange, dir_fd: int, name: str, path: str, owner: tuple[int, int], meta: dict[str, str]) -> int:
    """Write the body to a new file beside `name` in dir_fd and rename it over `name`; its size."""
    existed = False
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise p.Refusal(p.ERR_IS_DIR, f"is a directory: {path}")
        existed = True
    tmp = fsops.temp_name(name, existed)  # a watch shows the write as the file's own
    size = 0
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        with open(fd, "wb") as f:
            for data in ex.body():
                f.write(data)
                size += len(data)
            os.fchown(fd, *owner)
            os.fchmod(fd, 0o644)
            fsops.write_metadata(fd, meta)  # on the new inode: an overwrite drops the old set
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # readers never see half a file
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    return size


def _open_parent(path: str, uid: int, gid: int) -> tuple[int, str]:
    """Open the directory that is to hold `path` (an fd) and return it with the file's name,
    making missing directories on the way (given to uid/gid), like mkdir -p.

    The walk (fsops.open_dir) goes one name at a time, relative to the directory opened last, and
    follows only links owned by root (the template's own, like /lib -> usr/lib). The agent writes
    as root on the owner's behalf; a link the box's user planted (~/proj -> /etc) must not steer
    that write.
    """
    return fsops.open_parent(path, trust_all=False, make=(uid, gid))


def zip_dir(ex: Exchange) -> None:
    """A zip of the directory's tree as the box user sees it (walked with the user's rights:
    what the user may not read is left out) unless user=root; links are never followed."""
    path = ex.path_arg()
    user = ex.query().get("user")
    top = as_user(lambda trust: fsops.open_tree(path, trust), user, path)
    import zipfile  # only here: it is slow to import, and boots must be fast

    try:
        with fsops.acting_as(*((0, 0) if user == "root" else (p.BOX_UID, p.BOX_GID))):
            ex.start_chunked("application/zip")
            out = _ChunkWriter(ex)
            with zipfile.ZipFile(cast(IO[bytes], out), "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
                for name, fd, st in fsops.walk_files(top):
                    if fd is None:
                        zf.writestr(_zip_info(name, st), b"")
                        continue
                    with open(fd, "rb") as f, zf.open(_zip_info(name, st), "w") as dst:
                        while data := f.read(CHUNK):
                            dst.write(data)
            out.flush_all()
            ex.end_chunked()
    finally:
        os.close(top)


class _ChunkWriter:
    """A write-only stream that sends what it is given as HTTP chunks (zipfile writes to it)."""

    def __init__(self, ex: Exchange) -> None:
        self.ex = ex
        self.buf = bytearray()
        self.pos = 0

    def write(self, data: bytes) -> int:
        self.buf += data
        self.pos += len(data)
        if len(self.buf) >= CHUNK:
            self.flush_all()
        return len(data)

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        pass

    def flush_all(self) -> None:
        self.ex.chunk(bytes(self.buf))
        self.buf.clear()

    def seekable(self) -> bool:
        return False


def _zip_info(name: str, st: os.stat_result) -> zipfile.ZipInfo:
    """A zip entry for a file or directory, from its fstat (never a second look by path)."""
    import zipfile

    is_dir = stat.S_ISDIR(st.st_mode)
    when = max(time.localtime(st.st_mtime)[:6], (1980, 1, 1, 0, 0, 0))  # zip's dates start in 1980
    info = zipfile.ZipInfo(name + "/" if is_dir else name, when)
    info.external_attr = (st.st_mode & 0xFFFF) << 16 | (0x10 if is_dir else 0)  # 0x10: MS-DOS's directory bit
    if not is_dir:
        info.compress_type = zipfile.ZIP_DEFLATED
        info.file_size = st.st_size  # so a file past 2 GiB is written as zip64
    return info

