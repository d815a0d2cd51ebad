"""Reaping what runsc leaves behind: each box's sandbox and gofer are re-parented to the node's
process (a subreaper, hutch.node.mounts), whose job it then is to collect their exits, or they
stay zombies and `runsc delete` waits for them."""

from __future__ import annotations

import asyncio
import os
import signal

from hutch.node import mounts
from hutch.node.driver import Driver

REAP_DELAY = 0.02


class Reaper:
    """Collects the exits of the node's adopted runsc processes: at SIGCHLD where the loop can
    handle it, else every REAP_DELAY."""

    def __init__(self, driver: Driver) -> None:
        mounts.become_subreaper()
        self.driver = driver
        self._poller: asyncio.Task[None] | None = None
        self._on_sigchld = False
        self._due: asyncio.TimerHandle | None = None
        # adopted runsc processes seen by name once: a burst's hundreds of reaps would otherwise
        # read /proc/<pid>/comm of every box's sandbox and gofer each time. A pid leaves the set
        # when reaped here (only here are they reaped), so a reused pid is never taken for one.
        self._adopted: set[int] = set()

    def reap(self) -> None:
        """Collect the exit of every adopted runsc process that has ended: a box's sandbox and
        gofer (runsc re-executes itself, so their name is "exe"). Never a driver call of ours: the
        event loop waits for those itself, and (under uvloop) would wait for ever if its exit
        status were taken here; it may not be in `driver.running` yet, so go by its name too."""
        children = mounts.adopted_children()
        self._adopted &= children  # gone without us (cannot happen to a child; kept true anyway)
        for pid in children - self.driver.running - self._adopted:
            if mounts.process_name(pid) == "exe":
                self._adopted.add(pid)
        for pid in list(self._adopted):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self._adopted.discard(pid)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._poller is None and not self._on_sigchld:
            # Reap when a child ends: no timer wakes an idle server, and no task is left for a forced
            # shutdown to cancel before the pool's boxes are deleted (runsc delete waits for them)
            try:
                loop.add_signal_handler(signal.SIGCHLD, self._reap_soon)
                self._on_sigchld = True
                self.reap()  # what ended before the handler was in place
            except (RuntimeError, ValueError):  # not the main thread's loop
                self._poller = loop.create_task(self._reap_forever())

    def _reap_soon(self) -> None:
        """SIGCHLD: reap in REAP_DELAY, once for every exit meanwhile (a burst of boots ends
        hundreds of runsc calls a second, and each reap reads /proc for every child)."""
        if self._due is None:
            self._due = asyncio.get_running_loop().call_later(REAP_DELAY, self._reap_now)

    def _reap_now(self) -> None:
        self._due = None
        self.reap()

    async def _reap_forever(self) -> None:
        """Where SIGCHLD cannot be handled (a loop off the main thread): look every 20 ms."""
        while True:
            await asyncio.sleep(REAP_DELAY)
            self.reap()

    def stop_polling(self) -> None:
        """The first step of a close: no more polls (SIGCHLD still reaps, for the last deletes)."""
        if self._poller is not None:
            self._poller.cancel()

    def close(self) -> None:
        """The handler let go, and what it had yet to reap reaped now."""
        if self._on_sigchld:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGCHLD)
            self._on_sigchld = False
            if self._due is not None:
                self._due.cancel()
                self._reap_now()
