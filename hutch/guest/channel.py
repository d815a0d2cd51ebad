"""The agent's channel server: exec and files, over HTTP/1.1 on the box's Unix socket.

Standard library only; started by `agent.py`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import socket
import socketserver
import stat
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, cast
from urllib.parse import parse_qs, urlsplit

try:
    from hutch.guest import fsops, http1
    from hutch.guest import launch as L
    from hutch.guest import protocol as p
    from hutch.guest.procs import Proc, ProcError, ProcTable, parse_resize, parse_signal
    from hutch.guest.relay import Relay, pipe
    from hutch.guest.spawner import Spawner, release_host_stdio
    from hutch.guest.sudod import SudoService
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fsops  # type: ignore[import-not-found, no-redef]
    import http1  # type: ignore[import-not-found, no-redef]
    import launch as L  # type: ignore[import-not-found, no-redef]
    import protocol as p  # type: ignore[import-not-found, no-redef]
    from procs import Proc, ProcError, ProcTable, parse_resize, parse_signal  # type: ignore[import-not-found, no-redef]
    from relay import Relay, pipe  # type: ignore[import-not-found, no-redef]
    from spawner import Spawner, release_host_stdio  # type: ignore[import-not-found, no-redef]
    from sudod import SudoService  # type: ignore[import-not-found, no-redef]

if TYPE_CHECKING:
    import zipfile  # imported where it is used: it is slow to import, and boots must be fast

SPAWNER: Spawner  # set by serve()
PROCS: ProcTable

CHUNK = L.CHUNK
WAKE_POLL_SECONDS = 0.01  # how often a quiesced agent looks for the wake file (it is not running while paused)
# How long the listener waits between looks at a stop request: a quiesce wakes it with a connection,
# and any timer wakes the sentry (each wake of a box costs ~1 ms of host CPU under systrap)
IDLE_WAIT_SECONDS = 3600.0
MAX_STDIN_BODY = 1 * 2**20
TUNNEL_GRACE = 30.0  # after the host ends a tunnel, how long the box's server may still answer


class ChannelServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The listener, and every connection it accepted, so a pause can close them all: gVisor
    cannot checkpoint a socket that is bound to, or connected through, a host path."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, path: str) -> None:
        self.connections: set[socket.socket] = set()
        self.lock = threading.Lock()
        super().__init__(path, Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_all(self) -> None:
        self.server_close()
        with self.lock:
            for conn in self.connections:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                # close() would leave the fd open while a handler's file objects hold the socket:
                # detach and close the fd itself, so no host socket is left to checkpoint
                with contextlib.suppress(OSError):
                    os.close(conn.detach())
            self.connections.clear()


class Handler(http1.Handler):
    server_version = f"hutch-agent/{p.VERSION}"

    # --- plumbing -------------------------------------------------------------------------------

    def _query(self) -> dict[str, str]:
        return {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: str, message: str) -> None:
        self.discard_body()  # the host is still sending it, and waits to finish before it reads
        self._json(status, {"code": code, "message": message})

    def _start_chunked(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def _path_arg(self) -> str | None:
        path = self._query().get("path", "")
        problem = p.path_problem(path)
        if problem:
            self._error(400, p.ERR_BAD_PATH, problem)
            return None
        return path

    # --- routes ---------------------------------------------------------------------------------

    def do_GET(self) -> None:
        route = urlsplit(self.path).path
        if route == p.HEALTH:
            self._json(200, {"version": p.VERSION, "pid": os.getpid()})
        elif route == p.FILES:
            self._read_file()
        elif route == p.DIR_ZIP:
            self._zip_dir()
        elif route == p.PROCS:
            self._json(200, {"procs": [proc.info() for proc in PROCS.running()]})
        elif route in (p.FS_STAT, p.FS_LIST):
            self._fs_read(route)
        elif route == p.FS_WATCH:
            self._watch()
        elif route.startswith(p.PROCS + "/"):
            self._proc_route(route, "GET")
        else:
            self._error(404, p.ERR_BAD_REQUEST, "no such route")

    def do_PUT(self) -> None:
        if urlsplit(self.path).path == p.FILES:
            self._write_file()
        else:
            self._error(404, p.ERR_BAD_REQUEST, "no such route")

    def do_POST(self) -> None:
        route = urlsplit(self.path).path
        if route == p.EXEC:
            self._exec()
        elif route == p.PROCS:
            self._spawn()
        elif route.startswith(p.PROCS + "/"):
            self._proc_route(route, "POST")
        elif route == p.TUNNEL:
            self._tunnel()
        elif route in (p.FS_MKDIR, p.FS_MOVE, p.FS_REMOVE):
            self._fs_change(route)
        elif route == p.QUIESCE:
            self._json(200, {"quiescing": True})
            self.close_connection = True
            threading.Thread(target=_stop_serving, args=(self.server,), daemon=True).start()
        else:
            self._error(404, p.ERR_BAD_REQUEST, "no such route")

    # --- tunnels (preview URLs) -----------------------------------------------------------------

    def _tunnel(self) -> None:
        """Connect to 127.0.0.1:port in the box and relay bytes both ways for the rest of this
        connection. The host sends nothing after its request until it has the answer's head, so
        nothing of the tunnel's bytes sits in the request buffer. A pause ends it (close_all)."""
        port = self._query().get("port", "")
        if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            return self._error(400, p.ERR_BAD_REQUEST, "port must be 1-65535")
        try:
            target = socket.create_connection(("127.0.0.1", int(port)), timeout=5)
        except OSError as e:
            return self._error(502, p.ERR_PORT_CLOSED, f"nothing listens on port {port} in the box: {e.strerror or e}")
        target.settimeout(None)
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        self.wfile.flush()
        outward = threading.Thread(target=pipe, args=(target, self.connection), daemon=True)
        outward.start()
        try:
            while data := self.rfile.read1(CHUNK):
                target.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)
        outward.join(TUNNEL_GRACE)  # the box's server may still be answering
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_RDWR)  # one that neither answers nor closes holds nothing for ever
        outward.join()
        target.close()

    # --- files ----------------------------------------------------------------------------------

    def _read_file(self) -> None:
        """The file's bytes, read as the box user (the kernel checking each step, so a link the
        user planted leads nowhere the user could not read) unless user=root."""
        path = self._path_arg()
        if path is None:
            return
        fd = self._fs_call(lambda trust: fsops.open_file(path, trust), self._query().get("user"), path)
        if fd is None:
            return
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            if stat.S_ISDIR(st.st_mode):
                return self._error(400, p.ERR_IS_DIR, f"is a directory: {path}")
            return self._error(400, p.ERR_NOT_REGULAR, f"not a regular file: {path}")  # may never end
        os.set_blocking(fd, True)
        with open(fd, "rb") as f:
            if st.st_size == 0:  # /proc and /sys files say 0 and still have content: read to EOF
                self._start_chunked("application/octet-stream")
                while data := f.read(CHUNK):
                    self._chunk(data)
                self._end_chunked()
                return None
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(st.st_size))
            self.end_headers()
            remaining = st.st_size  # a file growing meanwhile must not break the framing
            while remaining:
                data = f.read(min(CHUNK, remaining))
                if not data:
                    break
                self.wfile.write(data)
                remaining -= len(data)
            if remaining:  # it shrank: the declared length cannot be honoured
                self.close_connection = True
        return None

    def _write_file(self) -> None:
        path = self._path_arg()
        if path is None:
            return
        query = self._query()
        as_root = query.get("user") == "root"
        uid, gid = (0, 0) if as_root else (p.BOX_UID, p.BOX_GID)
        try:
            meta = json.loads(query.get("metadata") or "{}")
        except ValueError:
            meta = None
        problem = p.metadata_problem(meta)
        if problem:  # refused before anything is made
            return self._error(400, p.ERR_BAD_REQUEST, problem)
        try:
            dir_fd, name = _open_parent(path, uid, gid)
        except _UnsafePath as e:
            return self._error(400, p.ERR_UNSAFE_PATH, f"{path} goes through a link the box's user made ({e})")
        except NotADirectoryError:
            return self._error(400, p.ERR_NOT_DIR, f"a parent of {path} is not a directory")
        except OSError as e:
            return self._error(400, p.ERR_IO, f"{path}: {e.strerror}")
        try:
            existed = False
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                    return self._error(400, p.ERR_IS_DIR, f"is a directory: {path}")
                existed = True
            tmp = fsops.temp_name(name, existed)  # a watch shows the write as the file's own
            size = 0
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                             dir_fd=dir_fd)
                with open(fd, "wb") as f:
                    for data in self.body():
                        f.write(data)
                        size += len(data)
                    os.fchown(fd, uid, gid)
                    os.fchmod(fd, 0o644)
                    fsops.write_metadata(fd, meta)  # on the new inode: an overwrite drops the old set
                os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # readers never see half a file
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
                raise
            finally:
                os.close(dir_fd)
        except NotADirectoryError:
            return self._error(400, p.ERR_NOT_DIR, f"a parent of {path} is not a directory")
        except ConnectionError:
            self.close_connection = True
            return None
        except OSError as e:
            if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
                return self._error(400, p.ERR_IO, f"{path}: this filesystem does not keep metadata (xattrs)")
            return self._error(400, p.ERR_IO, f"{path}: {e.strerror}")
        self._json(200, {"path": path, "size": size, "metadata": len(meta)})  # how many keys it stored
        return None

    def _zip_dir(self) -> None:
        """A zip of the directory's tree as the box user sees it (walked with the user's rights:
        what the user may not read is left out) unless user=root; links are never followed."""
        path = self._path_arg()
        if path is None:
            return
        user = self._query().get("user")
        top = self._fs_call(lambda trust: fsops.open_tree(path, trust), user, path)
        if top is None:
            return
        import zipfile  # only here: it is slow to import, and boots must be fast

        try:
            with fsops.acting_as(*((0, 0) if user == "root" else (p.BOX_UID, p.BOX_GID))):
                self._start_chunked("application/zip")
                out = _ChunkWriter(self)
                with zipfile.ZipFile(cast(IO[bytes], out), "w", compression=zipfile.ZIP_DEFLATED,
                                     compresslevel=1) as zf:
                    for name, fd, st in fsops.walk_files(top):
                        if fd is None:
                            zf.writestr(_zip_info(name, st), b"")
                            continue
                        with open(fd, "rb") as f, zf.open(_zip_info(name, st), "w") as dst:
                            while data := f.read(CHUNK):
                                dst.write(data)
                out.flush_all()
                self._end_chunked()
        finally:
            os.close(top)
        return None

    # --- filesystem operations (fsops.py says how each user's are kept safe) ---------------------

    def _fs_call(self, fn: Callable[[bool], Any], user: object, what: str) -> Any:
        """Run fn(trust_all) as the box user (links followed, the kernel checking the user's rights)
        or, for user "root", as root (only root's links followed). An OSError is answered here and
        None returned."""
        try:
            if user == "root":
                return fn(False)
            with fsops.acting_as(p.BOX_UID, p.BOX_GID):
                return fn(True)
        except fsops.UnsafePath as e:
            self._error(400, p.ERR_UNSAFE_PATH, f"{what} goes through a link the box's user made ({e})")
        except fsops.TooMany as e:
            self._error(400, p.ERR_TOO_MANY_ENTRIES, f"{what}: {e.strerror}; list a smaller depth or a subdirectory")
        except FileNotFoundError:
            self._error(404, p.ERR_NOT_FOUND, f"no such file or directory: {what}")
        except NotADirectoryError:
            self._error(400, p.ERR_NOT_DIR, f"not a directory: {what} (or one of its parents)")
        except IsADirectoryError as e:
            self._error(400, p.ERR_IS_DIR, f"{what}: {e.strerror}")
        except FileExistsError as e:
            self._error(409, p.ERR_EXISTS, f"{what}: {e.strerror}")
        except PermissionError:
            self._error(403, p.ERR_PERMISSION, f"{what}: permission denied to {'root' if user == 'root' else p.BOX_USER}")
        except OSError as e:
            if e.errno == errno.ENOTEMPTY:
                self._error(409, p.ERR_EXISTS, f"{what}: the destination is a directory that is not empty")
            elif e.errno == errno.EXDEV:
                self._error(400, p.ERR_IO, f"{what}: source and destination are on different filesystems")
            else:
                self._error(400, p.ERR_IO, f"{what}: {e.strerror or e}")
        return None

    def _fs_read(self, route: str) -> None:
        path = self._path_arg()
        if path is None:
            return None
        query = self._query()
        if route == p.FS_STAT:
            found = self._fs_call(lambda trust: fsops.stat_path(path, trust), query.get("user"), path)
            return None if found is None else self._json(200, found)
        depth = query.get("depth", "1")
        if not (depth.isascii() and depth.isdigit() and 1 <= int(depth) <= fsops.MAX_DEPTH):
            return self._error(400, p.ERR_BAD_REQUEST, f"depth must be 1-{fsops.MAX_DEPTH}")
        entries = self._fs_call(lambda trust: fsops.list_dir(path, int(depth), trust), query.get("user"), path)
        return None if entries is None else self._json(200, {"entries": entries})

    def _fs_change(self, route: str) -> None:
        try:
            req = json.loads(b"".join(self.body()))
            if not isinstance(req, dict):
                raise ValueError("a JSON object is needed")
        except ValueError as e:
            return self._error(400, p.ERR_BAD_REQUEST, f"bad request: {e}")
        paths: list[str] = []
        for name in ("source", "destination") if route == p.FS_MOVE else ("path",):
            path = req.get(name)
            problem = p.path_problem(path) if isinstance(path, str) else "a string is needed"
            if problem or not isinstance(path, str):
                return self._error(400, p.ERR_BAD_PATH, f"{name}: {problem}")
            paths.append(path)
        user = req.get("user")
        if route == p.FS_MKDIR:
            owner = (0, 0) if user == "root" else (p.BOX_UID, p.BOX_GID)
            made = self._fs_call(lambda trust: fsops.make_dir(paths[0], trust, owner), user, paths[0])
            return None if made is None else self._json(200, {"entry": made[0], "created": made[1]})
        if route == p.FS_MOVE:
            moved = self._fs_call(lambda trust: fsops.move(paths[0], paths[1], trust), user,
                                  f"{paths[0]} -> {paths[1]}")
            return None if moved is None else self._json(200, moved)

        def remove(trust: bool) -> bool:
            fsops.remove(paths[0], trust)
            return True

        if self._fs_call(remove, user, paths[0]):
            self._json(200, {})
        return None

    def _watch(self) -> None:
        """Stream a directory's changes until the host goes or the directory does, with a ping
        every 10 s of quiet (a host that went away is noticed then). Watches as root, through
        root's links only."""
        path = self._path_arg()
        if path is None:
            return None
        recursive = self._query().get("recursive") == "true"
        entries = self._query().get("entries") == "true"
        watch = self._fs_call(lambda _trust: fsops.Watch(path, recursive), "root", path)
        if watch is None:
            return None
        try:
            self._start_chunked("application/x-ndjson")
            stream = _EventStream(self)
            while stream.alive and not watch.ended:
                events = watch.read(L.PING_SECONDS)
                for name, kind in events:
                    entry = watch.entry(name) if entries and kind in ("create", "write", "chmod") else None
                    stream.send({"t": p.EVENT_FS, "name": name, "type": kind, **({"entry": entry} if entry else {})})
                if not events:
                    stream.send({"t": p.EVENT_PING})
            stream.close()
        finally:
            watch.close()
        return None

    # --- exec -----------------------------------------------------------------------------------

    def _command_request(self) -> dict[str, Any] | None:
        """The body of an exec or spawn: a JSON object with a string `cmd` (else answered 400)."""
        try:
            req = json.loads(b"".join(self.body()))
            if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
                raise ValueError("a JSON object with a string cmd is needed")
        except ValueError as e:
            self._error(400, p.ERR_BAD_REQUEST, f"bad command request: {e}")
            return None
        return req

    def _exec(self) -> None:
        req = self._command_request()
        if req is None:
            return None
        cmd = req["cmd"]
        as_root = req.get("user") == "root"
        env, home = L.command_env(as_root, req.get("env"))
        cwd = req.get("cwd") or (home if os.path.isdir(home) else "/")
        self._start_chunked("application/x-ndjson")
        stream = _EventStream(self)
        try:
            cmd_ = L.launch(SPAWNER, ["/bin/sh", "-c", cmd], cwd, env, as_root)
        except OSError as e:
            code, message = L.start_problem(e, cwd)
            stream.send({"t": p.EVENT_ERROR, "code": code, "message": message})
            return stream.close()
        stream.send({"t": p.EVENT_START, "pid": cmd_.pid})
        exit_code, timed_out = L.pump(cmd_, stream, req.get("timeout"))
        stream.send({"t": p.EVENT_EXIT, "code": None if timed_out else exit_code, "timed_out": timed_out})
        stream.close()
        return None

    # --- spawned processes ----------------------------------------------------------------------

    def _spawn(self) -> None:
        req = self._command_request()
        if req is None:
            return None
        try:
            proc = PROCS.start(req)
        except ProcError as e:
            return self._error(e.status, e.code, e.message)
        self._json(200, proc.info())
        return None

    def _proc_route(self, route: str, method: str) -> None:
        _, _, rest = route.partition(p.PROCS + "/")
        pid_text, _, action = rest.partition("/")
        try:
            if not pid_text.isdigit() or len(pid_text) > 9:
                return self._error(404, p.ERR_BAD_REQUEST, "no such route")
            proc = PROCS.get(int(pid_text))
            if method == "GET" and action == "":  # one process, ended or not
                return self._json(200, proc.info())
            if method == "GET" and action == p.PROC_EVENTS:
                return self._follow(proc)
            if method != "POST":
                return self._error(404, p.ERR_BAD_REQUEST, "no such route")
            body = bytearray()
            for part in self.body():
                body += part
                if len(body) > MAX_STDIN_BODY:
                    return self._error(413, p.ERR_BAD_REQUEST, f"requests are limited to {MAX_STDIN_BODY} bytes")
            if action == p.PROC_STDIN:
                proc.write_stdin(bytes(body))
                return self._json(200, {})
            if action == p.PROC_STDIN_CLOSE:
                proc.close_stdin()
                return self._json(200, {})
            req = json.loads(body or b"{}")
            if action == p.PROC_SIGNAL:
                return self._json(200, {"signalled": proc.signal(parse_signal(req))})
            if action == p.PROC_RESIZE:
                proc.resize(*parse_resize(req))
                return self._json(200, {})
            return self._error(404, p.ERR_BAD_REQUEST, "no such route")
        except ProcError as e:
            return self._error(e.status, e.code, e.message)
        except ValueError as e:
            return self._error(400, p.ERR_BAD_REQUEST, f"bad request: {e}")

    def _follow(self, proc: Proc) -> None:
        """Replay the process' buffered output from `after`, then stream on until it exits."""
        after = self._query().get("after", "-1")
        cursor = int(after) + 1 if after.lstrip("-").isdigit() else 0
        self._start_chunked("application/x-ndjson")
        stream = _EventStream(self)
        done = False
        while stream.alive and not done:
            batch, cursor, done = proc.read(cursor, L.PING_SECONDS)
            for ev in batch:
                stream.send(ev)
            if not batch:
                stream.send({"t": p.EVENT_PING})
        stream.close()


