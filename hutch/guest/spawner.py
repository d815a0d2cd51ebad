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
import errno
import gc
import marshal
import os
import select
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

_LEN = struct.Struct("!I")
_ANSWER = struct.Struct("!Bq")  # an answer, helper to agent: its kind (below) and a pid, errno or exit code
_PID, _ERRNO, _EXIT = 1, 2, 3
EXIT_READ_SECONDS = 1.0  # how long an exit's answer may take to arrive whole once it has begun
PID_MAX = 4194304  # the kernel's ceiling on pids
HELPER_DEATH_SECONDS = 1.0  # how long a helper's socket may stay open after a sign of its death


def _send(sock: socket.socket, msg: dict[str, Any], fds: list[int] | None = None) -> None:
    """A request, agent to helper: the helper trusts the agent, so marshal (no import) will do."""
    data = marshal.dumps(msg)
    payload = _LEN.pack(len(data)) + data
    sent = socket.send_fds(sock, [payload], fds) if fds else 0
    sock.sendall(payload[sent:])  # a short write's rest, or all of it


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


def _answer(to: socket.socket, kind: int, value: int) -> None:
    """An answer, helper to agent, on a command's socket."""
    with contextlib.suppress(OSError):  # an agent that stopped listening has nothing to hear
        to.sendall(_ANSWER.pack(kind, value))


def _read_answer(sock: socket.socket, deadline: float) -> tuple[int, int]:
    """The helper's next answer on a command's socket. The helper is the box user's to command, so
    an answer is a fixed few bytes read by a deadline, never a message to parse. EOFError if the
    helper closed the socket first; TimeoutError at the deadline."""
    buf = b""
    while len(buf) < _ANSWER.size:
        sock.settimeout(max(0.0, deadline - time.monotonic()) or 1e-6)  # 0 would mean non-blocking
        part = sock.recv(_ANSWER.size - len(buf))
        if not part:
            raise EOFError
        buf += part
    kind, value = _ANSWER.unpack(buf)
    return kind, value


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

    def __init__(self, pid: int, sock: socket.socket, unanswered: Callable[[], None]) -> None:
        self.pid, self._sock, self._unanswered = pid, sock, unanswered
        self.fd = sock.fileno()  # readable once the exit is known: a pump selects on it
        self._code: int | None = None

    def poll(self) -> int | None:
        """The exit code once it has ended, else None. Waits only on an answer begun, or on a sign
        that the helper died."""
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
        """The exit code, waiting for the command to end. Anything but a whole, sensible answer soon
        after the socket became readable (a helper that died, or that the box user made lie) is 255."""
        if self._code is None:
            readable = select.poll()
            readable.register(self._sock, select.POLLIN)
            readable.poll()
            try:
                kind, value = _read_answer(self._sock, time.monotonic() + EXIT_READ_SECONDS)
            except EOFError:
                kind = value = -1
                self._unanswered()
            except OSError:
                kind = value = -1
            self._code = value if kind == _EXIT and 0 <= value <= 255 else 255
            self._sock.close()
        return self._code


