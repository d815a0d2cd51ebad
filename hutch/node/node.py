"""The node runtime: starts, finds, watches and stops the boxes on this host (the
`hutch.node.api.NodeRuntime` of a single host, in the server's process).

A box is a detached container of the node's driver (runsc by default) whose PID 1 is the guest
agent, listening on a Unix socket in a per-box host directory. The node holds one agent client per
box for that socket (hutch.node.agent), pinned once (hutch.node.nodebox).

`Node` is the one object the server talks to; each of its jobs has a module of its own, which it
wires together here: the boxes held and their exits (held), what a box runs from on the host
(bundle), its egress listener (boxegress), the host's cgroup limits (hostlimits), boots and
restores (launch), pauses and snapshots (checkpoints), stops (teardown), taking boxes back after
a restart (adoption), reaping runsc's orphans (reaper) and sampling what boxes use (metrics).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from hutch.node import host, metrics
from hutch.node.adoption import Adoption
from hutch.node.agent import Channel
from hutch.node.api import BoxAgent, BoxRef, Capacity, UsageSample, VolumeMount
from hutch.node.boxegress import Egress, EgressListeners
from hutch.node.bundle import Bundles
from hutch.node.checkpoints import Checkpoints
from hutch.node.driver import Driver, DriverError
from hutch.node.held import HeldBoxes
from hutch.node.hostlimits import HostLimits
from hutch.node.idle import Freezer
from hutch.node.launch import Launcher
from hutch.node.reaper import Reaper
from hutch.node.runsc import Runsc, RunscConfig
from hutch.node.spec import AgentRuntime, Limits
from hutch.node.teardown import Teardown
from hutch.node.volumes import VolumeDisks

# The drivers by name, as uvicorn names its HTTP implementations; each is made from the same config.
DRIVERS: dict[str, Callable[[RunscConfig], Driver]] = {"runsc": Runsc}
DEFAULT_DRIVER = "runsc"


class Node:
    """The boxes of this host, run by `driver`, each with its agent's client and its egress
    listener (a hutch.node.api.NodeRuntime)."""

    def __init__(self, run_dir: Path, driver: Driver, runtime: AgentRuntime, trust_dir: Path | None = None,
                 disks_dir: Path | None = None, egress: Egress | None = None, allow_unlimited: bool = False,
                 volumes: VolumeDisks | None = None) -> None:
        self.driver = driver
        self.idle: Freezer | None = None  # what freezes idle boxes (hutch.node.idle), set by the node's owner
        self.usage_samples = metrics.Usage()
        self._limits = HostLimits(allow_unlimited)
        self._bundles = Bundles(run_dir / "boxes", runtime, trust_dir, disks_dir, volumes)
        self._reaper = Reaper(driver)
        self._sampler: asyncio.Task[None] | None = None
        self._held = HeldBoxes()
        listeners = EgressListeners(egress)  # each box's way out; no proxy: boxes have none
        self._teardown = Teardown(driver, self._held, self._bundles, listeners, self.usage_samples)
        self._launcher = Launcher(driver, self._held, self._bundles, listeners, self._limits, self._teardown,
                                  self._channel)
        self._checkpoints = Checkpoints(driver, self._held, self._bundles, listeners, self._limits, self._launcher,
                                        self._teardown, self.usage_samples)
        self._adoption = Adoption(driver, self._held, self._bundles, listeners, self._launcher, self._teardown)

    def _channel(self, runtime_id: str) -> Channel | None:
        """What a box's agent client talks through: the freezer's meter, if boxes are frozen."""
        return self.idle.channel(runtime_id) if self.idle else None

    def start_reaping(self) -> None:
        self._reaper.start()
        if self._sampler is None:
            self._sampler = asyncio.get_running_loop().create_task(self.usage_samples.sample_forever(self._sampled))
        if self.idle is not None:
            self.idle.start(self._freezable)

    def _sampled(self) -> list[metrics.Watched]:
        """The boxes whose use the sampler reads: their cgroups and their own disks."""
        return [metrics.Watched(b.dir.name, rid, b.disk_dir if b.on_disk else None)
                for rid, b in self._held.settled().items()]

    def _freezable(self) -> dict[str, str]:
        """The boxes the freezer may look at: not one being checkpointed or stopped (quiesced, it
        looks idle, and a frozen sentry would hang its save)."""
        return {runtime_id: box.dir.name for runtime_id, box in self._held.settled().items()}

    def notify_exits(self, callback: Callable[[str], None]) -> None:
        self._held.on_exit = callback

    # --- what the node holds --------------------------------------------------------------------

    def holds(self, runtime_id: str) -> bool:
        return self._held.get(runtime_id) is not None

    def held(self) -> dict[str, str]:
        """Every box this node holds: its runtime id -> its key."""
        return self._held.keys()

    def is_running(self, runtime_id: str) -> bool:
        """Whether the node holds this box and has not seen its sandbox process end."""
        return self._held.is_running(runtime_id)

    async def is_alive(self, runtime_id: str) -> bool:
        try:
            state = await self.driver.state(runtime_id)
        except DriverError:
            return True
        return state is not None and state.get("status") == "running"

    def agent(self, runtime_id: str) -> BoxAgent | None:
        box = self._held.get(runtime_id)
        return None if box is None else box.agent

    def channel_socket(self, runtime_id: str) -> str | None:
        """The pinned path of a box's agent socket (a fleet's relay connects to it), if held."""
        box = self._held.get(runtime_id)
        return box.agent.socket if box is not None and box.pinned else None

    def checkpoint_estimate(self, runtime_id: str) -> int | None:
        return self._checkpoints.estimate(runtime_id)

    async def usage(self, runtime_id: str) -> list[UsageSample]:
        box = self._held.get(runtime_id)
        return self.usage_samples.of(box.dir.name) if box is not None else []

    def capacity(self) -> Capacity:
        memory = host.meminfo()
        return Capacity(boxes=len(self._held.boxes), cpus=os.cpu_count() or 1, memory_bytes=memory.get("MemTotal", 0),
                        memory_available_bytes=memory.get("MemAvailable", 0), cpu_caps=self._limits.cpu_caps,
                        disk_caps=self._bundles.gives_disks, limits=self._limits.cgroups)

    # --- a box's life: each step is its collaborator's ------------------------------------------

    async def boot(self, key: str, rootfs: Path, limits: Limits, writable_root: bool = False,
                   volumes: tuple[VolumeMount, ...] = ()) -> BoxRef:
        return await self._launcher.boot(key, rootfs, limits, writable_root, volumes)

    async def restore(self, key: str, rootfs: Path, limits: Limits, image_dir: Path,
                      volumes: tuple[VolumeMount, ...] = ()) -> BoxRef:
        return await self._launcher.restore(key, rootfs, limits, image_dir, volumes)

    async def pause(self, runtime_id: str, image_dir: Path) -> None:
        await self._checkpoints.pause(runtime_id, image_dir)

    async def snapshot(self, runtime_id: str, image_dir: Path) -> None:
        await self._checkpoints.snapshot(runtime_id, image_dir)

    async def wake(self, runtime_id: str) -> None:
        await self._checkpoints.wake(runtime_id)

    async def stop(self, runtime_id: str, key: str | None = None) -> None:
        await self._teardown.stop(runtime_id, key)

    def stop_later(self, runtime_id: str, key: str) -> None:
        self._teardown.stop_later(runtime_id, key)

    async def adopt(self, running: dict[str, str]) -> set[str]:
        return await self._adoption.adopt(running)

    async def close(self) -> None:
        """Let go of the boxes without stopping them: they outlive the server (thawed)."""
        if self.idle is not None:
            await self.idle.close()
        self._reaper.stop_polling()
        if self._sampler is not None:
            self._sampler.cancel()
        await self._teardown.finish()  # while SIGCHLD still reaps: runsc delete waits for its orphans
        self._reaper.close()
        await self._held.let_go()
