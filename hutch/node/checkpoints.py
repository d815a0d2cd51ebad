"""Checkpointing boxes: a pause (saved, then freed) and a snapshot (saved, then run on).

gVisor cannot save a socket of the host's, so before either the box's agent closes every one of
them (quiesce) and its egress listener is closed; after a snapshot, or a pause that failed, the
agent is told to listen again. A disk without room for the image is found out first: a checkpoint
that runs out of space can end the box.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from hutch.node import host, metrics
from hutch.node.api import CHECKPOINT_SLACK, NoSpaceError
from hutch.node.boxegress import EgressListeners
from hutch.node.bundle import Bundles
from hutch.node.driver import Driver, DriverError, state_or_none
from hutch.node.held import HeldBoxes
from hutch.node.hostlimits import HostLimits
from hutch.node.launch import Launcher
from hutch.node.nodebox import Box, saved_agent_sum, write_agent_sum, write_medium
from hutch.node.teardown import Teardown

log = logging.getLogger("hutch.node")


def _existing(path: Path) -> Path:
    """`path` or its nearest ancestor that exists (where the image's disk is measured)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _fresh_image_dir(image_dir: Path, box: Box) -> None:
    """An empty `image_dir` for the box's checkpoint, saying which medium it was made on."""
    shutil.rmtree(image_dir, ignore_errors=True)
    image_dir.mkdir(parents=True, mode=0o700)
    write_medium(image_dir, box.on_disk)  # what a restore must use
    write_agent_sum(image_dir, saved_agent_sum(box.dir))  # and the agent it must mount


class Checkpoints:
    """Pauses and snapshots of the node's boxes."""

    def __init__(self, driver: Driver, held: HeldBoxes, bundles: Bundles, egress: EgressListeners,
                 limits: HostLimits, launcher: Launcher, teardown: Teardown, usage: metrics.Usage) -> None:
        self.driver = driver
        self.held = held
        self.bundles = bundles
        self.egress = egress
        self.limits = limits
        self.launcher = launcher
        self.teardown = teardown
        self.usage = usage

    def estimate(self, runtime_id: str) -> int | None:
        """About the disk a checkpoint of this box takes: its sandbox's resident memory, which
        bounds the image, and slack (None: no such box held)."""
        box = self.held.get(runtime_id)
        return None if box is None else host.resident_bytes(box.pid_file) + CHECKPOINT_SLACK

    async def pause(self, runtime_id: str, image_dir: Path) -> None:
        """Checkpoint a box to `image_dir` (memory, processes, its written files) and free it.

        The agent first closes every socket of the host's (gVisor cannot save them); if the
        checkpoint fails, the box is told to listen again and keeps running. A disk without room
        for the image is found out first (a checkpoint that runs out of space can end the box).
        """
        box = await self._quiesce(runtime_id, image_dir)
        self.held.stopping.add(runtime_id)
        self.held.unwatch(runtime_id)
        self.usage.paused(box.dir.name)
        await self.egress.close(box)  # and every connection of it: nothing of the host's may be open
        try:
            _fresh_image_dir(image_dir, box)
            await self.driver.checkpoint(runtime_id, image_dir)
        except BaseException:
            self.held.stopping.discard(runtime_id)
            state = await state_or_none(self.driver, runtime_id)
            if state and state.get("status") == "running":
                self.held.watch(runtime_id, int(state.get("pid") or 0))
                await self.egress.open(box)
                await self.launcher.relisten(box)
            shutil.rmtree(image_dir, ignore_errors=True)
            raise
        self.held.boxes.pop(runtime_id, None)
        await self.bundles.forget(box)  # the checkpoint holds what the box wrote to its disk
        self.teardown.in_background(self.teardown.delete_checkpointed(runtime_id))  # it stopped at its checkpoint

    async def _quiesce(self, runtime_id: str, image_dir: Path) -> Box:
        """Before a checkpoint: room for its image found (else NoSpaceError, nothing done), then
        every host socket of the box's agent closed (gVisor cannot save them)."""
        box = self.held.boxes[runtime_id]
        needed = self.estimate(runtime_id) or CHECKPOINT_SLACK
        free = shutil.disk_usage(_existing(image_dir)).free
        if free < needed:
            raise NoSpaceError(f"{free // 2**20} MiB free where the checkpoint needs about {needed // 2**20} MiB")
        await box.agent.quiesce()
        await box.release()
        deadline = time.monotonic() + 10
        while os.path.lexists(box.socket):
            if time.monotonic() > deadline:
                await self.launcher.relisten(box)
                raise TimeoutError("the agent did not let go of its socket")
            await asyncio.sleep(0.002)
        return box

    async def snapshot(self, runtime_id: str, image_dir: Path) -> None:
        """Checkpoint a box to `image_dir` and let it run on from there (`--leave-running`): it is
        stopped only while it is saved. Its agent is quiesced and its egress closed for that
        time, as for a pause, and listens again after, whether the checkpoint worked or not."""
        box = await self._quiesce(runtime_id, image_dir)
        try:
            self.held.stopping.add(runtime_id)  # runsc may run it on under another pid: no exit is reported meanwhile
            await self.egress.close(box)
            _fresh_image_dir(image_dir, box)
            await self.driver.checkpoint(runtime_id, image_dir, leave_running=True,
                                         overlay=f"root:dir={box.disk_dir}" if box.on_disk else "root:memory",
                                         cgroups=self.limits.cgroups)
        except BaseException:
            shutil.rmtree(image_dir, ignore_errors=True)
            raise
        finally:
            await self._run_on(runtime_id, box)

    async def _run_on(self, runtime_id: str, box: Box) -> None:
        """After a `--leave-running` checkpoint (whether it worked or not): the box watched under
        its pid (runsc may have made it a new one), its egress and its agent back. A box that did
        not run on, or whose agent does not listen again, is stopped, and that is raised: never a
        box held with no agent and no watch."""
        state: dict[str, Any] | None = None
        known = False
        for _ in range(3):  # a loaded host's `runsc state` may time out: that says nothing of the box
            try:
                state, known = await self.driver.state(runtime_id), True
                break
            except DriverError as e:
                log.warning("state %s after its snapshot: %s", runtime_id, e)
                await asyncio.sleep(0.5)
        try:
            if known:
                pid = int(state.get("pid") or 0) if state and state.get("status") == "running" else 0
            else:  # its first pid's watch still open: that process still runs
                pid = int(box.pid_file.read_text() or 0) if self.held.watched(runtime_id) else 0
            if not pid:
                raise RuntimeError("the box did not run on after its checkpoint")
            if pid != int(box.pid_file.read_text() or 0):
                self.held.unwatch(runtime_id)
                box.pid_file.write_text(str(pid))
            if not self.held.watched(runtime_id):
                self.held.watch(runtime_id, pid)
            await self.egress.open(box)
            await self.launcher.relisten(box)
        except BaseException:
            self.held.stopping.discard(runtime_id)
            await asyncio.shield(self.teardown.stop(runtime_id, box.dir.name))
            raise
        self.held.stopping.discard(runtime_id)

    async def wake(self, runtime_id: str) -> None:
        await self.driver.kill(runtime_id, "USR1")
