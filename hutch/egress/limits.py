"""What one box, and all of them together, may hold of the egress proxy: connections and time.

A box's connections are capped (so one box cannot take every slot), and so are all boxes'
together, within what the process' descriptors allow (so the proxy never takes the ones the API
needs). A box's cap is also a quarter of that budget at most, whatever `nofile` is; and once every
slot is taken, a box holding less than an even share of them takes the oldest connection of the
box holding the most, if that one holds more than its share: idle connections held by a few boxes
never shut the others out. A request head, and the TLS hello after a CONNECT, must come whole within one deadline
(no slow drip), and a connection with no byte either way for a while is closed.

A box's refusals are rate-limited: each costs a store read (the box's rules). A connection whose
request head is in takes a token from the box's bucket before that read, and gives it back once it
is allowed (or if the read failed); a refusal keeps it. While the bucket is empty, the box's
connections are refused (`rate_limited`) with no read: at once when they arrive, or when their
head is in. So a box has at most as many connections waiting for a decision as it has tokens, and
one whose connections are allowed spends none for long.
"""

from __future__ import annotations

import asyncio
import resource
from dataclasses import dataclass

MAX_CONNECTIONS = 4096  # every box's together
MAX_CONNECTIONS_PER_BOX = 256
MIN_CONNECTIONS_PER_BOX = 16  # however few descriptors the process has, a box's cap is never below this
HEAD_SECONDS = 10.0  # the whole request head, and the whole TLS hello after a CONNECT
IDLE_SECONDS = 300.0  # without a byte either way, a connection is closed
REFUSALS_LOGGED_PER_SECOND = 10  # a box's refusals written one by one; the rest of each second, in one row
REFUSALS_PER_SECOND = 20.0  # a box's refusals, on average, past which its connections are refused unread
REFUSAL_BURST = 100  # ... and how many it may have at once (a client retrying a denied host fast)


@dataclass(frozen=True)
class EgressLimits:
    connections: int = MAX_CONNECTIONS
    per_box: int = MAX_CONNECTIONS_PER_BOX
    head_seconds: float = HEAD_SECONDS
    idle_seconds: float = IDLE_SECONDS
    refusals_logged_per_second: int = REFUSALS_LOGGED_PER_SECOND
    refusals_per_second: float = REFUSALS_PER_SECOND
    refusal_burst: int = REFUSAL_BURST

    def box_cap(self, budget: int) -> int:
        """A box's cap when every box's connections together may be `budget`."""
        return min(self.per_box, max(MIN_CONNECTIONS_PER_BOX, budget // 4))


def descriptor_budget() -> int:
    """The connections the process' descriptors allow the proxy: half of them, two a connection
    (the box's end and the upstream's). Read at each connection: the limit may be raised at start."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return MAX_CONNECTIONS if soft == resource.RLIM_INFINITY else soft // 4


class TokenBucket:
    """`rate` tokens a second, at most `burst` kept; full at first. Times are a monotonic clock's."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate, self.burst = rate, burst
        self._tokens = float(burst)
        self._at = now

    def has(self, now: float) -> bool:
        """Whether there is a token to take."""
        return self._refill(now) >= 1

    def take(self, now: float) -> bool:
        """Take a token, if there is one."""
        if self._refill(now) < 1:
            return False
        self._tokens -= 1
        return True

    def give(self, now: float) -> None:
        """Give a taken token back."""
        self._tokens = min(float(self.burst), self._refill(now) + 1)

    def _refill(self, now: float) -> float:
        if now > self._at:
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
            self._at = now
        return self._tokens


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