class _EventStream:
    """NDJSON events to the host; a host that went away stops the writes, not the command."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.alive = True

    def send(self, event: dict[str, Any]) -> None:
        if not self.alive:
            return
        try:
            self.handler._chunk(json.dumps(event).encode() + b"\n")
            self.handler.wfile.flush()
        except OSError:
            self.alive = False
            self.handler.close_connection = True

    def close(self) -> None:
        if self.alive:
            try:
                self.handler._end_chunked()
            except OSError:
                self.handler.close_connection = True


class _ChunkWriter:
    """A write-only stream that sends what it is given as HTTP chunks (zipfile writes to it)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
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
        self.handler._chunk(bytes(self.buf))
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


_UnsafePath = fsops.UnsafePath


def _open_parent(path: str, uid: int, gid: int) -> tuple[int, str]:
    """Open the directory that is to hold `path` (an fd) and return it with the file's name,
    making missing directories on the way (given to uid/gid), like mkdir -p.

    The walk (fsops.open_dir) goes one name at a time, relative to the directory opened last, and
    follows only links owned by root (the template's own, like /lib -> usr/lib). The agent writes
    as root on the owner's behalf; a link the box's user planted (~/proj -> /etc) must not steer
    that write.
    """
    return fsops.open_parent(path, trust_all=False, make=(uid, gid))


