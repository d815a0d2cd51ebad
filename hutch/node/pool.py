"""The warm pool: boxes of the base template booted ahead of time, so a create only claims one.

A claimed box is the caller's for good: pool boxes are never handed out twice and never get
anything of a sandbox put in them before they are claimed (env vars travel with each command,
metadata lives in the store). The pool refills one box at a time in the background, so it never
boots several boxes at once against live traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from pathlib import Path

from hutch.errors import ApiError
from hutch.node.api import BoxRef, ChannelError, Command, NodeRuntime
from hutch.node.spec import Limits

log = logging.getLogger("hutch.pool")

RETRY_SECONDS = 5.0
WARM_UP_SECONDS = 10.0


class WarmPool:
    def __init__(self, node: NodeRuntime, size: int, rootfs: Path, limits: Limits) -> None:
        self.node, self.size, self.rootfs, self.limits = node, size, rootfs, limits
        self._ready: list[BoxRef] = []
        self._wanted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._ready)

    def waiting(self) -> set[str]:
        """The runtime ids of the boxes waiting to be claimed."""
        return {box.runtime_id for box in self._ready}

    def start(self) -> None:
        if self.size > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._fill())

    async def claim(self, rootfs: Path, limits: Limits) -> BoxRef | None:
        """A ready box for this root and these limits that answers now, or None (then boot one
        as usual). A box is taken out of the pool before it is checked, so no two claims get it."""
        if rootfs != self.rootfs or limits != self.limits:
            return None
        try:
            while self._ready:
                box = self._ready.pop(0)
                try:
                    if self.node.is_running(box.runtime_id) and await self._answers(box):
                        return box
                except BaseException:  # the create was cancelled (a stop): the box is in no list now
                    self.node.stop_later(box.runtime_id, box.key)
                    raise
                self.node.stop_later(box.runtime_id, box.key)
            return None
        finally:
            self._wanted.set()

    async def _warm_up(self, box: BoxRef) -> None:
        """Run one command, so the claimer's first one finds the shell and the spawner paged in.
        Its answer is read to its end, so its connection stays open for the claimer's calls."""
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
        return agent is not None and await agent.health(timeout=1.0)

    async def _fill(self) -> None:
        while True:
            while len(self._ready) < self.size:
                try:
                    box = await self.node.boot(f"pool-{secrets.token_hex(8)}", self.rootfs, self.limits)
                except Exception as e:  # BoxStartError, or the host refused a mount: try later
                    log.error("the warm pool could not boot a box: %s", e)
                    await asyncio.sleep(RETRY_SECONDS)
                    continue
                try:
                    await self._warm_up(box)
                except BaseException:  # cancelled at shutdown: it is in no list yet, so stop it here
                    await asyncio.shield(self.node.stop(box.runtime_id, box.key))
                    raise
                self._ready.append(box)
            self._wanted.clear()
            await self._wanted.wait()

    async def close(self) -> None:
        """Stop refilling and destroy the boxes nobody claimed."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        while self._ready:
            box = self._ready.pop()
            await self.node.stop(box.runtime_id, box.key)
