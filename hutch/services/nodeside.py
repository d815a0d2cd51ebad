"""What runs boxes on this host: the driver, the egress proxy with its CA and its policy from the
store, and the node runtime. A single host's server holds one; so does a fleet's node."""

from __future__ import annotations

import asyncio

from hutch.egress.ca import CertificateAuthority, upstream_context
from hutch.egress.host import HostAddresses
from hutch.egress.netlog import LogEntry
from hutch.egress.policy import Policy
from hutch.egress.proxy import EgressProxy, Interception
from hutch.egress.resolve import Resolver, load_hosts_file
from hutch.egress.rules import NetworkRules
from hutch.node import base_image
from hutch.node.driver import Driver
from hutch.node.idle import Freezer, Thawing
from hutch.node.node import DEFAULT_DRIVER, DRIVERS, Node
from hutch.node.runsc import RunscConfig, find_runsc
from hutch.node.spec import AgentRuntime
from hutch.node.volumes import SharedVolumes, VolumeDisks
from hutch.services.build_logs import BUILD_BOX_PREFIX, BuildLogs
from hutch.services.config import ServerConfig
from hutch.services.guard import Guard
from hutch.services.metrics import Metrics
from hutch.services.secrets import Secrets
from hutch.store import Store


class NodeSide:
    """What runs boxes on this host: the driver, the egress proxy with its CA and its policy from
    the store, and the node runtime. A single host's server holds one; so does a fleet's node."""

    def __init__(self, config: ServerConfig, store: Store, secrets: Secrets) -> None:
        self._loop = asyncio.get_running_loop()  # made in the lifespan; the egress log calls back from its thread
        self.store, self.secrets = store, secrets
        self.base_root = base_image.base_root_path(config.cache_dir)
        if not base_image.is_built(config.cache_dir):
            raise RuntimeError(f"the base template is not built in {config.cache_dir}: run `hutch build-base`")
        binary = find_runsc()
        if binary is None:
            raise RuntimeError("runsc (gVisor) is not installed: see the README's set-up command")
        driver: Driver = DRIVERS[DEFAULT_DRIVER](RunscConfig(config.run_dir / "runsc", binary=binary,
                                                             platform=config.runsc_platform,
                                                             checkpoint_compression=config.checkpoint_compression))
        freezer = None
        if config.freeze_idle_after > 0:  # idle boxes frozen, thawed by their next call
            freezer = Freezer(config.freeze_idle_after, lambda key: self.egress.open_connections(key))
        # every driver call on a box thaws it first: the warm pool's waiting boxes are frozen too
        driver = Thawing(driver, freezer)
        ca = CertificateAuthority(config.data_dir / "ca")
        box_trust = config.data_dir / "ca" / "box"  # mounted read-only in every box at /.hutch/ca
        ca.write_box_trust(box_trust, self.base_root / "etc/ssl/certs/ca-certificates.crt", list(config.trust_ca))
        hosts = load_hosts_file(config.egress_hosts) if config.egress_hosts else None
        interception = Interception(ca, upstream_context(list(config.trust_ca)), secrets.reveal, secrets.record)
        self.egress = EgressProxy(Resolver(hosts, system=config.egress_system_dns), self._egress_policy,
                                  self._egress_record, HostAddresses().get, interception)
        # one host's: an ext4 filesystem each; a fleet's: directories every node binds (SharedVolumes)
        self.volume_disks = (SharedVolumes(config.fleet.shared_dir / "volumes") if config.fleet is not None
                             else VolumeDisks(config.data_dir / "volumes"))
        # the agent binaries boxes ran, kept beside their checkpoints (spec.pin_agent)
        runtime = AgentRuntime.find(self.base_root, base_image.agent_dir(config.cache_dir), config.data_dir / "agents")
        self.node = Node(config.run_dir, driver, runtime, trust_dir=box_trust,
                         disks_dir=config.data_dir / "disks", egress=self.egress,
                         allow_unlimited=config.allow_unlimited_boxes, volumes=self.volume_disks)
        self.node.idle = freezer
        self.guard = Guard(binary, config.run_dir / "runsc", config.db_url)  # if this process ends unstopped
        self.guard.start()
        self.build_logs: BuildLogs | None = None  # a build box's policy and log lines (a single host's)
        self.metrics: Metrics | None = None

    def _egress_policy(self, box_key: str) -> Policy | None:
        rec = self.store.sandbox_by_box_key(box_key)
        if rec is None:
            return self.build_logs.egress_policy(box_key) if self.build_logs else None
        network = rec.network or {}
        return Policy(rec.id, NetworkRules.parse(network.get("allow_out", ()), network.get("deny_out", ())),
                      self.secrets.injections(rec))

    def _egress_record(self, entry: LogEntry) -> None:
        """On the egress proxy's log thread: the store and the counters are thread-safe; a build's
        log wakes its followers on the event loop, so that line goes back to the loop."""
        if entry.sandbox_id.startswith(BUILD_BOX_PREFIX):  # a build box's: told in its build's log
            if self.build_logs is not None:
                line = f"egress {entry.verdict}: {entry.host}:{entry.port}" + (f" ({entry.error})" if entry.error else "")
                self._loop.call_soon_threadsafe(self.build_logs.egress_record, entry.sandbox_id, line)
            return
        self.store.add_network_log(**entry.__dict__)
        if self.metrics is not None:
            self.metrics.egress_connections.labels(entry.verdict).inc()
            if entry.secrets:
                self.metrics.secret_connections.inc()

    async def close(self) -> None:
        await self.egress.close_all()
        await self.node.close()  # the sandboxes outlive the server; a restart takes them back
        self.guard.release()  # the pool's boxes were stopped (the lifespan closes the pool first)
