"""The server's composition root: every service built once at start-up and wired together.

Routes reach it through the `StateDep` dependency; nothing else constructs these services.
"""

from __future__ import annotations

import asyncio
import os
import socket
from secrets import token_hex as secrets_token
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from hutch import tracing
from hutch.egress.ca import CertificateAuthority, upstream_context
from hutch.egress.host import HostAddresses
from hutch.egress.netlog import LogEntry
from hutch.egress.policy import Policy
from hutch.egress.proxy import EgressProxy, Interception
from hutch.egress.resolve import Resolver, load_hosts_file
from hutch.egress.rules import NetworkRules
from hutch.node import base_image
from hutch.node.api import NodeRuntime
from hutch.node.driver import Driver
from hutch.node.idle import Freezer, Thawing
from hutch.node.node import DEFAULT_DRIVER, DRIVERS, Node
from hutch.node.pool import WarmPool
from hutch.node.runsc import RunscConfig, find_runsc
from hutch.node.spec import AgentRuntime
from hutch.node.volumes import SharedVolumes, VolumeDisks
from hutch.preview.access import PreviewKeys
from hutch.secrets.vault import Vault
from hutch.server import audit
from hutch.server.config import ServerConfig
from hutch.server.dataplane import DataPlane
from hutch.server.deliveries import Deliverer, Destinations, Flavor, hutch_headers
from hutch.server.events import Events
from hutch.server.events import info as event_info
from hutch.server.guard import Guard
from hutch.server.keyguard import KeyGuard
from hutch.server.metrics import Metrics
from hutch.server.previews import Previews
from hutch.server.sandboxes import Sandboxes
from hutch.server.secrets import Secrets
from hutch.server.snapshots import Snapshots
from hutch.server.templates import BUILD_BOX_PREFIX, Templates
from hutch.server.tokens import TokenSigner, load_or_create_key
from hutch.server.volumes import Volumes
from hutch.server.webhooks import Webhooks
from hutch.store import Store

if TYPE_CHECKING:
    from hutch.fleet.cluster import Placement
    from hutch.fleet.remote import FleetRuntime


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
        self.node = Node(config.run_dir, driver, AgentRuntime.find(self.base_root), trust_dir=box_trust,
                         disks_dir=config.data_dir / "disks", egress=self.egress,
                         allow_unlimited=config.allow_unlimited_boxes, volumes=self.volume_disks)
        self.node.idle = freezer
        self.guard = Guard(binary, config.run_dir / "runsc", config.db_url)  # if this process ends unstopped
        self.guard.start()
        self.templates: Templates | None = None  # a build box's policy and log lines (a single host's)
        self.metrics: Metrics | None = None

    def _egress_policy(self, box_key: str) -> Policy | None:
        rec = self.store.sandbox_by_box_key(box_key)
        if rec is None:
            return self.templates.egress_policy(box_key) if self.templates else None
        network = rec.network or {}
        return Policy(rec.id, NetworkRules.parse(network.get("allow_out", ()), network.get("deny_out", ())),
                      self.secrets.injections(rec))

    def _egress_record(self, entry: LogEntry) -> None:
        """On the egress proxy's log thread: the store and the counters are thread-safe; a build's
        log wakes its followers on the event loop, so that line goes back to the loop."""
        if entry.sandbox_id.startswith(BUILD_BOX_PREFIX):  # a build box's: told in its build's log
            if self.templates is not None:
                line = f"egress {entry.verdict}: {entry.host}:{entry.port}" + (f" ({entry.error})" if entry.error else "")
                self._loop.call_soon_threadsafe(self.templates.egress_record, entry.sandbox_id, line)
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


