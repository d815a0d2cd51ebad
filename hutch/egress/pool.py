"""A box's work on one of the proxy's thread pools, within the box's share of it.

Each slow thing the proxy waits for (a name lookup, a store read) runs on threads of the proxy's
own, never on the event loop nor the default executor other work shares. A box takes a slot of
its own semaphore for each job, and the slot is given back when the job ends on its thread, not
when the caller stops waiting: a box whose jobs never end holds only its own slots.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")


async def run_held(pool: Executor, slots: asyncio.Semaphore | None, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on `pool`, holding one of `slots` until it has ended there."""
    if slots is not None:
        await slots.acquire()
    try:
        job = pool.submit(fn, *args)
    except BaseException:
        if slots is not None:
            slots.release()
        raise
    if slots is not None:
        job.add_done_callback(_releaser(asyncio.get_running_loop(), slots))
    return await asyncio.wrap_future(job)


def _releaser(loop: asyncio.AbstractEventLoop, slots: asyncio.Semaphore) -> Callable[[Future[Any]], None]:
    def release(_done: Future[Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits for the slot
            loop.call_soon_threadsafe(slots.release)
    return release
