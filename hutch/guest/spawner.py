"""Starts the box user's commands from a helper process that already runs as that user.

Under gVisor a fork of the agent costs ~30 ms, while a vfork-style spawn costs ~10 ms; CPython only
uses vfork when no uid or gid change is asked for. So the agent forks, once, a small helper that
drops to the box user and spawns each command with plain `subprocess.Popen` (vfork), receiving the
command's stdio as file descriptors over a socketpair and reporting each exit back.
Standard library only.
"""

from __future__ import annotations

import marshal
import os
import socket
import struct
import subprocess
import threading
from typing import Any

_LEN = struct.Struct("!I")


def _send(sock: socket.socket, msg: dict[str, Any], fds: list[int] | None = None) -> None:
    data = marshal.dumps(msg)  # both ends are the same interpreter; marshal costs no import
    payload = _LEN.pack(len(data)) + data
    if fds:
        socket.send_fds(sock, [payload], fds)
    else:
        sock.sendall(payload)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise EOFError
        buf += part
    return buf


def _recv(sock: socket.socket, with_fds: int = 0) -> tuple[dict[str, Any], list[int]]:
    fds: list[int] = []
    if with_fds:
        head, fds, _flags, _addr = socket.recv_fds(sock, _LEN.size, with_fds)
        if not head:
            raise EOFError
        head += _recv_exact(sock, _LEN.size - len(head))
    else:
        head = _recv_exact(sock, _LEN.size)
    (size,) = _LEN.unpack(head)
    msg: dict[str, Any] = marshal.loads(_recv_exact(sock, size))
    return msg, fds


def exit_code(returncode: int) -> int:
    """A shell's view of how a process ended: its status, or 128 plus the signal that killed it."""
    return 128 - returncode if returncode < 0 else returncode


class Spawner:
    """The agent's handle on the helper. Thread-safe."""

    def __init__(self, uid: int, gid: int) -> None:
        self.uid, self.gid = uid, gid
        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self._exits: dict[int, int] = {}
        self._next = 0
        self._start()

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:  # the helper: drop privileges for good, then serve
            ours.close()
            try:
                os.setgroups([])
                os.setgid(self.gid)
                os.setuid(self.uid)
                _serve(theirs)
            finally:
                os._exit(0)
        theirs.close()
        self.pid, self.sock = pid, ours
        threading.Thread(target=self._read, args=(ours,), daemon=True).start()

    def _read(self, sock: socket.socket) -> None:
        while True:
            try:
                msg, _ = _recv(sock)
            except (EOFError, OSError):
                break
            with self._cond:
                if "exit" in msg:
                    self._exits[msg["exit"]] = msg["code"]
                else:
                    self._replies[msg["id"]] = msg
                self._cond.notify_all()
        with self._cond:  # the helper is gone: fail whoever waits
            self.sock = None  # type: ignore[assignment]
            self._cond.notify_all()

    def spawn(self, argv: list[str], cwd: str, env: dict[str, str], stdio: list[int]) -> int:
        """Start a command in a new session; return its pid. Raises OSError as Popen would."""
        with self._lock:
            if self.sock is None:
                self._start()
            self._next += 1
            req_id = self._next
            _send(self.sock, {"id": req_id, "argv": argv, "cwd": cwd, "env": env}, stdio)
        with self._cond:
            while req_id not in self._replies:
                if self.sock is None:
                    raise OSError("the spawner ended")
                self._cond.wait()
            reply = self._replies.pop(req_id)
        if "errno" in reply:
            raise OSError(reply["errno"], reply["message"], reply.get("filename"))
        pid: int = reply["pid"]
        return pid

    def wait(self, pid: int) -> int:
        with self._cond:
            while pid not in self._exits:
                if self.sock is None:
                    return 255
                self._cond.wait()
            return self._exits.pop(pid)


def _serve(sock: socket.socket) -> None:
    send_lock = threading.Lock()

    def reply(msg: dict[str, Any]) -> None:
        with send_lock:
            _send(sock, msg)

    def reap(proc: subprocess.Popen[bytes]) -> None:
        reply({"exit": proc.pid, "code": exit_code(proc.wait())})

    while True:
        try:
            req, fds = _recv(sock, with_fds=3)
        except (EOFError, OSError):
            return
        try:
            proc = subprocess.Popen(req["argv"], cwd=req["cwd"], env=req["env"], stdin=fds[0],
                                    stdout=fds[1], stderr=fds[2], start_new_session=True, close_fds=True)
        except OSError as e:
            reply({"id": req["id"], "errno": e.errno or 0, "message": e.strerror or str(e),
                   "filename": e.filename})
        else:
            reply({"id": req["id"], "pid": proc.pid})
            threading.Thread(target=reap, args=(proc,), daemon=True).start()
        finally:
            for fd in fds:
                os.close(fd)