def _stop_serving(server: socketserver.BaseServer) -> None:
    """End the accept loop at once: shutdown() only takes effect when the loop wakes, so wake it
    with a connection of our own, again until it has stopped (a wake-up that came before the
    shutdown's flag was set only serves that connection). Called off the main thread, which runs
    the loop."""
    stopper = threading.Thread(target=server.shutdown, daemon=True)
    stopper.start()
    while stopper.is_alive():
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
            s.connect(server.server_address)
        stopper.join(0.05)


def serve(spawner: Spawner) -> None:
    """Answer the host on the channel socket until the box ends.

    A pause is a protocol: the host asks to quiesce, the agent closes its listener and every
    connection and removes the socket; the host checkpoints; after a restore it sends SIGUSR1 and
    the agent listens again. Commands, files and memory carry on untouched across it.
    """
    global SPAWNER, PROCS
    SPAWNER = spawner
    PROCS = ProcTable(spawner)
    relay = Relay()
    relay.start()
    with contextlib.suppress(OSError):  # without it the box runs on; its `sudo` says the service is not there
        SudoService().start()  # the box user's `sudo` (sudo.py): in the box only, so a pause leaves it be
    wake = threading.Event()
    signal.signal(signal.SIGUSR1, lambda _s, _f: wake.set())
    # The kernel may hand SIGUSR1 to any thread, and Python runs the handler only when the main
    # thread next runs: a wakeup fd makes the main thread's select return at once, wherever the
    # signal landed (a timed wait alone was seen to miss it after a restore).
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    sock = os.path.join(p.CHANNEL_DIR, p.SOCKET_NAME)
    while True:
        with contextlib.suppress(OSError):
            os.unlink(sock)
        old = os.umask(0o077)  # only root in the box may talk to the agent
        server = ChannelServer(sock)
        os.umask(old)
        release_host_stdio()  # listening: a boot failure of the agent's is past (a no-op after a wake)
        server.serve_forever(poll_interval=IDLE_WAIT_SECONDS)  # returns on quiesce: _stop_serving wakes it
        wake.clear()  # a wake-up that came while serving is stale: wait for the one after restore
        server.close_all()
        relay.quiesce()
        with contextlib.suppress(OSError):
            os.unlink(sock)  # the host waits for this: then nothing of the host is held
        wake_file = os.path.join(p.CHANNEL_DIR, p.WAKE_FILE)
        while not wake.is_set() and not os.path.exists(wake_file):
            select.select([wake_r], [], [], WAKE_POLL_SECONDS)
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)
        with contextlib.suppress(OSError):
            os.unlink(wake_file)  # or the next quiesce would wake at once
        relay.wake()
