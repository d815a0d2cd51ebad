"""Each API server's watch on the fleet, from what Ray says of its members.

A node whose Ray node is gone (the host died, or was cut off) is lost at once. A node whose Ray
node lives on but whose beacon is gone is a node runtime that stopped or is restarting: its boxes
may still run, so it is lost only if it is not back within `grace`. A lost node's live boxes are
marked failed (`node_lost`), and their reservations released; its paused boxes are untouched,
since their checkpoints are in the shared directory. Every API server watches; whichever sees it
first changes the records (each change is conditional, so a second is a no-op).

The watch also releases reservations that no live box holds (a create whose API server died
between the reservation and the record, a box a node marked failed, a pause whose server died after
the checkpoint): seen unclaimed twice,
`STALE` seconds apart, so a create in flight is never taken for one.
"""

from __future__ import annotations

import asyncio
import logging
import time

from hutch.fleet import cluster
from hutch.fleet.cluster import Placement
from hutch.store import SandboxStatus, Store

log = logging.getLogger("hutch.fleet")

NODE_LOST = "node_lost"
GRACE = 60.0  # longer than a node runtime's restart (systemd's stop timeout is 30 s)
STALE = 60.0
HOLD_ROOM = (SandboxStatus.ACTIVE, SandboxStatus.PAUSING, SandboxStatus.RESUMING)  # a paused box holds none


class NodeWatch:
    def __init__(self, store: Store, placement: Placement, every: float = 1.0, grace: float = GRACE) -> None:
        self.store, self.placement, self.every, self.grace = store, placement, every, grace
        self._missing: dict[str, float] = {}  # node -> when its beacon was first found gone
        self._unclaimed: dict[str, float] = {}  # box key -> when its reservation was first found unclaimed
        self._swept = 0.0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            try:
                await asyncio.to_thread(self.check)
            except Exception:
                log.exception("the fleet's watch failed; trying again")

    def check(self) -> None:
        now = time.monotonic()
        alive = {n.node_id for n in cluster.nodes() if n.alive}
        for node in self.store.list_nodes():
            if node.state != "up":
                continue
            host_gone = node.ray_node_id not in alive
            if not host_gone and cluster.beacon_alive(node.id):
                self._missing.pop(node.id, None)
                continue
            first = self._missing.setdefault(node.id, now)
            if host_gone or now - first >= self.grace:
                self.lose(node.id, "its host left the Ray cluster" if host_gone else "its node runtime stopped")
        if now - self._swept >= STALE / 2:
            self._swept = now
            self.sweep_reservations(now)
            self.placement.withdraw()

    def lose(self, node: str, why: str) -> None:
        self._missing.pop(node, None)
        if not self.store.mark_node_down(node):
            return  # another API server was first
        failed = self.store.fail_boxes_of(node, f"{NODE_LOST}: node {node} was lost ({why})")
        builds = self.store.fail_builds_of(node, f"{NODE_LOST}: node {node} was lost ({why})")
        log.warning("node %s was lost (%s): %d sandboxes and %d builds failed", node, why, len(failed), len(builds))
        for sandbox_id in failed:
            Placement._release(sandbox_id)

    def sweep_reservations(self, now: float) -> None:
        reserved = Placement.reserved()
        claimed = {r.id for r in self.store.list_sandboxes(None) if r.status in HOLD_ROOM}
        for key in list(self._unclaimed):
            if key not in reserved or key in claimed:
                del self._unclaimed[key]
        for key in reserved:
            if key in claimed:
                continue
            first = self._unclaimed.setdefault(key, now)
            if now - first >= STALE:
                log.info("releasing the reservation of box %s: no live sandbox holds it", key)
                Placement._release(key)
                del self._unclaimed[key]
