"""Starting a command in the box and pumping its output: shared by exec and spawned processes.

Standard library only.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import selectors
import signal
import struct
import sys
import time
from collections.abc import Callable
from typing import Any, Literal, Protocol

try:
    from hutch.guest import protocol as p
    from hutch.guest.spawner import Spawner, exit_code, popen
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import protocol as p  # type: ignore[import-not-found, no-redef]
    from spawner import Spawner, exit_code, popen  # type: ignore[import-not-found, no-redef]

CHUNK = 256 * 1024
PING_SECONDS = 10.0
POLL_SECONDS = 0.05  # how often a running root command's exit is looked for (the spawner's report theirs)
EXIT_GRACE = 0.1  # output still read after the command exits, from what it left running
KILL_GRACE = 2.0  # how long a command killed at its deadline has to be reported gone
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TTY_GID = 5  # Debian's "tty" group, which owns terminals
_PROXY = f"http://127.0.0.1:{p.PROXY_PORT}"
# The box's only way out (see relay.py), in the spellings curl, pip, git, requests and urllib read;
# not for the box itself (0.0.0.0 too, which is the box's own loopback: it has no network card).
PROXY_ENV = {"HTTP_PROXY": _PROXY, "HTTPS_PROXY": _PROXY, "http_proxy": _PROXY, "https_proxy": _PROXY,
             "NO_PROXY": "localhost,127.0.0.1,::1,0.0.0.0", "no_proxy": "localhost,127.0.0.1,::1,0.0.0.0"}

# Where TLS clients find what to trust: the box's bundle, which holds hutch's egress CA (it signs
# what the box sees of the hosts it holds secrets for), in the spellings OpenSSL, requests, curl,
# git, pip and Node read. Only when the host mounted it.
TRUST_ENV = {"SSL_CERT_FILE": p.CA_BUNDLE, "REQUESTS_CA_BUNDLE": p.CA_BUNDLE, "CURL_CA_BUNDLE": p.CA_BUNDLE,
             "GIT_SSL_CAINFO": p.CA_BUNDLE, "PIP_CERT": p.CA_BUNDLE,
             "NODE_EXTRA_CA_CERTS": p.CA_CERT} if os.path.isfile(p.CA_BUNDLE) else {}

StdinKind = Literal["null", "pipe", "pty"]


class Sink(Protocol):
    def send(self, event: dict[str, Any]) -> None: ...


class Launched:
    """A started command. (A plain class: dataclasses, with the inspect it imports, cost ~25 ms of
    every boot under gVisor.)"""

    def __init__(self, pid: int, poll: Callable[[], int | None], wait: Callable[[], int], outputs: dict[int, str],
                 stdin: int | None, exit_fd: int | None) -> None:
        self.pid = pid
        self.poll = poll  # the exit code once it has ended
        self.wait = wait  # the exit code, waiting for it
        self.outputs = outputs  # fd -> event kind ("stdout" / "stderr"), for pump()
        self.stdin = stdin  # the write end of its stdin pipe, or the terminal's master side
        self.exit_fd = exit_fd  # readable once the exit is known (its owner closes it), if there is one


def command_env(as_root: bool, extra: dict[str, Any] | None) -> tuple[dict[str, str], str]:
    """A login-like environment for the command's user, with the caller's variables on top;
    and that user's home."""
    home = "/root" if as_root else p.BOX_HOME
    user = "root" if as_root else p.BOX_USER
    env = {"PATH": DEFAULT_PATH, "HOME": home, "USER": user, "LOGNAME": user, "SHELL": "/bin/sh", "LANG": "C.UTF-8",
           **PROXY_ENV, **TRUST_ENV}
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env, home


def start_problem(e: OSError, cwd: str) -> p.Refusal:
    """The agent's error (code and message) for a command that could not start."""
    if isinstance(e, (FileNotFoundError, NotADirectoryError)):
        return p.Refusal(p.ERR_BAD_CWD, f"no such directory: {cwd}")
    if isinstance(e, PermissionError):
        return p.Refusal(p.ERR_BAD_CWD, f"no permission to enter {cwd}")
    return p.Refusal(p.ERR_START_FAILED, f"could not start: {e}")


