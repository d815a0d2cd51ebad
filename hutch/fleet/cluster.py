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
    ray.init(address=address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False,
             configure_logging=False, **kwargs)


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
    """A reservation per active box, named by the box's key so any API server can release it.
    Detached: it outlives the API server that made it, as the box does."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self.requests = 0  # resource requests made of the autoscaler

    async def reserve(self, key: str, vcpu: int, memory_mib: int) -> str:
        """The Ray node id the box's bundle landed on. Raises NoRoom past the wait."""
        bundle = node_resources(vcpu, memory_mib)
        await asyncio.to_thread(self._release, key)  # a reservation left by an API server that died
        group = await asyncio.to_thread(placement_group, [bundle], strategy="STRICT_PACK",
                                        name=BOX_GROUP + key, lifetime="detached")
        deadline = time.monotonic() + self.wait
        try:
            try:
                await asyncio.wait_for(asyncio.shield(group.ready()), min(FIRST_TRY, self.wait))
            except TimeoutError:
                await asyncio.to_thread(self._ask_for_room, bundle)
                await asyncio.wait_for(group.ready(), max(0.0, deadline - time.monotonic()))
            table = await asyncio.to_thread(placement_group_table, group)
            return str(table["bundles_to_node_id"][0])
        except BaseException as e:
            await asyncio.to_thread(remove_placement_group, group)
            if isinstance(e, TimeoutError):
                raise NoRoom(f"no node has {vcpu} vcpu and {memory_mib} MiB free") from None
            raise

    def _ask_for_room(self, bundle: dict[str, float]) -> None:
        """Ask Ray's autoscaler (or KubeRay's) for the pending boxes' bundles; the pending
        placement groups ask too, this makes it explicit and immediate."""
        self.requests += 1
        pending = [self._bundle_of(g) for g in placement_group_table().values()
                   if g.get("name", "").startswith(BOX_GROUP) and g.get("state") == "PENDING"]
        request_resources(bundles=[b for b in pending if b] or [bundle])

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
    def reserved() -> dict[str, str]:
        """Every live box reservation: its key -> its Ray node id."""
        found = {}
        for g in placement_group_table().values():
            name = g.get("name", "")
            if name.startswith(BOX_GROUP) and g.get("state") == "CREATED":
                found[name[len(BOX_GROUP):]] = str(next(iter(g["bundles_to_node_id"].values()), ""))
        return found


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
