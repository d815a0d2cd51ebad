"""Stopping boxes: a box's container deleted and everything the host held for it let go (its agent's
client, its egress listener, its samples, its directory and disk). A delete that fails (a timeout
on a starved host) is tried again in the background, so a stop never leaves a box behind for good;
the node's close() waits for whatever is still going on here."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from hutch.node import metrics
from hutch.node.boxegress import EgressListeners
from hutch.node.bundle import Bundles
from hutch.node.driver import Driver, DriverError
from hutch.node.held import HeldBoxes
from hutch.node.nodebox import Box

log = logging.getLogger("hutch.node")


class Teardown:
    """The node's stops, and the work of them that nobody waits for."""

    def __init__(self, driver: Driver, held: HeldBoxes, bundles: Bundles, egress: EgressListeners,
                 usage: metrics.Usage) -> None:
        self.driver = driver
        self.held = held
        self.bundles = bundles
        self.egress = egress
        self.usage = usage
        self._background: set[asyncio.Task[None]] = set()

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` without waiting for it, kept until done (and awaited by finish())."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def finish(self) -> None:
        """Wait for the work left in the background (at the node's close)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def stop(self, runtime_id: str, key: str | None = None) -> None:
        """Destroy a box and everything the host held for it. Idempotent."""
        self.held.stopping.add(runtime_id)
        try:
            self.held.unwatch(runtime_id)
            box = self.held.boxes.pop(runtime_id, None)
            box = box or self.bundles.box(runtime_id, key or runtime_id)
            self.usage.forget(box.dir.name)
            await self.remove(box)
        finally:
            self.held.stopping.discard(runtime_id)

    def stop_later(self, runtime_id: str, key: str) -> None:
        """stop(), without waiting for it: for callers that must not block on the driver."""
        self.in_background(self.stop(runtime_id, key))

    async def remove(self, box: Box) -> None:
        """A box no longer held: its container deleted, then its directory and disk."""
        await box.release()
        await self.egress.close(box)
        try:
            await self.driver.delete(box.runtime_id)
        except DriverError as e:  # e.g. a timeout on a starved host: the box is still to go, later
            log.warning("delete %s: %s; trying again in the background", box.runtime_id, e)
            self.in_background(self._remove_later(box))
            return
        await self.bundles.forget(box)

    async def _remove_later(self, box: Box, tries: int = 5) -> None:
        for attempt in range(tries):
            await asyncio.sleep(2.0 * (attempt + 1))
            try:
                await self.driver.delete(box.runtime_id)
            except DriverError as e:
                log.warning("delete %s, try %d: %s", box.runtime_id, attempt + 2, e)
                continue
            await self.bundles.forget(box)
            return
        log.error("box %s could not be deleted; the next start removes it", box.runtime_id)

    async def delete_checkpointed(self, runtime_id: str) -> None:
        """The container of a box that stopped at its checkpoint (its directory is gone already)."""
        try:
            await self.driver.delete(runtime_id)
        except DriverError as e:
            log.warning("delete %s after its checkpoint: %s", runtime_id, e)
        finally:
            self.held.stopping.discard(runtime_id)