def set_size(fd: int, rows: int, cols: int) -> None:
    """Set a terminal's size; the kernel tells its foreground process group (SIGWINCH)."""
    import fcntl
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def launch(spawner: Spawner, argv: list[str], cwd: str, env: dict[str, str], as_root: bool,
           stdin: StdinKind = "null", size: tuple[int, int] | None = None) -> Launched:
    """Start a command in its own session. Its stdin is /dev/null, a pipe, or (with "pty") a new
    terminal that is also its stdout, stderr and controlling terminal."""
    ours: list[int] = []  # the host side of each stream, returned
    theirs: list[int] = []  # the command's side, closed here once it has them
    try:
        if stdin == "pty":
            master, slave = os.openpty()
            ours.append(master)
            theirs.append(slave)
            if not as_root:  # the box user's own terminal, as a login would give it
                os.fchown(slave, p.BOX_UID, TTY_GID)
                os.fchmod(slave, 0o620)
            set_size(master, *(size or (24, 80)))
            stdio = [slave, slave, slave]
            outputs = {os.dup(master): p.EVENT_STDOUT}  # pump() closes its own copy at the end
            ours.extend(outputs)
            stdin_fd: int | None = master
        else:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            ours += [out_r, err_r]
            theirs += [out_w, err_w]
            if stdin == "pipe":
                in_r, stdin_fd = os.pipe()
                ours.append(stdin_fd)
            else:
                in_r, stdin_fd = os.open(os.devnull, os.O_RDONLY), None
            theirs.append(in_r)
            stdio = [in_r, out_w, err_w]
            outputs = {out_r: p.EVENT_STDOUT, err_r: p.EVENT_STDERR}
        ctty = stdin == "pty"
        exit_fd: int | None = None
        if as_root:  # the agent itself is root: Popen may use vfork
            proc = popen(argv, cwd, env, stdio, ctty)
            pid = proc.pid

            def poll() -> int | None:
                code = proc.poll()
                return None if code is None else exit_code(code)

            def wait() -> int:
                return exit_code(proc.wait())
        else:
            spawned = spawner.spawn(argv, cwd, env, stdio, ctty)
            pid, poll, wait, exit_fd = spawned.pid, spawned.poll, spawned.wait, spawned.fd
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    finally:
        for fd in set(theirs):
            os.close(fd)
    if stdin_fd is not None:
        os.set_inheritable(stdin_fd, False)
    return Launched(pid, poll, wait, outputs, stdin_fd, exit_fd)


def pump(cmd: Launched, sink: Sink, timeout: float | None) -> tuple[int, bool]:
    """Relay a command's output until it has exited and its output is drained; kill its process
    group at the deadline. Returns its exit code and whether it timed out. Closes the fds.
    A command with an exit fd wakes the pump when it ends; one without is polled for it.

    Something it left in the background (`server &`) may hold the pipes open for ever: once the
    command itself has exited, what is left is read for a moment and the pipes are let go. A ping
    goes to the sink after a few seconds of silence, so a hung box shows as a dead stream.
    """
    pid, poll = cmd.pid, cmd.poll
    deadline = time.monotonic() + timeout if timeout else None
    sel = selectors.DefaultSelector()
    if cmd.exit_fd is not None:
        sel.register(cmd.exit_fd, selectors.EVENT_READ, None)  # data None: the exit, not an output
    decoders = {}
    for fd, kind in cmd.outputs.items():
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, kind)
        decoders[fd] = codecs.getincrementaldecoder("utf-8")(errors="replace")
    timed_out = False
    code: int | None = None
    exited_at: float | None = None
    last_sent = time.monotonic()
    while sel.get_map():
        now = time.monotonic()
        if deadline is not None and now >= deadline and not timed_out:
            timed_out = True
            kill_group(pid)
        if deadline is not None and timed_out and exited_at is None and now >= deadline + KILL_GRACE:
            code = 255  # killed, and its exit never reported (a stopped spawner): the call ends anyway
            break
        if exited_at is None and cmd.exit_fd is None and (code := poll()) is not None:
            exited_at = now
        if exited_at is not None and now - exited_at >= EXIT_GRACE:
            break
        if now - last_sent >= PING_SECONDS:
            sink.send({"t": p.EVENT_PING})
            last_sent = now
        wait = POLL_SECONDS
        if cmd.exit_fd is not None:  # its exit wakes the select: wake otherwise only for what falls due
            due = [last_sent + PING_SECONDS,
                   *([] if deadline is None else [deadline + KILL_GRACE if timed_out else deadline]),
                   *([exited_at + EXIT_GRACE] if exited_at is not None else [])]
            wait = max(0.0, min(due) - now)
        for key, _ in sel.select(wait):
            if key.data is None:  # the exit is known (or its reporter is gone): read it
                sel.unregister(key.fileobj)
                code, exited_at = cmd.wait(), time.monotonic()  # not `now`: the select may have slept long
                continue
            try:
                data = os.read(key.fd, CHUNK)
            except BlockingIOError:
                continue
            except OSError as e:  # a terminal whose every other end has closed reads EIO
                if e.errno != errno.EIO:
                    raise
                data = b""
            if not data:
                sel.unregister(key.fileobj)
                os.close(key.fd)
                data_tail = decoders[key.fd].decode(b"", final=True)
                if data_tail:
                    sink.send({"t": key.data, "d": data_tail})
                continue
            text = decoders[key.fd].decode(data)
            if text:
                sink.send({"t": key.data, "d": text})
                last_sent = now
    for key in list(sel.get_map().values()):  # held open by something in the background
        sel.unregister(key.fileobj)
        if key.data is not None:
            os.close(key.fd)
    sel.close()
    if code is None:  # the output ended before the exit was seen
        if deadline is not None and not timed_out:
            while (code := poll()) is None and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS)
            if code is None:
                timed_out = True
                kill_group(pid)
        if code is None:
            code = cmd.wait()
    return code, timed_out


def kill_group(pid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal the command's whole process group (its session); False if it is gone."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def close_quietly(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)

