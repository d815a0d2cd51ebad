"""A fleet's API server's way to its nodes: the fleet's keys in this server's data dir, Ray's
placement, the runtime that calls the nodes, and the watch for lost ones. The composition root
(hutch.server.app) makes one when the server is a fleet's; the services only see a NodeRuntime."""

from __future__ import annotations

from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from hutch.fleet import cluster, keys
from hutch.fleet.remote import FleetRuntime
from hutch.fleet.watch import NodeWatch
from hutch.services.config import FleetConfig
from hutch.services.metrics import Metrics
from hutch.store import Store


class FleetNodes:
    def __init__(self, fleet: FleetConfig, store: Store, data_dir: Path) -> None:
        keys.materialize(store, data_dir)  # the signer's, the vault's: the fleet's, not this server's
        cluster.connect(fleet.ray, fleet.ray_node_ip)
        self.store = store
        self.placement = cluster.Placement(fleet.placement_wait)
        self.runtime = FleetRuntime(store, self.placement, keys.fleet_key(store))

    def use_metrics(self, metrics: Metrics) -> None:
        self.runtime.metrics = metrics  # placement and node-call times

    def watch(self) -> Coroutine[Any, Any, None]:
        """Lost nodes' boxes marked failed (a fleet's nodes take back their own boxes)."""
        return NodeWatch(self.store, self.placement).run()
