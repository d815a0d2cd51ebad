"""The server's composition root: every service built once at start-up and wired together.

Routes reach it through the `StateDep` dependency; nothing else constructs these services.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Coroutine
from secrets import token_hex as secrets_token
from typing import Annotated, Any, Protocol

from fastapi import Depends, Request

from hutch import tracing
from hutch.egress.host import HostAddresses
from hutch.egress.resolve import Resolver, load_hosts_file
from hutch.node import base_image
from hutch.node.api import NodeRuntime
from hutch.node.pool import WarmPool
from hutch.node.volumes import SharedVolumes
from hutch.preview.access import PreviewKeys
from hutch.secrets.vault import Vault
from hutch.server.keyguard import KeyGuard
from hutch.services import audit
from hutch.services.config import ServerConfig
from hutch.services.dataplane import DataPlane
from hutch.services.deliveries import Deliverer, Destinations, Flavor, hutch_headers
from hutch.services.events import Events
from hutch.services.events import info as event_info
from hutch.services.metrics import Metrics
from hutch.services.nodeside import NodeSide
from hutch.services.previews import Previews
from hutch.services.sandboxes import Sandboxes
from hutch.services.secrets import Secrets
from hutch.services.snapshots import Snapshots
from hutch.services.templates import Templates
from hutch.services.tokens import TokenSigner, load_or_create_key
from hutch.services.volumes import Volumes
from hutch.services.webhooks import Webhooks
from hutch.store import Store


class RemoteNodes(Protocol):
    """A fleet's nodes as an API server reaches them (hutch.fleet.apiside.FleetNodes: the
    composition root passes a maker of one, so nothing here imports the fleet)."""

    @property
    def runtime(self) -> NodeRuntime: ...
    def use_metrics(self, metrics: Metrics) -> None: ...
    def watch(self) -> Coroutine[Any, Any, None]: ...


class State:
    """What the routes share, made once at start-up. On a single host the node runs in this
    process; a fleet's API server (config.fleet) reaches its nodes through hutch.fleet instead."""

    def __init__(self, config: ServerConfig, remote: Callable[[Store], RemoteNodes] | None = None) -> None:
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.store = Store(config.db_url)
        self.fleet = config.fleet
        # a fleet's keys land in the data dir first: the vault below opens the fleet's
        self.remote = remote(self.store) if remote is not None else None
        self.secrets = Secrets(self.store, Vault(config.data_dir / "secrets.key"))
        self.local: NodeSide | None = None
        if self.remote is None:
            self.local = NodeSide(config, self.store, self.secrets)
            self.node: NodeRuntime = tracing.traced_runtime(self.local.node)
            base_root = self.local.base_root
        else:
            self.node = tracing.traced_runtime(self.remote.runtime)
            base_root = base_image.base_root_path(config.cache_dir)  # on every node, at the same path
        server_key = load_or_create_key(config.data_dir / "server.key")
        self.signer = TokenSigner(server_key)
        self.keyguard = KeyGuard()  # failed API keys and sign-ins, limited (hutch.server.auth)
        self.templates = Templates(config, self.store, self.node)
        self.templates.register_base(base_root)
        self.sandboxes = Sandboxes(config, self.store, self.node, self.signer, self.secrets)
        self.templates.roots.booting_roots = lambda: set(self.sandboxes.setup.booting_roots)
        disks = (self.local.volume_disks if self.local else
                 SharedVolumes(self.fleet.shared_dir / "volumes") if self.fleet is not None else None)
        self.volumes = Volumes(config, self.store, disks, lambda: self.sandboxes.checkpoints.budgets().all_bytes)
        self.sandboxes.creation.volumes = self.volumes
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
            self.local.build_logs, self.local.metrics = self.templates.build_logs, self.sandboxes.metrics
            self.pool = WarmPool(self.local.node, config.warm_pool, base_root, self.sandboxes.setup.base_limits(),
                                 config.warm_pool_max)
        self.sandboxes.creation.pool = self.pool
        self.metrics = self.sandboxes.metrics
        if self.remote is not None:
            self.remote.use_metrics(self.metrics)
        self.data = DataPlane(self.sandboxes, config.max_file_bytes)
        self.audit = audit.AuditLog(self.store)


async def state(request: Request) -> State:
    # async, as hutch.server.auth's: a plain def would cost every request a worker-thread hop
    st: State = request.app.state.hutch
    return st


StateDep = Annotated[State, Depends(state)]
