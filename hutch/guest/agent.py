"""The guest agent's entry point: PID 1 inside every box.

Standard library only. It runs with the read-only runtime mounted at /.hutch/rt, so it does not
depend on what the template holds. As PID 1 it forks: the parent only reaps orphans (and ends the
box when its child ends); the child forks the spawner for the box user while it is still small
(a fork's cost under gVisor grows with the process), then imports the channel server and serves.
"""

from __future__ import annotations

import os
import signal
import sys
import time

try:
    from hutch.guest import protocol as p
    from hutch.guest.spawner import Spawner, release_host_stdio
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import protocol as p  # type: ignore[import-not-found, no-redef]
    from spawner import Spawner, release_host_stdio  # type: ignore[import-not-found, no-redef]


def serve() -> None:
    spawner = Spawner(p.BOX_UID, p.BOX_GID)
    try:
        from hutch.guest import channel
    except ImportError:
        import channel  # type: ignore[import-not-found, no-redef]
    channel.serve(spawner)


def main() -> None:
    if os.getpid() != 1:
        return serve()
    child = os.fork()
    if child == 0:
        return serve()
    release_host_stdio()  # the reaper has nothing to report; the server child does until it listens
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: os.kill(child, s))
    while True:  # PID 1: reap every orphan; the box lives as long as the server child does
        try:
            pid, status = os.wait()
        except ChildProcessError:
            time.sleep(1)
            continue
        if pid == child:
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


if __name__ == "__main__":
    main()
