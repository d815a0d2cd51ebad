"""The agent's sudo service: runs a command as root (or another user) for the box user's `sudo`
(`sudo.py`, which says why a box's sudo cannot be a setuid program).

It listens on a Unix socket in the box's own abstract namespace (never a host path: it lives in
gVisor's memory, survives a checkpoint, and leaves nothing in the box's files). Each connection is
one command: the credentials the kernel vouches for on its first bytes (SCM_CREDENTIALS, read with
SO_PASSCRED: a sender can claim only ids it holds, and one that claims none reads as nobody) must
be the box user's or root's (gVisor 20240729 answers SO_PEERCRED with the asker's own ids, so it
proves nothing); the request is bounded and checked; the command starts in a session of its own on the caller's stdin, stdout and
stderr, with none of the agent's other descriptors. The caller then sends signals for the command's
process group and gets its exit; when the caller goes away first, the command's group is killed.

Threat model: any process in the box can connect. Only the box user and root are answered, and what
they get is what the API's `user="root"` gives (the agent's own capabilities, inside gVisor): this
is no boundary of the host's. A session holds two threads of the agent's; at most MAX_SESSIONS run
at once, and a request is read whole within REQUEST_SECONDS.
Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from typing import Any

try:
    from hutch.guest import protocol as p
    from hutch.guest import sudo
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import protocol as p  # type: ignore[import-not-found, no-redef]
    import sudo  # type: ignore[import-not-found, no-redef]

MAX_SESSIONS = 128
REQUEST_SECONDS = 10.0
ALLOWED_UIDS = (0, p.BOX_UID)
FORWARDED = frozenset(int(getattr(signal, name)) for name in sudo.FORWARDED)
_ID_MAX = 2**32 - 2  # (uid_t)-1 means "unchanged"
_INT = struct.Struct("i")
_CREDS = struct.Struct("3i")  # struct ucred: pid, uid, gid


class SudoService:
    def __init__(self, name: str = p.SUDO_SOCKET, allowed: tuple[int, ...] = ALLOWED_UIDS,
                 max_sessions: int = MAX_SESSIONS) -> None:
        self.name, self.allowed = name, allowed
        self._slots = threading.BoundedSemaphore(max_sessions)

    def start(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # accepted sockets inherit it
        listener.bind(self.name)
        listener.listen(64)
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            if not self._slots.acquire(blocking=False):
                _answer(conn, sudo.ERRNO, errno.EAGAIN)
                conn.close()
                continue
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
                conn.settimeout(REQUEST_SECONDS)
                try:
                    uid, req, fds = _read_request(conn, self.allowed)
                except (OSError, EOFError, ValueError, RecursionError):  # RecursionError: JSON nested too deep
                    return  # a caller that sent nothing sensible in time gets nothing
                if uid not in self.allowed:
                    _answer(conn, sudo.REFUSED, 0)
                    return
                try:
                    proc = _start(req, fds)
                except OSError as e:
                    kind = sudo.CWD_ERRNO if e.filename == req["cwd"] else sudo.ERRNO  # subprocess names what failed
                    _answer(conn, kind, e.errno or errno.EIO)
                    return
                except (ValueError, subprocess.SubprocessError):
                    _answer(conn, sudo.ERRNO, errno.EINVAL)
                    return
                finally:
                    for fd in fds:
                        os.close(fd)
                conn.settimeout(None)
                _answer(conn, sudo.PID, proc.pid)
                _follow(conn, proc)
        finally:
            self._slots.release()


_CONTROL = socket.CMSG_SPACE(3 * _INT.size) + socket.CMSG_SPACE(_CREDS.size)


def _read_request(conn: socket.socket, allowed: tuple[int, ...]) -> tuple[int, dict[str, Any], list[int]]:
    """The uid the kernel vouches for, the request and the caller's stdio (three descriptors), or
    ValueError. Bounded in size; a caller not `allowed` is told so before anything of its request
    beyond the first bytes is read (no descriptor kept, an empty request)."""
    head, ancillary, flags, _addr = conn.recvmsg(sudo.LEN.size, _CONTROL)
    fds: list[int] = []
    uid = -1
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += [fd for (fd,) in _INT.iter_unpack(data[:len(data) - len(data) % _INT.size])]
        elif level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= _CREDS.size:
            _pid, uid, _gid = _CREDS.unpack(data[:_CREDS.size])
    try:
        if not head:
            raise EOFError
        if uid not in allowed:
            for fd in fds:
                os.close(fd)
            return uid, {}, []
        if flags & socket.MSG_CTRUNC or len(fds) != 3:
            raise ValueError("not a request")
        head += sudo.recv_exact(conn, sudo.LEN.size - len(head))
        (size,) = sudo.LEN.unpack(head)
        if size > sudo.MAX_REQUEST:
            raise ValueError("not a request")
        req = json.loads(sudo.recv_exact(conn, size))
        _check(req)
        return uid, req, fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _check(req: Any) -> None:
    """ValueError unless the request is what sudo.py sends."""
    def strs(xs: Any) -> bool:
        return all(isinstance(x, str) and "\0" not in x for x in xs)

    def ids(xs: Any) -> bool:
        return all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= _ID_MAX for x in xs)

    if not (isinstance(req, dict) and isinstance(req.get("argv"), list) and req["argv"] and strs(req["argv"])
            and isinstance(req.get("env"), dict) and strs(req["env"]) and strs(req["env"].values())
            and all(k and "=" not in k for k in req["env"])
            and isinstance(req.get("cwd"), str) and req["cwd"].startswith("/") and strs([req["cwd"]])
            and ids([req.get("uid"), req.get("gid")]) and isinstance(req.get("groups"), list)
            and len(req["groups"]) <= 65536 and ids(req["groups"])):
        raise ValueError("not a request")


def _start(req: dict[str, Any], stdio: list[int]) -> subprocess.Popen[bytes]:
    """The command in a session of its own on the caller's stdio. As root it starts as the agent's
    root commands do (the agent is root: vfork); as another user, with that user's ids and groups."""
    who: dict[str, Any] = {}
    if req["uid"] != 0 or req["gid"] != 0:
        who = {"user": req["uid"], "group": req["gid"], "extra_groups": req["groups"]}
    return subprocess.Popen(req["argv"], cwd=req["cwd"], env=req["env"], stdin=stdio[0], stdout=stdio[1],
                            stderr=stdio[2], start_new_session=True, close_fds=True, **who)


def _follow(conn: socket.socket, proc: subprocess.Popen[bytes]) -> None:
    """Pass the caller's signals to the command's process group and its exit to the caller; kill
    the group if the caller goes away first."""
    def wait() -> None:
        code = proc.wait()
        _answer(conn, sudo.EXIT, code)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    buf = b""
    while True:
        try:
            part = conn.recv(sudo.SIGNAL.size - len(buf))
        except OSError:
            part = b""
        if not part:
            break
        buf += part
        if len(buf) == sudo.SIGNAL.size:
            (sig,) = sudo.SIGNAL.unpack(buf)
            buf = b""
            if sig in FORWARDED and proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, sig)
    if proc.poll() is None:  # the caller died (or was killed at its deadline): so does the command
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    waiter.join()


def _answer(conn: socket.socket, kind: int, value: int) -> None:
    with contextlib.suppress(OSError):  # a caller that went away has nothing to hear
        conn.sendall(sudo.ANSWER.pack(kind, value))
