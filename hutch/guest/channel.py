"""The agent's channel server: it answers the host over HTTP/1.1 on the box's Unix socket, and
stops and starts listening around a pause.

Standard library only; started by `agent.py`. The routes are router.py's.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading

try:
    from hutch.guest import protocol as p
    from hutch.guest.listener import ChannelServer
    from hutch.guest.procs import ProcTable
    from hutch.guest.relay import Relay
    from hutch.guest.router import Router
    from hutch.guest.spawner import Spawner, release_host_stdio
    from hutch.guest.sudod import SudoService
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import protocol as p  # type: ignore[import-not-found, no-redef]
    from listener import ChannelServer  # type: ignore[import-not-found, no-redef]
    from procs import ProcTable  # type: ignore[import-not-found, no-redef]
    from relay import Relay  # type: ignore[import-not-found, no-redef]
    from router import Router  # type: ignore[import-not-found, no-redef]
    from spawner import Spawner, release_host_stdio  # type: ignore[import-not-found, no-redef]
    from sudod import SudoService  # type: ignore[import-not-found, no-redef]

WAKE_POLL_SECONDS = 0.01  # how often a quiesced agent looks for the wake file (it is not running while paused)
# How long the listener waits between looks at a stop request: a quiesce wakes it with a connection,
# and any timer wakes the sentry (each wake of a box costs ~1 ms of host CPU under systrap)
IDLE_WAIT_SECONDS = 3600.0


def serve(spawner: Spawner) -> None:
    """Answer the host on the channel socket until the box ends.

    A pause is a protocol: the host asks to quiesce, the agent closes its listener and every
    connection and removes the socket; the host checkpoints; after a restore it sends SIGUSR1 and
    the agent listens again. Commands, files and memory carry on untouched across it.
    """
    Router.spawner = spawner
    Router.procs = ProcTable(spawner)
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
        server = ChannelServer(sock, Router)
        os.umask(old)
        release_host_stdio()  # listening: a boot failure of the agent's is past (a no-op after a wake)
        server.serve_forever(poll_interval=IDLE_WAIT_SECONDS)  # returns on quiesce: stop_serving wakes it
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
