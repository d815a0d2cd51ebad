"""Starts the box user's commands from a helper process that already runs as that user.

Under gVisor a fork of the agent costs ~30 ms, while a vfork-style spawn costs ~10 ms; CPython only
uses vfork when no uid or gid change is asked for. So the agent forks, once, a small helper that
drops to the box user and spawns each command with plain `subprocess.Popen` (vfork). It receives
each command's stdio as file descriptors over a socketpair, with a socket of the command's own on
which it answers the pid and later the exit: the thread that pumps the command's output waits on
that socket with the output, so no other thread wakes between a command and its caller (each such
hand-off cost ~1 ms under gVisor).
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
from collections.abc import Callable
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


class Spawned:
    """A command the helper started: its pid, and a socket of its own on which the helper reports,
    once, how it ended. The helper's end closes if the helper dies, so such a command reports 255
    rather than being waited for forever. Read by one thread, the one pumping its output."""

    def __init__(self, pid: int, sock: socket.socket, orphaned: Callable[[], None]) -> None:
        self.pid, self._sock, self._orphaned = pid, sock, orphaned
        self.fd = sock.fileno()  # readable once the exit is known: a pump selects on it
        self._code: int | None = None

    def poll(self) -> int | None:
        """The exit code once it has ended, else None; never blocks."""
        if self._code is None:
            try:
                self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
            except OSError:
                pass
            return self.wait()
        return self._code

    def wait(self) -> int:
        if self._code is None:
            try:
                self._code = int(_recv(self._sock)[0]["exit"])
            except (EOFError, OSError, KeyError, TypeError, ValueError):
                self._code = 255  # the helper died first
                self._orphaned()
            self._sock.close()
        return self._code


class Spawner:
    """The agent's handle on the helper. Thread-safe.

    The helper runs as the box user, so that user can kill or stop it. Each spawn hands the helper
    a socket of its own besides the command's stdio: the helper answers the pid on it, then the
    exit, so no thread of the agent's stands between a command and the one waiting for it. When a
    helper dies, its commands report 255 and the next spawn starts a new one; a helper that stops
    answering fails the spawn after a while.
    """

    REPLY_TIMEOUT = 10.0

    def __init__(self, uid: int, gid: int) -> None:
        self.uid, self.gid = uid, gid
        self._lock = threading.Lock()
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
        self.pid, self.sock = pid, ours
        threading.Thread(target=self._bury, args=(pid, ours), daemon=True).start()

    def _bury(self, helper: int, sock: socket.socket) -> None:
        """Reap the helper when it ends (the thread sleeps in waitpid until then) and drop its socket."""
        with contextlib.suppress(ChildProcessError):
            os.waitpid(helper, 0)
        with self._lock:
            if self.sock is sock:
                self.sock = None
            sock.close()

    def _forget(self, sock: socket.socket) -> None:
        """That helper is gone (a socket it held closed unanswered): the next spawn starts a new one.
        Its own socket may close after the one that showed it, so a spawn meanwhile could still
        send to it."""
        with self._lock:
            if self.sock is sock:
                self.sock = None
                sock.close()

    def _request(self, msg: dict[str, Any], fds: list[int]) -> socket.socket:
        """Hand the helper a request, starting a new helper if there is none; returns the helper's
        socket. A send the helper's closed end refused reached nobody, so it is sent once more, to a
        new helper."""
        with self._lock:
            for _attempt in range(2):
                if self.sock is None:
                    self._start()
                assert self.sock is not None
                try:
                    _send(self.sock, msg, fds)
                    return self.sock
                except (BrokenPipeError, ConnectionResetError):
                    self.sock.close()
                    self.sock = None
            raise OSError("the spawner ended")

    def spawn(self, argv: list[str], cwd: str, env: dict[str, str], stdio: list[int], ctty: bool = False) -> Spawned:
        """Start a command in a new session. Raises OSError as Popen would.
        With `ctty`, its stdin (a terminal) becomes the session's controlling terminal."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with theirs:  # the helper holds the only other copy once it has it
                helper = self._request({"argv": argv, "cwd": cwd, "env": env, "ctty": ctty}, [*stdio, theirs.fileno()])
            ours.settimeout(self.REPLY_TIMEOUT)
            try:
                reply, _ = _recv(ours)
            except TimeoutError:
                raise OSError("the spawner does not answer") from None
            except (EOFError, OSError):
                self._forget(helper)
                raise OSError("the spawner ended") from None
            ours.settimeout(None)
            if "errno" in reply:
                raise OSError(reply["errno"], reply["message"], reply.get("filename"))
            return Spawned(int(reply["pid"]), ours, lambda: self._forget(helper))
        except BaseException:
            ours.close()
            raise


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
    # The commands running, by pid, each with the socket its exit is reported on. One reaper waits
    # for any of them: a thread per command cost ~1 ms of each under gVisor. Popen objects are kept
    # (their returncode set once reaped) so that subprocess never waits on a pid of its own accord:
    # after our wait it may be reused.
    running: dict[int, tuple[subprocess.Popen[bytes], socket.socket]] = {}
    spawned = threading.Condition()

    def report(to: socket.socket, msg: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # an agent that stopped listening has nothing to hear
            _send(to, msg)

    def reap() -> None:
        while True:
            with spawned:
                while not running:
                    spawned.wait()
            try:
                pid, status = os.wait()
            except ChildProcessError:  # none is left to wait for: those listed are gone unseen
                with spawned:
                    lost = list(running.values())
                    running.clear()
                for _proc, to in lost:
                    report(to, {"exit": 255})
                    to.close()
                continue
            with spawned:  # a spawn holds it until its pid is answered: the exit comes after
                entry = running.pop(pid, None)
            if entry is not None:
                proc, to = entry
                proc.returncode = os.waitstatus_to_exitcode(status)
                report(to, {"exit": exit_code(proc.returncode)})
                to.close()

    threading.Thread(target=reap, daemon=True).start()
    while True:
        try:
            req, fds = _recv(sock, with_fds=4)
        except (EOFError, OSError):
            return
        if len(fds) != 4:  # not the agent's request: the stdio and the reply socket
            for fd in fds:
                os.close(fd)
            continue
        stdio, to = fds[:3], socket.socket(fileno=fds[3])
        try:
            with spawned:
                proc = popen(req["argv"], req["cwd"], req["env"], stdio, req.get("ctty", False))
                running[proc.pid] = (proc, to)
                report(to, {"pid": proc.pid})
                spawned.notify()
        except OSError as e:
            report(to, {"errno": e.errno or 0, "message": e.strerror or str(e), "filename": e.filename})
            to.close()
        finally:
            for fd in stdio:
                os.close(fd)