class Spawner:
    """The agent's handle on the helper. Thread-safe.

    The helper runs as the box user, so that user can kill, stop or replace it. Each spawn hands the
    helper a socket of its own besides the command's stdio: the helper answers the pid on it, then
    the exit, so no thread of the agent's stands between a command and the one waiting for it.
    When a helper dies its commands report 255, and the next spawn starts a new one; a helper that
    does not answer a spawn in time is killed, and so is replaced at the next.
    """

    REPLY_TIMEOUT = 10.0

    def __init__(self, uid: int, gid: int) -> None:
        self.uid, self.gid = uid, gid
        self._lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.pid = 0
        self._start()

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:  # the helper: keep only its socket, drop privileges for good, then serve
            try:
                gc.freeze()  # the agent's objects it inherited are never collected here: their fds are closed
                ours.close()
                release_host_stdio()
                _keep_only(theirs.detach())
                os.setgroups([])
                os.setgid(self.gid)
                os.setuid(self.uid)
                _serve(socket.socket(fileno=_HELPER_FD))
            finally:
                os._exit(0)
        theirs.close()
        ours.settimeout(self.REPLY_TIMEOUT)  # a helper that stops reading must not hold _lock for ever
        self.pid, self.sock = pid, ours
        threading.Thread(target=self._bury, args=(pid, ours), daemon=True).start()

    def _drop(self, sock: socket.socket, kill: bool = False) -> None:
        """Let go of the helper behind `sock` (with _lock held), killing it first with `kill` (it may
        still run, and run what it was sent later); the next spawn starts a new one."""
        if self.sock is sock:
            if kill:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
            self.sock = None
        sock.close()

    def _bury(self, helper: int, sock: socket.socket) -> None:
        """Reap the helper when it ends (the thread sleeps in waitpid until then) and drop it."""
        with contextlib.suppress(ChildProcessError):
            os.waitpid(helper, 0)
        with self._lock:
            self._drop(sock)

    def _request(self, msg: dict[str, Any], fds: list[int]) -> socket.socket:
        """Hand the helper a request, starting a new helper if there is none; returns the helper's
        socket. A send the helper's closed end refused reached nobody, so it is sent once more, to a
        new helper; so is one a helper stopped taking (that helper is killed: it may have half of it)."""
        with self._lock:
            for _attempt in range(2):
                sock = self.sock
                if sock is None:
                    self._start()
                    sock = self.sock
                assert sock is not None
                try:
                    _send(sock, msg, fds)
                    return sock
                except (BrokenPipeError, ConnectionResetError):
                    self._drop(sock)
                except TimeoutError:
                    self._drop(sock, kill=True)
            raise OSError("the spawner ended")

    def _gone(self, sock: socket.socket) -> None:
        """A command's socket closed unanswered, as when its helper dies. If the helper's own socket
        closes too (soon: the kernel releases a dead process's sockets in no set order), the helper
        is dead, and the next spawn starts a new one rather than failing on it; a helper that
        merely dropped one command (out of descriptors) is left be."""
        with contextlib.suppress(OSError, ValueError):  # ValueError: closed by _bury meanwhile
            closed = select.poll()
            closed.register(sock, select.POLLIN)  # the helper never writes on it: readable is closed
            if closed.poll(HELPER_DEATH_SECONDS * 1000):
                with self._lock:
                    self._drop(sock)

    def spawn(self, argv: list[str], cwd: str, env: dict[str, str], stdio: list[int], ctty: bool = False) -> Spawned:
        """Start a command in a new session. Raises OSError as Popen would.
        With `ctty`, its stdin (a terminal) becomes the session's controlling terminal."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with theirs:  # the helper holds the only other copy once it has it
                helper = self._request({"argv": argv, "cwd": cwd, "env": env, "ctty": ctty},
                                       [*stdio, theirs.fileno()])
            try:
                kind, value = _read_answer(ours, time.monotonic() + self.REPLY_TIMEOUT)
            except TimeoutError:  # stopped, or the box user's own program by now: its requests must not run later
                with self._lock:
                    self._drop(helper, kill=True)
                raise OSError("the spawner does not answer") from None
            except EOFError:
                self._gone(helper)
                raise OSError("the spawner ended") from None
            except OSError:
                raise OSError("the spawner ended") from None
            ours.settimeout(None)
            if kind == _ERRNO:
                code = value if 0 < value < 4096 else errno.EIO
                raise OSError(code, os.strerror(code))
            if kind != _PID or not 1 < value <= PID_MAX:  # pid 1 is PID 1's: never signalled for a command
                raise OSError(errno.EIO, "the spawner answered nonsense")
            return Spawned(value, ours, lambda: self._gone(helper))
        except BaseException:
            ours.close()
            raise


_HELPER_FD = 3  # the helper's socket, past stdio


def _keep_only(fd: int) -> None:
    """In a new helper: move its socket to _HELPER_FD and close every other descriptor it inherited
    from the agent (other commands' pipes and terminals, their sockets, the host's connections),
    none of which the box user's process may hold."""
    if fd != _HELPER_FD:
        os.dup2(fd, _HELPER_FD)
    for name in os.listdir("/proc/self/fd"):
        if int(name) > _HELPER_FD:
            with contextlib.suppress(OSError):  # the listing's own, closed by now
                os.close(int(name))


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

    def ended(to: socket.socket, code: int) -> None:
        _answer(to, _EXIT, code)
        to.close()

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
                    ended(to, 255)
                continue
            with spawned:  # a spawn holds it until its pid is answered: the exit comes after
                entry = running.pop(pid, None)
            if entry is not None:
                proc, to = entry
                proc.returncode = os.waitstatus_to_exitcode(status)
                ended(to, exit_code(proc.returncode))

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
                _answer(to, _PID, proc.pid)
                spawned.notify()
        except Exception as e:  # ValueError: a NUL in the command; SubprocessError: a terminal refused
            _answer(to, _ERRNO, (e.errno or errno.EIO) if isinstance(e, OSError) else errno.EINVAL)
            to.close()
        finally:
            for fd in stdio:
                os.close(fd)
