"""What the proxy reads from the store for a connection, off the event loop: a box's policy (its
rules and secret bindings) and, per request that carries a stand-in, the secret's value.

Both are blocking store queries (SQLite or PostgreSQL), so they run on threads of the proxy's own
(never on the event loop, where the API, previews and every box's egress run, nor on the default
executor disk work shares). A box has at most one policy read in the pool at a time: connections
that come while it waits to start share it, and those that come once it has started share the
next one, made when it ends. Every connection so gets a read that began after it arrived, and a
rule edit made anywhere (an API server in a fleet included) applies to the very next connection;
nothing is cached. A box's secret reads take its own slots (pool.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from hutch.egress.pool import run_held

if TYPE_CHECKING:
    from hutch.egress.inject import Injection
    from hutch.egress.policy import Policy

READ_THREADS = 4
REVEALS_PER_BOX = 2  # a box's secret reads in the pool at once


class _Read:
    """One policy read in the pool; `started` is set on its thread before the store is asked."""

    def __init__(self) -> None:
        self.started = False
        self.future: asyncio.Future[Policy | None] | None = None


class _BoxReads:
    def __init__(self) -> None:
        self.current: _Read | None = None  # in the pool, queued or running
        self.after: asyncio.Future[Policy | None] | None = None  # the read after it, for those come since it started
        self.revealing = asyncio.Semaphore(REVEALS_PER_BOX)


class StoreReads:
    """`policy_for` and `reveal` are called on this object's threads."""

    def __init__(self, policy_for: Callable[[str], Policy | None],
                 reveal: Callable[[Injection], str | None] | None = None, threads: int = READ_THREADS) -> None:
        self._policy_for, self._reveal = policy_for, reveal
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="hutch-egress-store")
        self._boxes: dict[str, _BoxReads] = {}

    async def policy(self, key: str) -> Policy | None:
        """Box `key`'s policy, read after this call began."""
        box = self._boxes.get(key)
        if box is None:
            box = self._boxes[key] = _BoxReads()
        if box.current is None:
            shared = self._start(key, box)
        elif not box.current.started:
            assert box.current.future is not None
            shared = box.current.future
        else:
            if box.after is None:
                box.after = asyncio.get_running_loop().create_future()
                box.after.add_done_callback(_retrieved)
            shared = box.after
        return await asyncio.shield(shared)  # a caller that gives up does not cancel the others' read

    async def reveal(self, key: str, injection: Injection) -> str | None:
        """A secret's current value for box `key`'s request (None: the binding or the secret is gone)."""
        assert self._reveal is not None
        box = self._boxes.get(key)
        if box is None:
            box = self._boxes[key] = _BoxReads()
        return await run_held(self._pool, box.revealing, self._reveal, injection)

    def forget(self, key: str) -> None:
        """Box `key` is gone (a read still in the pool ends on its own)."""
        self._boxes.pop(key, None)

    def _start(self, key: str, box: _BoxReads) -> asyncio.Future[Policy | None]:
        read = _Read()
        read.future = future = asyncio.wrap_future(self._pool.submit(self._run, read, key))
        future.add_done_callback(_retrieved)
        future.add_done_callback(lambda _done: self._ended(key, box, read))
        box.current = read
        return future

    def _run(self, read: _Read, key: str) -> Policy | None:
        read.started = True  # before the query: whoever joins this read from now on would miss an edit
        return self._policy_for(key)

    def _ended(self, key: str, box: _BoxReads, read: _Read) -> None:
        if box.current is not read:
            return
        box.current = None
        after, box.after = box.after, None
        if after is None:
            return
        _chain(self._start(key, box), after)


def _chain(source: asyncio.Future[Policy | None], target: asyncio.Future[Policy | None]) -> None:
    def copy(done: asyncio.Future[Policy | None]) -> None:
        if target.done():
            return
        if done.cancelled():
            target.cancel()
        elif (error := done.exception()) is not None:
            target.set_exception(error)
        else:
            target.set_result(done.result())
    source.add_done_callback(copy)


def _retrieved(done: asyncio.Future[Policy | None]) -> None:
    """A read's error is its callers' (they are told); when they have all gone, it is not logged again."""
    if not done.cancelled():
        done.exception()
