"""The guard of a node's unclaimed boxes: a small process that outlives a server killed outright
(SIGKILL, the OOM killer, a crash) and then stops every box of that server's runsc root that no
record claims: the warm pool's, a create's not yet recorded, a build's. Recorded boxes run on, as
they do across any restart (the next start adopts them). A server that stops as it should says so
first (its own shutdown stopped those boxes), and the guard exits with nothing to do.

It is `python -P .../hutch/services/guard.py RUNSC STATE_DIR`, the store's URL in its environment
(not its command line, which any user may read), its stdin the read end of a pipe whose write end
only the server holds: the server's end closes however it ends. Until then
it only waits in a read (no timer, no CPU), with nothing but the standard library loaded (run by
its path, not as a module of the hutch package, whose SDK would load too: 34 MiB resident instead of 12);
the store is opened only once the server is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger("hutch.guard")

DONE = b"done\n"  # the server's last words on a stop that went as it should
STORE_VARIABLE = "HUTCH_GUARD_STORE"
# In the runsc root: held by the server for its whole life, and by a guard while it sweeps. A guard
# that finds it held when its server is gone knows a new server runs the root: it sweeps nothing
# (that server's pool and creates are in no record yet), and a new server waits for a sweep.
LOCK_NAME = ".hutch-server.lock"
LOCK_WAIT = 5.0  # a lock held longer than this after the server's end is a new server's
IN_FLIGHT_WAIT = 60.0  # a boot or a delete the server started goes on without it: let it finish first


class Guard:
    """The server's end: start the guard beside the node, release it as the last step of a stop."""

    def __init__(self, runsc: str, state_dir: Path, db_url: str) -> None:
        # -P: its own directory (which holds hutch.server's modules) is not put on the path
        self.argv = [sys.executable, "-P", str(Path(__file__).resolve()), runsc, str(state_dir)]
        self.env = {**os.environ, STORE_VARIABLE: db_url}
        self.lock_path = state_dir / LOCK_NAME
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock: int | None = None

    def start(self) -> None:
        state = self.lock_path.parent
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._lock, fcntl.LOCK_EX)  # an earlier server's guard may be sweeping: after it
        # Its own session: a Ctrl-C or a terminal's hangup reaches the server, never the guard first
        self._proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=self.env,
                                      start_new_session=True, close_fds=True)

    def release(self) -> None:
        """The server stopped its unclaimed boxes itself: the guard has nothing to do."""
        proc, self._proc = self._proc, None
        if proc is None or proc.stdin is None:
            return
        with contextlib.suppress(OSError):
            proc.stdin.write(DONE)
            proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)


def _runsc_calls_in_flight(runsc: str, state_dir: str) -> bool:
    """Whether a runsc command (not a box's sandbox or gofer) on this root still runs."""
    root_flag = f"--root={state_dir}".encode()
    name = os.path.basename(runsc).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == name and root_flag in argv:
            return True
    return False


def _runsc(runsc: str, state_dir: str, *args: str) -> str:
    out = subprocess.run([runsc, f"--root={state_dir}", *args], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    return out.stdout


def _claimed(db_url: str) -> set[str]:
    from hutch.store import Store  # only now: the guard stays small while it waits

    return {r.runtime_id for r in Store(db_url).list_sandboxes(None) if r.runtime_id}


def stop_unclaimed(runsc: str, state_dir: str, db_url: str) -> list[str]:
    """Delete every container of the root that no record names; the ids deleted. Nothing if a new
    server holds the root (its lock), and the lock is held while the sweep runs."""
    lock = os.open(Path(state_dir) / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if not _take(lock):
            log.warning("a new server runs %s: its boxes are its own to keep", state_dir)
            return []
        return _sweep(runsc, state_dir, db_url)
    finally:
        os.close(lock)


def _take(lock: int) -> bool:
    """The root's lock, once the dead server's hold on it is gone: the kernel may release its end of
    our pipe (which woke us) a moment before its lock, so a held lock is asked again for a while
    before it means a new server."""
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def _sweep(runsc: str, state_dir: str, db_url: str) -> list[str]:
    deadline = time.monotonic() + IN_FLIGHT_WAIT
    while _runsc_calls_in_flight(runsc, state_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    running = set(_runsc(runsc, state_dir, "list", "--quiet").split())
    if not running:
        return []
    unclaimed = sorted(running - _claimed(db_url))
    from hutch.node import idle

    for runtime_id in unclaimed:
        idle.thaw(runtime_id)  # a frozen box's SIGKILL waits for its thaw
        _runsc(runsc, state_dir, "delete", "--force", runtime_id)
    return unclaimed


def main(argv: list[str]) -> int:
    runsc, state_dir = argv
    db_url = os.environ[STORE_VARIABLE]
    for sig in (signal.SIGINT, signal.SIGHUP):  # the server's to act on, not ours
        signal.signal(sig, signal.SIG_IGN)
    told = b""
    while chunk := os.read(0, 64):
        told = (told + chunk)[-len(DONE):]
    if told.endswith(DONE):
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if __package__ in (None, ""):  # run by its path: hutch is where this file's package is (or installed)
        sys.path.append(str(Path(__file__).resolve().parents[2]))
    stopped = stop_unclaimed(runsc, state_dir, db_url)
    log.warning("the server ended without stopping its boxes: stopped %d that no record claims%s", len(stopped),
                f" ({', '.join(stopped)})" if stopped else "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
