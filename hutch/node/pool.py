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

import httpx

from hutch.guest import protocol
from hutch.node.node import Box, Node
from hutch.node.spec import Limits

log = logging.getLogger("hutch.pool")

RETRY_SECONDS = 5.0


class WarmPool:
    def __init__(self, node: Node, size: int, rootfs: Path, limits: Limits) -> None:
        self.node, self.size, self.rootfs, self.limits = node, size, rootfs, limits
        self._ready: list[Box] = []
        self._wanted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._ready)

    def start(self) -> None:
        if self.size > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._fill())

    async def claim(self, rootfs: Path, limits: Limits) -> Box | None:
        """A ready box for this root and these limits that answers now, or None (then boot one
        as usual). A box is taken out of the pool before it is checked, so no two claims get it."""
        if rootfs != self.rootfs or limits != self.limits:
            return None
        try:
            while self._ready:
                box = self._ready.pop(0)
                if self.node.is_running(box.runtime_id) and await self._answers(box):
                    return box
                self.node.stop_later(box.runtime_id, box.dir.name)
            return None
        finally:
            self._wanted.set()

    @staticmethod
    async def _warm_up(box: Box) -> None:
        """Run one command, so the claimer's first one finds the shell and the spawner paged in."""
        try:
            await box.agent.post(protocol.EXEC, json={"cmd": "true"}, timeout=10.0)
        except httpx.HTTPError:
            pass  # the claim's health check decides

    @staticmethod
    async def _answers(box: Box) -> bool:
        try:
            return (await box.agent.get(protocol.HEALTH, timeout=1.0)).is_success
        except httpx.HTTPError:
            return False

    async def _fill(self) -> None:
        while True:
            while len(self._ready) < self.size:
                try:
                    box = await self.node.start(f"pool-{secrets.token_hex(8)}", self.rootfs, self.limits)
                except Exception as e:  # BoxStartError, or the host refused a mount: try later
                    log.error("the warm pool could not boot a box: %s", e)
                    await asyncio.sleep(RETRY_SECONDS)
                    continue
                try:
                    await self._warm_up(box)
                except BaseException:  # cancelled at shutdown: it is in no list yet, so stop it here
                    await asyncio.shield(self.node.stop(box.runtime_id, box.dir.name))
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
            await self.node.stop(box.runtime_id, box.dir.name)
