"""The warm pool: boxes of the base template booted ahead of time, so a create only claims one.

A claimed box is the caller's for good: pool boxes are never handed out twice and never get
anything of a sandbox put in them before they are claimed (env vars travel with each command,
metadata lives in the store).

By default (`size` None) the pool is sized ahead of demand by memory: it holds `most` boxes (a
memory budget; see `default_most`), so a burst on a server started a minute ago claims booted
boxes. The first `URGENT` of them are refilled at once, the rest only once creates have been quiet
for `QUIET_SECONDS`, so their boots do not compete with a burst (past the one boot under way).
Given a `size`, the pool holds `size` boxes, and more after a burst: as many as the most creates
it could serve within any `BURST_SECONDS` of the last `RECENT_SECONDS`, at most `most`, so
rollouts that come in rounds find their next round booted; below `size` it refills at once, above
it only when creates are quiet. It boots one box at a time, so never several at once against live
traffic. A waiting box is frozen (its cgroup's freezer,
hutch.node.idle), so the pool costs memory only, no CPU; its claim thaws it, and so does any
driver call on it (hutch.node.idle.Thawing). Where a box cannot be frozen the pool stays at `size`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections import deque
from pathlib import Path

from hutch.errors import ApiError
from hutch.node import host, idle
from hutch.node.api import BoxRef, ChannelError, Command, NodeRuntime
from hutch.node.spec import Limits

log = logging.getLogger("hutch.pool")

RETRY_SECONDS = 5.0
STOPS_AT_ONCE = 8  # pool boxes stopped together at shutdown (each a runsc delete: a process and a wait)
WARM_UP_SECONDS = 10.0
CLAIM_HEALTH_SECONDS = 5.0  # a thawed box answers at once; a burst's creates can keep the loop that long
BURST_SECONDS = 10.0  # creates this close together are one burst
RECENT_SECONDS = 600.0  # how long a burst keeps the pool grown
QUIET_SECONDS = 1.0  # no create for this long: the pool may grow past its size
BOX_MIB = 64  # a waiting box's host memory (its sandbox and gofer, ~50 MiB, and their kernel pages)
MEMORY_SHARE = 6  # the pool's budget: a sixth of the host's memory, by default
MOST_BOXES = 100  # past this, a burst's creates are better served by a fleet than by one host's pool
URGENT = 2  # a pool sized by memory refills this many at once, the rest when creates are quiet


def default_most(size: int, memory_bytes: int | None = None) -> int:
    """How many boxes the pool may grow to: a sixth of the host's memory (what is available when
    the server starts) at BOX_MIB a box, at most MOST_BOXES, and never under `size`."""
    if memory_bytes is None:
        memory_bytes = available_memory()
    return max(size, min(MOST_BOXES, memory_bytes // MEMORY_SHARE // (BOX_MIB * 2**20)))


def available_memory() -> int:
    """MemAvailable of /proc/meminfo, in bytes (the physical memory where it cannot be read)."""
    found = host.meminfo()
    if "MemAvailable" in found:
        return found["MemAvailable"]
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class Demand:
    """The creates the pool could serve, and the largest burst of them lately."""

    def __init__(self) -> None:
        self._burst: deque[float] = deque()  # the creates of the last BURST_SECONDS
        self._peaks: deque[tuple[float, int]] = deque()  # (when, burst size), sizes falling
        self.last = float("-inf")

    def add(self, now: float) -> None:
        self.last = now
        self._burst.append(now)
        while self._burst[0] < now - BURST_SECONDS:
            self._burst.popleft()
        size = len(self._burst)
        while self._peaks and self._peaks[-1][1] <= size:  # a smaller burst before this one never counts again
            self._peaks.pop()
        self._peaks.append((now, size))

    def peak(self, now: float) -> int:
        """The largest burst of the last RECENT_SECONDS (0: none)."""
        while self._peaks and self._peaks[0][0] < now - RECENT_SECONDS:
            self._peaks.popleft()
        return self._peaks[0][1] if self._peaks else 0

    def next_change(self, now: float) -> float:
        """Seconds until the peak may fall."""
        return self._peaks[0][0] + RECENT_SECONDS - now if self._peaks else RECENT_SECONDS


class WarmPool:
    def __init__(self, node: NodeRuntime, size: int | None, rootfs: Path, limits: Limits,
                 most: int | None = None) -> None:
        """`size` None: sized ahead of demand by memory (`most` boxes, the first URGENT refilled at once)."""
        self.ahead = size is None
        self.size = size if size is not None else URGENT if most is None else min(URGENT, most)
        self.node, self.rootfs, self.limits = node, rootfs, limits
        self.most = default_most(self.size) if most is None else max(self.size, most)
        self.demand = Demand()
        self.freezes = True  # False once a box could not be frozen: then the pool never grows
        self._ready: list[BoxRef] = []
        self._wanted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._ready)

    def waiting(self) -> set[str]:
        """The runtime ids of the boxes waiting to be claimed."""
        return {box.runtime_id for box in self._ready}

    def target(self, now: float) -> int:
        """How many boxes the pool should hold now."""
        if self.size == 0 or not self.freezes:
            return self.size
        if self.ahead:
            return self.most
        return min(self.most, max(self.size, self.demand.peak(now)))

    def start(self) -> None:
        if self.size > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._fill())

    async def claim(self, rootfs: Path, limits: Limits) -> BoxRef | None:
        """A ready box for this root and these limits that answers now, or None (then boot one
        as usual). A box is taken out of the pool before it is checked, so no two claims get it."""
        if rootfs != self.rootfs or limits != self.limits:
            return None
        self.demand.add(time.monotonic())
        try:
            while self._ready:
                box = self._ready.pop(0)
                try:
                    idle.thaw(box.runtime_id)
                    if not self.node.is_running(box.runtime_id):  # it died waiting: the next one
                        self.node.stop_later(box.runtime_id, box.key)
                        continue
                    if await self._answers(box):
                        return box
                except BaseException:  # the create was cancelled (a stop): the box is in no list now
                    self.node.stop_later(box.runtime_id, box.key)
                    raise
                # it runs but does not answer: boot instead of waiting on the next one too
                log.warning("a pooled box did not answer its claim: stopped")
                self.node.stop_later(box.runtime_id, box.key)
                return None
            return None
        finally:
            self._wanted.set()

    async def _warm_up(self, box: BoxRef) -> None:
        """Run one command, so the claimer's first one finds the shell and the spawner paged in."""
        agent = self.node.agent(box.runtime_id)
        if agent is None:
            return  # it ended: the claim's check finds out

        async def run_true() -> None:
            events = await agent.exec(Command("true"), None)
            try:
                async for _ in events:
                    pass
            finally:
                await events.aclose()

        with contextlib.suppress(ApiError, ChannelError, TimeoutError):
            await asyncio.wait_for(run_true(), WARM_UP_SECONDS)

    async def _answers(self, box: BoxRef) -> bool:
        agent = self.node.agent(box.runtime_id)
        return agent is not None and await agent.health(timeout=CLAIM_HEALTH_SECONDS)

    def _may_boot(self, now: float) -> bool:
        return len(self._ready) < self.size or now - self.demand.last >= QUIET_SECONDS

    async def _fill(self) -> None:
        while True:
            try:
                await self._fill_once()
            except Exception:  # never let one failure end the refills for good
                log.exception("the warm pool's refill")
                await asyncio.sleep(RETRY_SECONDS)

    async def _fill_once(self) -> None:
        now = time.monotonic()
        target = self.target(now)
        while len(self._ready) > target:  # the burst that grew it is past
            box = self._ready.pop()
            self.node.stop_later(box.runtime_id, box.key)  # the node's to finish, even at a shutdown
        if len(self._ready) < target and self._may_boot(now):
            await self._add_one()
            return
        wait = self.demand.next_change(now)
        if len(self._ready) < target:  # creates are not quiet yet
            wait = self.demand.last + QUIET_SECONDS - now
        self._wanted.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wanted.wait(), max(0.05, wait))

    async def _add_one(self) -> None:
        try:
            box = await self.node.boot(f"pool-{secrets.token_hex(8)}", self.rootfs, self.limits)
        except Exception as e:  # BoxStartError, or the host refused a mount: try later
            log.error("the warm pool could not boot a box: %s", e)
            await asyncio.sleep(RETRY_SECONDS)
            return
        try:
            await self._warm_up(box)
        except BaseException:  # cancelled at shutdown: it is in no list yet, so stop it here
            await asyncio.shield(self.node.stop(box.runtime_id, box.key))
            raise
        if self.freezes and not idle.freeze(box.runtime_id):
            log.warning("the warm pool's boxes cannot be frozen here: it keeps to its size (%d)", self.size)
            self.freezes = False
        self._ready.append(box)

    async def close(self) -> None:
        """Stop refilling and destroy the boxes nobody claimed."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        boxes, self._ready = self._ready, []
        slots = asyncio.Semaphore(STOPS_AT_ONCE)

        async def stop(box: BoxRef) -> None:
            async with slots:
                try:
                    await self.node.stop(box.runtime_id, box.key)  # thawed first by the driver (Thawing)
                except Exception:  # the others are still stopped
                    log.exception("stopping the warm pool's box %s", box.runtime_id)

        # at once, a few at a time: a grown pool of 50 one after another outlasts a service
        # manager's stop timeout, and what is left then is the guard's to sweep
        await asyncio.gather(*(stop(box) for box in boxes))
