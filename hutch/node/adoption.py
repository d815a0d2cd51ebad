"""Taking boxes back after a restart: boxes outlive the server, so a new node takes back those its
store says still run (and that answer), and removes every other container, directory and disk it
finds (what a crash, or a create cut short, left)."""

from __future__ import annotations

import asyncio

from hutch.node import mounts
from hutch.node.boxegress import EgressListeners
from hutch.node.bundle import Bundles
from hutch.node.driver import Driver, DriverError, state_or_none
from hutch.node.held import HeldBoxes
from hutch.node.launch import Launcher
from hutch.node.teardown import Teardown

ADOPT_TIMEOUT = 5.0  # for a box's agent to answer: it may be listening again just now


class Adoption:
    """A node's start: the boxes it is told of taken back, the rest removed."""

    def __init__(self, driver: Driver, held: HeldBoxes, bundles: Bundles, egress: EgressListeners,
                 launcher: Launcher, teardown: Teardown) -> None:
        self.driver = driver
        self.held = held
        self.bundles = bundles
        self.egress = egress
        self.launcher = launcher
        self.teardown = teardown

    async def adopt(self, running: dict[str, str]) -> set[str]:
        """Take back the boxes still running (runtime id -> key), and remove every other
        container and box directory. Returns the runtime ids found alive."""
        # all at once: a box that never answers must not hold up the others, or the start
        taken = await asyncio.gather(*(self._take(r, k) for r, k in running.items()))
        alive = {r for r, ok in zip(running, taken, strict=True) if ok}
        try:
            strays = set(await self.driver.list_ids()) - alive
        except DriverError:
            strays = set()
        for runtime_id in strays:
            await self.teardown.stop(runtime_id)
        await self.bundles.sweep({running[r] for r in alive})
        return alive

    async def _take(self, runtime_id: str, key: str) -> bool:
        box = self.bundles.box(runtime_id, key)
        box.on_disk = mounts.is_mount(box.disk_dir)
        state = await state_or_none(self.driver, runtime_id)  # thawed first (Thawing): a killed server may have left it frozen
        ok = state is not None and state.get("status") == "running"
        if ok and state:
            self.held.watch(runtime_id, int(state.get("pid") or 0))
            try:
                await self.launcher.wait_for_agent(box, timeout=ADOPT_TIMEOUT)
            except (TimeoutError, RuntimeError):
                ok = False
        if ok:
            self.held.boxes[runtime_id] = box
            await self.egress.open(box)  # the last server's listener went with it
        else:
            self.held.unwatch(runtime_id)
            await self.teardown.remove(box)
        return ok
