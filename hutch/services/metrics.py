"""Prometheus metrics: what creates, commands, pauses and errors cost, and how many boxes there are.

One registry per server, read at `GET /metrics`; counts of sandboxes and of the warm pool are
taken from the store and the pool at scrape time, so they are never out of step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from hutch.services.models import NodeInfo
from hutch.store import SandboxStatus

# Latency buckets from a few ms (a command) to a minute (a large restore).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
STATUSES = tuple(SandboxStatus)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.create_seconds = Histogram("hutch_sandbox_create_seconds", "Time to create a sandbox, ready for commands",
                                        ["source"], buckets=BUCKETS, registry=r)
        self.command_seconds = Histogram("hutch_command_seconds", "Time from a command's request to its exit",
                                         buckets=BUCKETS, registry=r)
        self.pause_seconds = Histogram("hutch_sandbox_pause_seconds", "Time to pause a sandbox", buckets=BUCKETS,
                                       registry=r)
        self.resume_seconds = Histogram("hutch_sandbox_resume_seconds", "Time to resume a sandbox", buckets=BUCKETS,
                                        registry=r)
        self.errors = Counter("hutch_api_errors", "Error answers of the API", ["code", "status"], registry=r)
        self.sandboxes = Gauge("hutch_sandboxes", "Sandboxes by status", ["status"], registry=r)
        self.egress_connections = Counter("hutch_egress_connections", "Connections boxes tried, by verdict",
                                          ["verdict"], registry=r)
        self.secret_connections = Counter("hutch_egress_secret_connections",
                                          "Connections that had a secret swapped into a request", registry=r)
        self.warm_pool = Gauge("hutch_warm_pool_boxes", "Boxes booted and waiting in the warm pool", registry=r)
        self.placement_seconds = Histogram("hutch_fleet_placement_seconds", "Time for Ray to reserve a box's room on a node",
                                           buckets=BUCKETS, registry=r)
        self.node_call_seconds = Histogram("hutch_fleet_node_call_seconds", "Time of an API server's call to a node",
                                           ["call"], buckets=BUCKETS, registry=r)
        self.node_up = Gauge("hutch_node_up", "Whether a node is up (1) or lost (0)", ["node"], registry=r)
        self.node_boxes = Gauge("hutch_node_boxes", "Active boxes on a node", ["node"], registry=r)
        self.node_vcpu = Gauge("hutch_node_vcpu", "Vcpu boxes may reserve on a node", ["node"], registry=r)
        self.node_vcpu_reserved = Gauge("hutch_node_vcpu_reserved", "Vcpu active boxes hold on a node", ["node"],
                                        registry=r)
        self.node_memory = Gauge("hutch_node_memory_mib", "Memory boxes may reserve on a node", ["node"], registry=r)
        self.node_memory_reserved = Gauge("hutch_node_memory_mib_reserved", "Memory active boxes hold on a node",
                                          ["node"], registry=r)

    def render(self, count_by_status: Callable[[], dict[str, int]], pool_size: int, nodes: Sequence[NodeInfo] = ()) -> bytes:
        counts = count_by_status()
        for status in STATUSES:
            self.sandboxes.labels(status).set(counts.get(status, 0))
        self.warm_pool.set(pool_size)
        for n in nodes:
            self.node_up.labels(n.name).set(1 if n.health == "up" else 0)
            self.node_boxes.labels(n.name).set(n.boxes)
            self.node_vcpu.labels(n.name).set(n.vcpu)
            self.node_vcpu_reserved.labels(n.name).set(n.vcpu_reserved)
            self.node_memory.labels(n.name).set(n.memory_mib)
            self.node_memory_reserved.labels(n.name).set(n.memory_mib_reserved)
        return generate_latest(self.registry)
