"""The boxes a node holds, and whether each still runs: a pidfd on each box's sandbox process,
read by the event loop, so a box that ends on its own (its memory limit, a crash, a host kill) is
known at once, with no poll."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable

from hutch.node.nodebox import Box

log = logging.getLogger("hutch.node")


class HeldBoxes:
    """The node's boxes by runtime id; those it is checkpointing or stopping (whose end is no
    news); and the watch on each one's sandbox process."""

    def __init__(self) -> None:
        self.boxes: dict[str, Box] = {}
        self.stopping: set[str] = set()
        self.on_exit: Callable[[str], None] | None = None  # called with a runtime id when a box ends unstopped
        self._fds: dict[str, int] = {}

    def get(self, runtime_id: str) -> Box | None:
        return self.boxes.get(runtime_id)

    def keys(self) -> dict[str, str]:
        """Every box held: its runtime id -> its key."""
        return {runtime_id: box.dir.name for runtime_id, box in self.boxes.items()}

    def settled(self) -> dict[str, Box]:
        """The boxes not being checkpointed or stopped: what the freezer and the sampler may look
        at (a quiesced box looks idle, and a frozen sentry would hang its save)."""
        return {runtime_id: box for runtime_id, box in self.boxes.items() if runtime_id not in self.stopping}

    def is_running(self, runtime_id: str) -> bool:
        """Whether this box is held and its sandbox process has not been seen to end."""
        return runtime_id in self.boxes and runtime_id in self._fds

    def watched(self, runtime_id: str) -> bool:
        """Whether this run's sandbox process is watched and has not ended (held yet or not)."""
        return runtime_id in self._fds

    def watch(self, runtime_id: str, pid: int) -> None:
        """Learn at once when a box's sandbox process ends (memory limit, crash, host kill)."""
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # already gone
            self._exited(runtime_id)
            return
        self._fds[runtime_id] = fd
        asyncio.get_running_loop().add_reader(fd, self._exited, runtime_id)

    def unwatch(self, runtime_id: str) -> None:
        fd = self._fds.pop(runtime_id, None)
        if fd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)

    def _exited(self, runtime_id: str) -> None:
        self.unwatch(runtime_id)
        if runtime_id in self.stopping or runtime_id not in self.boxes:
            return
        log.warning("box %s ended on its own", runtime_id)
        if self.on_exit:
            self.on_exit(runtime_id)

    async def let_go(self) -> None:
        """Forget every box, unwatched and its agent's client closed, without stopping it."""
        for runtime_id in list(self.boxes):
            self.unwatch(runtime_id)
            await self.boxes.pop(runtime_id).release()
