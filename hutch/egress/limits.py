"""What one box, and all of them together, may hold of the egress proxy: connections and time.

A box's connections are capped (so one box cannot take every slot), and so are all boxes'
together, within what the process' descriptors allow (so the proxy never takes the ones the API
needs). A request head, and the TLS hello after a CONNECT, must come whole within one deadline
(no slow drip), and a connection with no byte either way for a while is closed.
"""

from __future__ import annotations

import asyncio
import resource
from dataclasses import dataclass

MAX_CONNECTIONS = 4096  # every box's together
MAX_CONNECTIONS_PER_BOX = 256
HEAD_SECONDS = 10.0  # the whole request head, and the whole TLS hello after a CONNECT
IDLE_SECONDS = 300.0  # without a byte either way, a connection is closed
REFUSALS_LOGGED_PER_SECOND = 10  # a box's refusals written one by one; the rest of each second, in one row


@dataclass(frozen=True)
class EgressLimits:
    connections: int = MAX_CONNECTIONS
    per_box: int = MAX_CONNECTIONS_PER_BOX
    head_seconds: float = HEAD_SECONDS
    idle_seconds: float = IDLE_SECONDS
    refusals_logged_per_second: int = REFUSALS_LOGGED_PER_SECOND


def descriptor_budget() -> int:
    """The connections the process' descriptors allow the proxy: half of them, two a connection
    (the box's end and the upstream's). Read at each connection: the limit may be raised at start."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return MAX_CONNECTIONS if soft == resource.RLIM_INFINITY else soft // 4


class Idle:
    """Cancels the task it was made in once nothing has moved for `seconds`. Marking a move is a
    clock read; the one timer is moved on only when it fires."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._last = self._loop.time()
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self.touch()
        self._timer = self._loop.call_at(self._last + self.seconds, self._check)

    def touch(self) -> None:
        self._last = self._loop.time()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _check(self) -> None:
        due = self._last + self.seconds
        if self._loop.time() < due:
            self._timer = self._loop.call_at(due, self._check)
        elif self._task is not None:
            self.expired = True
            self._task.cancel()
