"""Spawned processes: long-lived commands with stdin, signals, an optional terminal, and output
kept in a bounded buffer so a client can go away and come back (and the box can be paused).

Standard library only. The table lives in the agent's memory, so it survives a checkpoint with
the processes themselves.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import select
import signal
import sys
import threading
import time
from typing import Any

try:
    from hutch.guest import launch as L
    from hutch.guest import protocol as p
    from hutch.guest.spawner import Spawner
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import launch as L  # type: ignore[import-not-found, no-redef]
    import protocol as p  # type: ignore[import-not-found, no-redef]
    from spawner import Spawner  # type: ignore[import-not-found, no-redef]

BUFFER_CHARS = 1 * 2**20  # output kept per process for a client that attaches later
EVENT_COST = 64  # what one buffered event costs beyond its text: a flood of 1-byte writes stays bounded
MAX_RUNNING = 64
KEEP_FINISHED = 32  # ended processes kept (output and exit code) for a late reattach
STDIN_WAIT = 10.0  # how long a stdin write waits for a process that does not read
MAX_COMMAND_SHOWN = 1024  # characters of the command in listings
EOF_CHAR = b"\x04"  # a terminal's end of input (^D): closing its master would hang it up


class Proc:
    """One spawned process and its output buffer. The pump thread sends events into it; readers
    take them by sequence number. Oldest output goes first when the buffer is full."""

    def __init__(self, launched: L.Launched, cmd: str, user: str, pty: bool) -> None:
        self.pid, self.cmd, self.user, self.pty = launched.pid, cmd, user, pty
        self.started_at = time.time()
        self._stdin = launched.stdin
        self._stdin_lock = threading.Lock()
        self._cond = threading.Condition()
        self._events: collections.deque[tuple[int, dict[str, Any]]] = collections.deque()
        self._chars = 0
        self._next_seq = 0
        self.dropped = 0  # characters of output dropped from the buffer so far
        self.exit_code: int | None = None

    # --- the pump's side ------------------------------------------------------------------------

    def send(self, event: dict[str, Any]) -> None:
        if event["t"] == p.EVENT_PING:
            return  # readers make their own
        with self._cond:
            self._append(event)
            while self._chars > BUFFER_CHARS and len(self._events) > 1:
                _seq, old = self._events.popleft()
                self._chars -= len(old.get("d", "")) + EVENT_COST
                self.dropped += len(old.get("d", ""))
            self._cond.notify_all()

    def _append(self, event: dict[str, Any]) -> None:
        event = {**event, "s": self._next_seq}
        self._events.append((self._next_seq, event))
        self._next_seq += 1
        self._chars += len(event.get("d", "")) + EVENT_COST

    def finish(self, code: int) -> None:
        with self._stdin_lock:
            L.close_quietly(self._stdin)
            self._stdin = None
        with self._cond:
            self.exit_code = code
            self._append({"t": p.EVENT_EXIT, "code": code, "timed_out": False})
            self._cond.notify_all()

    # --- readers --------------------------------------------------------------------------------

    def read(self, cursor: int, wait: float) -> tuple[list[dict[str, Any]], int, bool]:
        """Events from sequence `cursor` on (waiting up to `wait` seconds for one), the cursor
        after them, and whether the exit is among them. A gap (dropped output) is said first."""
        with self._cond:
            if self._next_seq <= cursor and self.exit_code is None:
                self._cond.wait(wait)
            first = self._events[0][0] if self._events else self._next_seq
            batch = [ev for _seq, ev in itertools.islice(self._events, max(0, cursor - first), None)]
            if cursor < first and self.dropped:
                batch.insert(0, {"t": p.EVENT_DROPPED, "chars": self.dropped})
            done = self.exit_code is not None
            return batch, self._next_seq, done

    def info(self) -> dict[str, Any]:
        return {"pid": self.pid, "command": self.cmd[:MAX_COMMAND_SHOWN], "user": self.user, "pty": self.pty,
                "started_at": self.started_at, "exit_code": self.exit_code}

    # --- control --------------------------------------------------------------------------------

    def write_stdin(self, data: bytes) -> None:
        with self._stdin_lock:
            if self._stdin is None:
                raise p.Refusal(p.ERR_STDIN_CLOSED, f"the stdin of process {self.pid} is closed")
            view = memoryview(data)
            deadline = time.monotonic() + STDIN_WAIT
            while view:  # a process that does not read makes the write wait, but not for ever
                try:
                    view = view[os.write(self._stdin, view):]
                except BlockingIOError:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise p.Refusal(p.ERR_STDIN_FULL, f"process {self.pid} has not read its stdin for "
                                        f"{STDIN_WAIT:.0f} s; {len(data) - len(view)} of {len(data)} bytes went in") from None
                    select.select([], [self._stdin], [], min(left, 1.0))
                except OSError as e:
                    raise p.Refusal(p.ERR_STDIN_CLOSED, f"stdin of process {self.pid}: {e.strerror}") from None

    def close_stdin(self) -> None:
        with self._stdin_lock:
            if self._stdin is None:
                return
            if self.pty:
                with contextlib.suppress(OSError):
                    os.write(self._stdin, EOF_CHAR)
                return
            L.close_quietly(self._stdin)
            self._stdin = None

    def signal(self, sig: int) -> bool:
        if self.exit_code is not None:
            return False
        return L.kill_group(self.pid, sig)

    def resize(self, rows: int, cols: int) -> None:
        with self._stdin_lock:
            if not self.pty or self._stdin is None:
                raise p.Refusal(p.ERR_NOT_TTY, f"process {self.pid} has no terminal")
            L.set_size(self._stdin, rows, cols)


class ProcTable:
    def __init__(self, spawner: Spawner) -> None:
        self.spawner = spawner
        self._lock = threading.Lock()
        self._procs: dict[int, Proc] = {}

    def start(self, req: dict[str, Any]) -> Proc:
        cmd: str = req["cmd"]  # a string: the channel checked it
        size = req.get("pty")
        if size is not None and not (isinstance(size, dict) and _dims(size.get("rows"), size.get("cols"))):
            raise p.Refusal(p.ERR_BAD_REQUEST, "pty must be {rows, cols} within 1..1000")
        as_root = req.get("user") == "root"
        env, home = L.command_env(as_root, req.get("env"))
        if size is not None:
            env.setdefault("TERM", "xterm-256color")
        cwd = req.get("cwd") or (home if os.path.isdir(home) else "/")
        with self._lock:  # the count, the start and the entry at once: concurrent spawns cannot pass the cap
            if sum(1 for proc in self._procs.values() if proc.exit_code is None) >= MAX_RUNNING:
                raise p.Refusal(p.ERR_TOO_MANY_PROCS, f"at most {MAX_RUNNING} spawned processes run at once")
            try:
                launched = L.launch(self.spawner, ["/bin/sh", "-c", cmd], cwd, env, as_root, stdin="pty" if size else "pipe",
                                    size=(size["rows"], size["cols"]) if size else None)
            except OSError as e:
                raise L.start_problem(e, cwd) from None
            if launched.stdin is not None:
                os.set_blocking(launched.stdin, False)
            proc = Proc(launched, cmd, "root" if as_root else p.BOX_USER, size is not None)
            self._procs[proc.pid] = proc
            self._forget_old()
        threading.Thread(target=self._pump, args=(proc, launched), daemon=True).start()
        return proc

    def _pump(self, proc: Proc, launched: L.Launched) -> None:
        code, _ = L.pump(launched, proc, None)
        proc.finish(code)

    def _forget_old(self) -> None:
        finished = sorted((proc.started_at, pid) for pid, proc in self._procs.items() if proc.exit_code is not None)
        for _started, pid in finished[:max(0, len(finished) - KEEP_FINISHED)]:
            del self._procs[pid]

    def get(self, pid: int) -> Proc:
        with self._lock:
            proc = self._procs.get(pid)
        if proc is None:
            raise p.Refusal(p.ERR_NO_PROCESS, f"no process {pid} was spawned in this box (or it ended long ago)")
        return proc

    def running(self) -> list[Proc]:
        with self._lock:
            return [proc for proc in self._procs.values() if proc.exit_code is None]


def _dims(rows: Any, cols: Any) -> bool:
    return all(type(v) is int and 1 <= v <= 1000 for v in (rows, cols))


def parse_resize(req: Any) -> tuple[int, int]:
    if not isinstance(req, dict) or not _dims(req.get("rows"), req.get("cols")):
        raise p.Refusal(p.ERR_BAD_REQUEST, "resize takes {rows, cols} within 1..1000")
    return req["rows"], req["cols"]


def parse_signal(req: Any) -> int:
    sig = req.get("signal") if isinstance(req, dict) else None
    if type(sig) is not int or not 1 <= sig < signal.NSIG:
        raise p.Refusal(p.ERR_BAD_REQUEST, f"signal must be a number in 1..{signal.NSIG - 1}")
    return sig
