"""Starting boxes: a boot from a template root or a restore from a checkpoint, each a new run of the
box (a new runtime id), held once its sandbox process is watched and its agent answers on the pinned
socket. A start that fails leaves nothing of the box behind."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from hutch.node import disks
from hutch.node.agent import Channel
from hutch.node.api import BoxRef, BoxStartError, VolumeMount
from hutch.node.boxegress import EgressListeners
from hutch.node.bundle import Bundles
from hutch.node.driver import Driver, DriverError
from hutch.node.held import HeldBoxes
from hutch.node.hostlimits import HostLimits
from hutch.node.nodebox import Box, new_runtime_id, saved_agent_sum, saved_on_disk
from hutch.node.runsc import tail_of
from hutch.node.spec import Limits
from hutch.node.teardown import Teardown

BOOT_TIMEOUT = 30.0

# Starts a box's container (a boot's or a restore's), with these limits, in a cgroup or with none
Starter = Callable[[Box, Limits, bool], Awaitable[None]]


class Launcher:
    """Boots and restores the node's boxes. `channel(runtime_id)`: what a box's agent client talks
    through (the freezer's meter, hutch.node.idle), or None for the plain socket."""

    def __init__(self, driver: Driver, held: HeldBoxes, bundles: Bundles, egress: EgressListeners,
                 limits: HostLimits, teardown: Teardown, channel: Callable[[str], Channel | None]) -> None:
        self.driver = driver
        self.held = held
        self.bundles = bundles
        self.egress = egress
        self.limits = limits
        self.teardown = teardown
        self.channel = channel

    async def boot(self, key: str, rootfs: Path, limits: Limits, writable_root: bool = False,
                   volumes: tuple[VolumeMount, ...] = ()) -> BoxRef:
        """Boot a box from a template root, with `volumes` mounted. `key` names its host directory
        for its whole life, across pauses (each run of it gets a new runtime id). With
        `writable_root` (a template build), what the box writes lands in `rootfs` itself; such a
        box is never paused."""
        mounted = await self.bundles.volume_dirs(volumes)

        async def start(box: Box, limits: Limits, cgroups: bool) -> None:
            self.bundles.prepare(box, rootfs, limits, volumes=mounted)
            await self.egress.open(box)
            overlay = "none" if writable_root else await self.bundles.make_disk(box, limits.disk_mib)
            await self.driver.run_detached(box.runtime_id, box.dir, box.err_file, box.pid_file,
                                           overlay=overlay, cgroups=cgroups)

        return (await self._start(key, limits, start)).ref

    async def restore(self, key: str, rootfs: Path, limits: Limits, image_dir: Path,
                      volumes: tuple[VolumeMount, ...] = ()) -> BoxRef:
        """Bring a paused box back from its checkpoint, under a new runtime id, on the kind of
        disk it was checkpointed with (runsc restores no other): its own disk of `limits.disk_mib`,
        or its memory (so was every box paused before boxes had disks). `volumes`: the ones it
        had mounted (runsc restores a box only with the mounts it was saved with)."""
        on_disk = saved_on_disk(image_dir)
        agent_sum = saved_agent_sum(image_dir)
        mounted = await self.bundles.volume_dirs(volumes)

        async def start(box: Box, limits: Limits, cgroups: bool) -> None:
            self.bundles.prepare(box, rootfs, limits, wake=True, volumes=mounted, agent_sum=agent_sum)
            await self.egress.open(box)
            if on_disk:
                size = max(limits.disk_mib, 1024)
                await self.bundles.make_restore_disk(box, size)
            overlay = f"root:dir={box.disk_dir}" if on_disk else "root:memory"
            await self.driver.restore_detached(box.runtime_id, box.dir, image_dir, box.err_file,
                                               box.pid_file, overlay=overlay, cgroups=cgroups)
            if on_disk:
                await asyncio.to_thread(disks.fill_to, box.disk_dir, size)

        return (await self._start(key, limits, start)).ref

    async def _start(self, key: str, limits: Limits, start: Starter) -> Box:
        """A new run of box `key`, started by `start` in a cgroup of its own if the host allows
        (hutch.node.hostlimits)."""
        async def attempt(limits: Limits, cgroups: bool) -> Box:
            box = self.bundles.box(new_runtime_id(), key)  # a new id: runsc may keep a failed one's
            return await self._launch(box, start(box, limits, cgroups))

        return await self.limits.start(limits, attempt)

    async def _launch(self, box: Box, start: Awaitable[None]) -> Box:
        runtime_id = box.runtime_id
        try:
            await start
            self.held.watch(runtime_id, int(box.pid_file.read_text()))
            await self.wait_for_agent(box)
            self.held.boxes[runtime_id] = box
            if not self.held.watched(runtime_id):
                raise RuntimeError("the box ended as it booted")
        except BaseException as e:
            self.held.boxes.pop(runtime_id, None)
            self.held.unwatch(runtime_id)
            err = tail_of(box.err_file, 1000)
            await self.teardown.remove(box)
            if isinstance(e, (DriverError, OSError, TimeoutError, RuntimeError)):  # ChannelError too
                raise BoxStartError(f"{e} {err}".strip()) from e
            raise
        return box

    async def wait_for_agent(self, box: Box, timeout: float = BOOT_TIMEOUT, wake: bool = False) -> None:
        """Wait for the agent's socket, pin it, and see the agent answer. With `wake`, the agent
        is waiting for SIGUSR1 to listen again (after a restore): send it, and again every
        0.25 s until it listens, since a signal sent as the restore completes can be lost."""
        deadline = time.monotonic() + timeout
        next_wake = 0.0
        while not box.pin_socket(self.channel(box.runtime_id)):
            if not self.held.watched(box.runtime_id):
                raise RuntimeError("the box ended as it booted")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the agent did not listen within {timeout:.0f} s")
            if wake and time.monotonic() >= next_wake:
                await self.driver.kill(box.runtime_id, "USR1")
                next_wake = time.monotonic() + 0.25
            await asyncio.sleep(0.002)
        while not await box.agent.health(timeout=2.0):  # no answer, or a wrong one (something else on the socket)
            if time.monotonic() > deadline:
                raise TimeoutError("the agent's socket never answered")
            await asyncio.sleep(0.002)

    async def relisten(self, box: Box) -> None:
        """A quiesced agent (before a checkpoint) told to listen again, and found answering."""
        await self.wait_for_agent(box, wake=True)
