"""The network log's rows, and their writer: a thread of its own, in order, with each box's
refusals coalesced past a rate.

Every attempt is a row, written by the server's `record` on this thread (never on the event
loop). A box's refusals (denied or failed) are written one by one up to `per_second` in each
second; the rest of that second are only counted, and told in one row when it ends: rule
`coalesced`, the last one's host, port and verdict, and in `error` how many it stands for. Allowed
connections are always written one by one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

log = logging.getLogger("hutch.egress")

COALESCED = "coalesced"
MAX_BACKLOG = 1024  # rows waiting to be written, past which each connection waits for its own


@dataclass
class LogEntry:
    sandbox_id: str
    at: float
    host: str
    port: int
    ip: str | None
    verdict: str  # "allowed" | "denied" | "failed" (allowed, but it could not be made)
    rule: str
    bytes_out: int = 0  # from the box
    bytes_in: int = 0  # to the box
    error: str | None = None
    secrets: list[str] = field(default_factory=list)  # names of the secrets swapped into its requests


@dataclass
class _Second:
    """One box's refusals in the second that began at `start` (the loop's clock)."""

    start: float
    written: int = 0
    held: int = 0
    last: LogEntry | None = None
    timer: asyncio.TimerHandle | None = None


class NetworkLog:
    def __init__(self, record: Callable[[LogEntry], None], per_second: int) -> None:
        self.record = record
        self.per_second = per_second
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="hutch-egress-log")
        self._seconds: dict[str, _Second] = {}
        self._queued = 0
        self._written = 0

    def add(self, key: str, entry: LogEntry) -> asyncio.Future[None] | None:
        """Write box `key`'s `entry` (or only count it). Rows go in the background; once more than
        MAX_BACKLOG wait, a future back, done when this one is written: the caller waits for it,
        so a flood of connections is slowed by its own rows and nothing queues without bound."""
        if entry.verdict != "allowed" and not self._admit(key, entry):
            return None
        written = self._submit(entry)
        return asyncio.wrap_future(written) if self._queued - self._written > MAX_BACKLOG else None

    def call(self, fn: Callable[..., None], *args: Any) -> None:
        """Another of the proxy's store writes (a secret's audit row), on the same thread, in order."""
        self._queued += 1
        self._pool.submit(self._run, fn, *args)

    def forget(self, key: str) -> None:
        """Box `key` is gone: what it has held back is told now."""
        self._tell(key)

    def _admit(self, key: str, entry: LogEntry) -> bool:
        loop = asyncio.get_running_loop()
        now = loop.time()
        second = self._seconds.get(key)
        if second is not None and now >= second.start + 1:
            self._tell(key)
            second = None
        if second is None:
            second = self._seconds[key] = _Second(now)
        if second.written < self.per_second:
            second.written += 1
            return True
        second.held += 1
        second.last = entry
        if second.timer is None:
            second.timer = loop.call_at(second.start + 1, self._tell, key)
        return False

    def _tell(self, key: str) -> None:
        second = self._seconds.pop(key, None)
        if second is None:
            return
        if second.timer is not None:
            second.timer.cancel()
        if second.last is not None:
            last = second.last
            self._submit(replace(
                last, rule=COALESCED, bytes_out=0, bytes_in=0, secrets=[],
                error=f"{second.held} more refused connections in this second, not written one by one "
                      f"(the last: {last.rule})"[:200]))

    def _submit(self, entry: LogEntry) -> Future[None]:
        self._queued += 1
        return self._pool.submit(self._run, self.record, entry)

    def _run(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("writing the network log")
        finally:
            self._written += 1  # by this thread alone, as _queued by the loop's: neither loses a count
