"""What every step of a box's lifecycle shares: its record found, its deadlines, and its lock.

Every transition takes the box's lock, so two calls on one box never interleave: a connect during
a pause waits for it, two resumes restore once, a kill during a pause runs after it. Work under the
lock that the box's own programs pace (its files saved or laid back) is the one exception a kill
does not wait for: it cuts it short.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from hutch import tracing
from hutch.errors import not_found
from hutch.store import SandboxRecord, Store

T = TypeVar("T")


def find_sandbox(store: Store, team_id: str | None, sandbox_id: str) -> SandboxRecord:
    """The box's record (a team's own only, unless `team_id` is None), or 404."""
    rec = store.get_sandbox(sandbox_id, team_id)
    if rec is None:
        raise not_found("sandbox", sandbox_id)
    tracing.annotate(sandbox_id=rec.id)
    return rec


def deadline(seconds: int | float | None) -> float | None:
    return None if seconds is None else time.time() + seconds


class CutShort(Exception):
    """Work a box paces (its files saved or laid back) that a kill of the box cut short."""


class BoxLocks:
    """One lock per box, and the paced work under it that a kill cuts short."""

    def __init__(self) -> None:
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._paced: dict[str, asyncio.Task[Any]] = {}  # files saved or laid back: a kill cuts them short
        self._kills_waiting: Counter[str] = Counter()  # kills waiting for a box's lock: no paced work starts

    def __getitem__(self, sandbox_id: str) -> asyncio.Lock:
        return self._locks[sandbox_id]

    def forget(self, sandbox_id: str) -> None:
        """The box is gone: its lock goes too."""
        self._locks.pop(sandbox_id, None)

    async def paced(self, sandbox_id: str, work: Coroutine[Any, Any, T]) -> T:
        """Work under the box's lock that programs the box controls pace (its files saved or laid
        back, each within its own deadline): a kill of the box cuts it short (CutShort) rather than
        wait for it. The caller's own cancellation stays a cancellation."""
        if self._kills_waiting[sandbox_id]:
            work.close()
            raise CutShort()
        task = asyncio.ensure_future(work)
        self._paced[sandbox_id] = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not task.cancelled() or (current is not None and current.cancelling()):
                raise
            raise CutShort() from None
        finally:
            self._paced.pop(sandbox_id, None)

    @asynccontextmanager
    async def killing(self, sandbox_id: str) -> AsyncIterator[asyncio.Task[Any] | None]:
        """While a kill waits for the box's lock: no paced work starts, and the one under way (if
        any, yielded) is the kill's to cut short."""
        self._kills_waiting[sandbox_id] += 1
        try:
            yield self._paced.get(sandbox_id)
        finally:
            self._kills_waiting[sandbox_id] -= 1
            if not self._kills_waiting[sandbox_id]:
                del self._kills_waiting[sandbox_id]
