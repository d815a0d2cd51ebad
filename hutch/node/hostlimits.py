"""Holding boxes to their limits on this host: every box has a cgroup of its own, which holds its
memory and pid limits and its CPU cap. What the host refuses is found at the first box started: a
host without the CPU controller runs boxes without CPU caps; one that refuses runsc a cgroup at all
(a container without cgroup delegation, say) runs none, unless the operator allows unlimited boxes
(`hutch serve --allow-unlimited-boxes`)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from hutch.node.api import BoxStartError, LimitsUnavailable
from hutch.node.driver import DriverError
from hutch.node.spec import Limits

log = logging.getLogger("hutch.node")

T = TypeVar("T")


def _cgroup_refused(e: BoxStartError) -> bool:
    """Whether runsc itself failed the start for want of a cgroup (or of a controller in it): only
    a driver call's own failure counts, never a boot's later end, whose message carries what the
    box's PID 1 wrote (a box could write "cgroup" there to turn the node's limits off)."""
    return isinstance(e.__cause__, DriverError) and "cgroup" in str(e.__cause__).lower()


class HostLimits:
    """What this host lets the node hold its boxes to, as learnt from its first refusal."""

    def __init__(self, allow_unlimited: bool = False) -> None:
        self.cpu_caps = True
        self.cgroups = True  # False: boxes run with no cgroup, so without any limit (allow_unlimited only)
        self.allow_unlimited = allow_unlimited
        if allow_unlimited:
            log.warning("--allow-unlimited-boxes: if runsc cannot give boxes a cgroup on this host, they run "
                        "WITHOUT MEMORY, PID OR CPU LIMITS, and one box can take the whole host")

    async def start(self, limits: Limits, attempt: Callable[[Limits, bool], Awaitable[T]]) -> T:
        """What `attempt(limits, cgroups)` starts, in a cgroup of its own, which holds it to its
        memory and pid limits (and its CPU cap). Refused a cgroup without the CPU controller, the
        node runs boxes without CPU caps (said once); no cgroup at all, and no box starts
        (LimitsUnavailable, said at each) unless the node allows unlimited boxes, which then run
        with no cgroup (said once, loudly)."""
        uncapped = dataclasses.replace(limits, cpus=0)
        try:
            return await attempt(limits if self.cpu_caps else uncapped, self.cgroups)
        except BoxStartError as e:
            if not (self.cgroups and _cgroup_refused(e)):
                raise
            refusal = e
        if limits.cpus and self.cpu_caps:  # perhaps only the CPU controller is missing
            try:
                started = await attempt(uncapped, self.cgroups)
            except BoxStartError as e:
                if not _cgroup_refused(e):
                    raise
            else:
                log.warning("runsc could not give a box a CPU cap (%s): boxes run without CPU caps, still held to "
                            "their memory and pid limits", refusal)
                self.cpu_caps = False
                return started
        if not self.allow_unlimited:
            log.error("runsc could not make a box a cgroup (%s): no box can be held to its memory and pid limits, "
                      "so none starts. Give hutch a writable cgroup hierarchy (a container: --cgroupns=host and "
                      "/sys/fs/cgroup mounted read-write, or cgroup delegation), or accept boxes without any "
                      "limit with --allow-unlimited-boxes", refusal)
            raise LimitsUnavailable("this host cannot hold boxes to their memory and pid limits (runsc could not "
                                    "make a cgroup), so none starts; its operator must fix that (see the log)") from refusal
        log.critical("runsc could not make a box a cgroup (%s): with --allow-unlimited-boxes, boxes now run "
                     "WITHOUT MEMORY, PID OR CPU LIMITS", refusal)
        self.cgroups = self.cpu_caps = False
        return await attempt(uncapped, self.cgroups)
