"""Starts the box user's commands from a helper process that already runs as that user.

Under gVisor a fork of the agent costs ~30 ms, while a vfork-style spawn costs ~10 ms; CPython only
uses vfork when no uid or gid change is asked for. So the agent forks, once, a small helper that
drops to the box user and spawns each command with plain `subprocess.Popen` (vfork), receiving the
command's stdio as file descriptors over a socketpair and reporting each exit back.
Standard library only.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import socket
import struct
import subprocess
import threading
import time
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


def release_host_stdio() -> None:
    """Point this process' stdin, stdout and stderr at /dev/null. PID 1 starts with the host's
    runsc.err behind them (the host's boot diagnostics): a box process writing into
    /proc/<agent>/fd/2 would fill the host's disk. Every agent process lets go of it once it no
    longer has a boot failure to report."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


class Spawner:
    """The agent's handle on the helper. Thread-safe.

    The helper runs as the box user, so that user can kill or stop it. Each helper is a
    generation: when one dies its commands report 255 rather than being waited for forever, and
    the next spawn starts a new one. A helper that stops answering fails the spawn after a while.
    """

    REPLY_TIMEOUT = 10.0

    def __init__(self, uid: int, gid: int) -> None:
        self.uid, self.gid = uid, gid
        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self._exits: dict[int, int] = {}
        self._born_in: dict[int, int] = {}  # command pid -> the generation that started it
        self._dead: set[int] = set()
        self._generation = 0
        self._next = 0
        self.sock: socket.socket | None = None
        self._start()

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:  # the helper: drop privileges for good, then serve
            ours.close()
            release_host_stdio()
            try:
                os.setgroups([])
                os.setgid(self.gid)
                os.setuid(self.uid)
                _serve(theirs)
            finally:
                os._exit(0)
        theirs.close()
        self._generation += 1
        self.pid, self.sock = pid, ours
        threading.Thread(target=self._read, args=(ours, self._generation, pid), daemon=True).start()

    def _read(self, sock: socket.socket, generation: int, helper: int) -> None:
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
        with self._cond:  # the helper is gone: fail whoever waits on it
            self._dead.add(generation)
            if self.sock is sock:
                self.sock = None
            self._cond.notify_all()
        sock.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(helper, 0)

    def spawn(self, argv: list[str], cwd: str, env: dict[str, str], stdio: list[int], ctty: bool = False) -> int:
        """Start a command in a new session; return its pid. Raises OSError as Popen would.
        With `ctty`, its stdin (a terminal) becomes the session's controlling terminal."""
        with self._lock:
            if self.sock is None:
                self._start()
            assert self.sock is not None
            self._next += 1
            req_id, generation = self._next, self._generation
            _send(self.sock, {"id": req_id, "argv": argv, "cwd": cwd, "env": env, "ctty": ctty}, stdio)
        deadline = time.monotonic() + self.REPLY_TIMEOUT
        with self._cond:
            while req_id not in self._replies:
                if generation in self._dead:
                    raise OSError("the spawner ended")
                if not self._cond.wait(max(0.0, deadline - time.monotonic())):
                    raise OSError("the spawner does not answer")
            reply = self._replies.pop(req_id)
            if "errno" in reply:
                raise OSError(reply["errno"], reply["message"], reply.get("filename"))
            pid: int = reply["pid"]
            self._born_in[pid] = generation
            return pid

    def poll(self, pid: int) -> int | None:
        """The command's exit code once it has ended (255 if its helper died first), else None."""
        with self._cond:
            return self._poll(pid)

    def _poll(self, pid: int) -> int | None:
        if pid in self._exits:
            self._born_in.pop(pid, None)
            return self._exits.pop(pid)
        if self._born_in.get(pid) in self._dead:
            self._born_in.pop(pid, None)
            return 255
        return None

    def wait(self, pid: int) -> int:
        with self._cond:
            while (code := self._poll(pid)) is None:
                self._cond.wait()
            return code


def take_terminal() -> None:
    """In the child, after setsid: make stdin (a pty) the controlling terminal, for job control."""
    import fcntl
    import termios

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def popen(argv: list[str], cwd: str, env: dict[str, str], stdio: list[int], ctty: bool) -> subprocess.Popen[bytes]:
    """Start a command in a new session on the given stdio. A controlling terminal costs a real
    fork (a preexec hook rules out vfork), so only terminals pay it."""
    return subprocess.Popen(argv, cwd=cwd, env=env, stdin=stdio[0], stdout=stdio[1], stderr=stdio[2],
                            start_new_session=True, close_fds=True, preexec_fn=take_terminal if ctty else None)


def _serve(sock: socket.socket) -> None:
    send_lock = threading.Lock()
    # The commands running, by pid. One reaper waits for any of them: a thread per command cost
    # ~1 ms of each under gVisor. Popen objects are kept (their returncode set once reaped) so
    # that subprocess never waits on a pid of its own accord: after our wait it may be reused.
    running: dict[int, subprocess.Popen[bytes]] = {}
    spawned = threading.Condition()

    def reply(msg: dict[str, Any]) -> None:
        with send_lock:
            _send(sock, msg)

    def reap() -> None:
        while True:
            with spawned:
                while not running:
                    spawned.wait()
            try:
                pid, status = os.wait()
            except ChildProcessError:  # none is left to wait for: those listed are gone unseen
                with spawned:
                    lost = list(running)
                    running.clear()
                for pid in lost:
                    reply({"exit": pid, "code": 255})
                continue
            with spawned:  # a spawn holds it until its command is in `running`
                proc = running.pop(pid, None)
            if proc is not None:
                proc.returncode = os.waitstatus_to_exitcode(status)
                reply({"exit": pid, "code": exit_code(proc.returncode)})

    threading.Thread(target=reap, daemon=True).start()
    while True:
        try:
            req, fds = _recv(sock, with_fds=3)
        except (EOFError, OSError):
            return
        try:
            with spawned:
                proc = popen(req["argv"], req["cwd"], req["env"], fds, req.get("ctty", False))
                running[proc.pid] = proc
                spawned.notify()
        except OSError as e:
            reply({"id": req["id"], "errno": e.errno or 0, "message": e.strerror or str(e),
                   "filename": e.filename})
        else:
            reply({"id": req["id"], "pid": proc.pid})
        finally:
            for fd in fds:
                os.close(fd)