class State:
    """What the routes share, made once at start-up. On a single host the node runs in this
    process; a fleet's API server (config.fleet) reaches its nodes through hutch.fleet instead."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.store = Store(config.db_url)
        self.fleet = config.fleet
        if self.fleet is not None:
            from hutch.fleet import keys

            keys.materialize(self.store, config.data_dir)  # the signer's, the vault's: the fleet's, not ours
        self.secrets = Secrets(self.store, Vault(config.data_dir / "secrets.key"))
        self.local: NodeSide | None = None
        self.placement: Placement | None = None
        remote: FleetRuntime | None = None
        if self.fleet is None:
            self.local = NodeSide(config, self.store, self.secrets)
            self.node: NodeRuntime = tracing.traced_runtime(self.local.node)
            base_root = self.local.base_root
        else:
            from hutch.fleet import cluster, keys
            from hutch.fleet.remote import FleetRuntime

            cluster.connect(self.fleet.ray, self.fleet.ray_node_ip)
            self.placement = cluster.Placement(self.fleet.placement_wait)
            remote = FleetRuntime(self.store, self.placement, keys.fleet_key(self.store))
            self.node = tracing.traced_runtime(remote)
            base_root = base_image.base_root_path(config.cache_dir)  # on every node, at the same path
        server_key = load_or_create_key(config.data_dir / "server.key")
        self.signer = TokenSigner(server_key)
        self.keyguard = KeyGuard()  # failed API keys and sign-ins, limited (hutch.server.auth)
        self.templates = Templates(config, self.store, self.node)
        self.templates.register_base(base_root)
        self.sandboxes = Sandboxes(config, self.store, self.node, self.signer, self.secrets)
        self.templates.booting_roots = lambda: set(self.sandboxes.booting_roots)
        disks = (self.local.volume_disks if self.local else
                 SharedVolumes(self.fleet.shared_dir / "volumes") if self.fleet is not None else None)
        self.volumes = Volumes(config, self.store, disks, lambda: self.sandboxes.checkpoint_budgets().all_bytes)
        self.sandboxes.volumes = self.volumes
        self.snapshots = Snapshots(config, self.store, self.sandboxes)
        self.events = Events(self.store)  # the team's event log, paged and streamed
        # webhooks resolve names as the boxes' egress does (its hosts map; the system's resolver if it may)
        resolver = Resolver(load_hosts_file(config.egress_hosts) if config.egress_hosts else None,
                            system=config.egress_system_dns)
        destinations = Destinations.parse(config.webhook_allow, HostAddresses().get, resolver)
        self.webhooks = Webhooks(self.store, self.secrets.vault, destinations, config.team_max_webhooks)
        # every API server delivers; a webhook's lease picks one (this process: a clean stop lets go
        # of its leases, a killed one's run out)
        owner = f"{socket.gethostname()[:32]}-{os.getpid()}-{secrets_token(6)}"
        hutch_flavor = Flavor(None, lambda e: event_info(e).model_dump_json().encode(), hutch_headers)
        self.deliverer = Deliverer(self.store, self.secrets.vault, destinations, {"hutch": hutch_flavor},
                                   config.webhook_retry_for, owner)
        self.webhooks.changed = self.deliverer.wake
        self.previews = Previews(self.sandboxes, PreviewKeys(server_key), self.sandboxes.preview_site)
        self.pool: WarmPool | None = None
        if self.local is not None:
            self.local.templates, self.local.metrics = self.templates, self.sandboxes.metrics
            self.pool = WarmPool(self.local.node, config.warm_pool, base_root, self.sandboxes.base_limits(),
                                 config.warm_pool_max)
        self.sandboxes.pool = self.pool
        self.metrics = self.sandboxes.metrics
        if remote is not None:
            remote.metrics = self.metrics  # placement and node-call times
        self.data = DataPlane(self.sandboxes, config.max_file_bytes)
        self.audit = audit.AuditLog(self.store)


async def state(request: Request) -> State:
    # async, as hutch.server.auth's: a plain def would cost every request a worker-thread hop
    st: State = request.app.state.hutch
    return st


StateDep = Annotated[State, Depends(state)]
