"""The node's runtime driver: the few calls the node makes on a box's container, so another OCI
runtime can stand in for runsc (hutch.node.runsc), chosen by name (`hutch.node.node.DRIVERS`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

log = logging.getLogger("hutch.node")


class DriverError(RuntimeError):
    """The driver failed or hung; the message carries what it printed."""


@runtime_checkable
class Driver(Protocol):
    """Each call is bounded in time, and raises DriverError when it fails."""

    # pids of the driver's own calls in flight: the event loop reaps those, the node must not
    running: set[int]

    async def run_detached(self, container_id: str, bundle: Path, stderr_path: Path, pid_file: Path,
                           overlay: str = "root:memory", cgroups: bool = True) -> None:
        """Start a container from `bundle` and return once it runs, its sandbox process' pid in
        `pid_file`. `overlay`: where its root's writes go (its memory, "root:dir=D", or "none":
        the root itself). Without `cgroups`, the container gets no cgroup: none of its limits holds."""
        ...

    async def restore_detached(self, container_id: str, bundle: Path, image_dir: Path, stderr_path: Path,
                               pid_file: Path, overlay: str = "root:memory", cgroups: bool = True) -> None:
        """Start a container from its checkpoint in `image_dir`, on the kind of overlay it had."""
        ...

    async def checkpoint(self, container_id: str, image_dir: Path, leave_running: bool = False,
                         overlay: str = "root:memory", cgroups: bool = True) -> None:
        """Save a container to `image_dir`; it stops once saved, unless `leave_running` (then
        `overlay` and `cgroups` are what it was started with)."""
        ...

    async def kill(self, container_id: str, signal: str = "KILL") -> None:
        """Signal the container's init (the agent)."""
        ...

    async def delete(self, container_id: str) -> None:
        """Stop and remove a container; quiet when it is already gone."""
        ...

    async def state(self, container_id: str) -> dict[str, Any] | None:
        """The driver's view of a container ("status", "pid"), or None when it does not know it."""
        ...

    async def list_ids(self) -> list[str]:
        """Every container the driver holds."""
        ...


async def state_or_none(driver: Driver, container_id: str) -> dict[str, Any] | None:
    """The driver's state of a container, or None when it does not know it or cannot say (said in
    the log): for the node's own checks, where a failed call means the same as no container."""
    try:
        return await driver.state(container_id)
    except DriverError as e:
        log.warning("state %s: %s", container_id, e)
        return None
