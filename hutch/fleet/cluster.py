"""Everything hutch asks of Ray, in one module: joining the cluster, a reservation per active box
(a placement group of one bundle of hutch's own resources), asking the autoscaler for room, and
who is alive (a beacon actor per node runtime, owned by it and pinned to its Ray node).

Ray's calls block; the async fronts run them on a thread. Nothing here knows what a box is.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

import ray
from ray.autoscaler.sdk import request_resources
from ray.util.placement_group import (
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

log = logging.getLogger("hutch.fleet")

NAMESPACE = "hutch"
VCPU = "hutch_vcpu"  # a node's resources for boxes, declared when its Ray node starts
MEMORY = "hutch_memory_mib"
BOX_GROUP = "hutch-box-"  # a box's placement group: this and its key
BEACON = "hutch-node:"  # a node runtime's beacon actor: this and its name
FIRST_TRY = 0.5  # seconds a placement waits before it asks the autoscaler for room
REQUEST_TTL = 300.0  # how long a request for room stands after the create that made it gave up


class NoRoom(Exception):
    """No node had room for the box within the wait (the autoscaler was asked)."""


@dataclass(frozen=True)
class RayNode:
    node_id: str
    alive: bool
    address: str
    resources: dict[str, float]


def node_resources(vcpu: int, memory_mib: int) -> dict[str, float]:
    return {VCPU: float(vcpu), MEMORY: float(memory_mib)}


def connect(address: str, node_ip: str | None = None) -> None:
    """Join the cluster at `address` as a driver (a Ray node must run on this host, or `address`
    is a Ray Client's ray://)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = {"_node_ip_address": node_ip} if node_ip else {}
    # ray.init takes SIGTERM and SIGINT for itself; the server's own shutdown must keep them
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        ray.init(address=address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False,
                 configure_logging=False, **kwargs)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def this_node_id() -> str:
    return str(ray.get_runtime_context().get_node_id())


def ray_start_command(address: str, node_ip: str, vcpu: int, memory_mib: int) -> list[str]:
    """The `ray start` that makes this host a Ray node with room for boxes (it blocks: the node
    runtime owns it and stops it)."""
    return ["ray", "start", "--address", address, "--node-ip-address", node_ip, "--num-cpus", "1",
            "--resources", json.dumps(node_resources(vcpu, memory_mib)), "--disable-usage-stats", "--block"]


def nodes() -> list[RayNode]:
    return [RayNode(n["NodeID"], bool(n["Alive"]), n["NodeManagerAddress"], dict(n.get("Resources") or {}))
            for n in ray.nodes()]  # type: ignore[no-untyped-call]


def room_of(node_id: str) -> tuple[int, int]:
    """The vcpu and memory a Ray node offers boxes (its hutch resources; none: a node for no boxes)."""
    for n in nodes():
        if n.node_id == node_id:
            return int(n.resources.get(VCPU, 0)), int(n.resources.get(MEMORY, 0))
    raise RuntimeError(f"Ray does not know node {node_id}")


# --- reservations -------------------------------------------------------------------------------

class Placement:
    """A reservation per active box, named by its sandbox's id so any API server can release it.
    Detached: it outlives the API server that made it, as the box does."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self._asked_at: float | None = None  # when the standing request was made (None: none stands)

    async def reserve(self, key: str, vcpu: int, memory_mib: int) -> str:
        """The Ray node id the box's bundle landed on. Raises NoRoom past the wait."""
        bundle = node_resources(vcpu, memory_mib)
        await asyncio.to_thread(self._release, key)  # a reservation left by an API server that died
        group = await asyncio.to_thread(placement_group, [bundle], strategy="STRICT_PACK",
                                        name=BOX_GROUP + key, lifetime="detached")
        deadline = time.monotonic() + self.wait
        ready = asyncio.ensure_future(group.ready())
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # a removed group's is never awaited
        try:
            await asyncio.wait({ready}, timeout=min(FIRST_TRY, self.wait))
            if not ready.done():
                await asyncio.to_thread(self._ask_for_room, bundle)
                await asyncio.wait({ready}, timeout=max(0.0, deadline - time.monotonic()))
            if not ready.done():
                raise NoRoom(f"no node has {vcpu} vcpu and {memory_mib} MiB free")
            ready.result()
            table = await asyncio.to_thread(placement_group_table, group)
            if self._asked_at is not None:
                await asyncio.to_thread(self.withdraw, False)  # room came: ask only for what still waits
            return str(table["bundles_to_node_id"][0])
        except BaseException:
            ready.cancel()
            await asyncio.to_thread(remove_placement_group, group)
            raise

    def _ask_for_room(self, bundle: dict[str, float]) -> None:
        """Ask Ray's autoscaler (or KubeRay's) for the pending boxes' bundles; the pending
        placement groups ask too, this makes it explicit and immediate."""
        self._asked_at = time.monotonic()
        wanted = self._bundles(("CREATED", "PENDING", "RESCHEDULING"))
        try:
            request_resources(bundles=wanted or [bundle])
        except Exception as e:  # Ray Client (ray://) cannot make the request: the pending group still asks
            log.warning("Ray's autoscaler could not be asked for room: %r", e)

    def _bundles(self, states: tuple[str, ...]) -> list[dict[str, float]]:
        """The bundles of the box reservations in those states. A request is the whole room the
        cluster should have (Ray counts what runs in it), so it names the boxes that hold room
        too, not only the waiting ones."""
        return [b for g in placement_group_table().values()
                if g.get("name", "").startswith(BOX_GROUP) and g.get("state") in states and (b := self._bundle_of(g))]

    def withdraw(self, only_if_stale: bool = True) -> None:
        """Bring the standing request down to what boxes hold and wait for (none waits: withdrawn), so an
        autoscaler does not keep room nobody waits for. A create refused for want of room keeps
        its request standing for REQUEST_TTL, while its client tries again and new hosts come."""
        if self._asked_at is None or (only_if_stale and time.monotonic() - self._asked_at < REQUEST_TTL):
            return
        waiting = self._bundles(("PENDING", "RESCHEDULING"))
        try:
            request_resources(bundles=self._bundles(("CREATED", "PENDING", "RESCHEDULING")) if waiting else [])
        except Exception as e:
            log.warning("Ray's autoscaler request could not be brought down: %r", e)
        self._asked_at = time.monotonic() if waiting else None

    @staticmethod
    def _bundle_of(group: dict[str, Any]) -> dict[str, float]:
        bundles = group.get("bundles") or {}
        return dict(next(iter(bundles.values()), {}))

    async def release(self, key: str) -> None:
        await asyncio.to_thread(self._release, key)

    @staticmethod
    def _release(key: str) -> None:
        try:
            group = get_placement_group(BOX_GROUP + key)
        except ValueError:
            return
        remove_placement_group(group)

    @staticmethod
    def reserved() -> set[str]:
        """The names (sandbox ids) of every box reservation not yet removed: made, waiting for
        room, or being moved off a lost node."""
        return {g["name"][len(BOX_GROUP):] for g in placement_group_table().values()
                if g.get("name", "").startswith(BOX_GROUP) and g.get("state") in ("CREATED", "PENDING", "RESCHEDULING")}


# --- membership -----------------------------------------------------------------------------------

@ray.remote(num_cpus=0, max_restarts=0)
class Beacon:
    """Alive while its node runtime is: Ray ends an actor with its owner, and with its node."""

    def __init__(self, name: str) -> None:
        self.name = name

    def ping(self) -> str:
        return self.name


def start_beacon(name: str) -> Any:
    """The node runtime's beacon, on its own Ray node; kept by the caller (dropping it ends it)."""
    strategy = NodeAffinitySchedulingStrategy(this_node_id(), soft=False)
    handle = Beacon.options(name=BEACON + name, scheduling_strategy=strategy).remote(name)  # type: ignore[attr-defined]
    ray.get(handle.ping.remote(), timeout=60)
    return handle


def beacon_alive(name: str) -> bool:
    try:
        ray.get_actor(BEACON + name)
    except ValueError:
        return False
    return True
