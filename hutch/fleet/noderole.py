"""`hutch node`: one host's node runtime in a fleet.

It makes the host a Ray node with room for boxes (unless one runs already), answers its API
servers on its relay, takes back at start the boxes it still runs (the store says which are its
own), marks its boxes that end failed, keeps its own warm pool, and holds a beacon actor by which
the API servers know it is alive. It runs until SIGTERM; its boxes outlive it, and a restart
within the API servers' grace takes them back.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import ray

from hutch import tracing
from hutch.fleet import cluster, keys
from hutch.fleet.nodeside import NodeCalls
from hutch.fleet.relay import Relay
from hutch.node.node import Node
from hutch.node.pool import WarmPool
from hutch.secrets.vault import Vault
from hutch.services.build_logs import BUILD_BOX_PREFIX
from hutch.services.config import ServerConfig
from hutch.services.nodeside import NodeSide
from hutch.services.sandboxes import Sandboxes
from hutch.services.secrets import Secrets
from hutch.services.templates import Templates
from hutch.services.tokens import TokenSigner, load_or_create_key
from hutch.store import NodeRecord, Store

log = logging.getLogger("hutch.fleet")

RAY_JOIN_TIMEOUT = 120.0
ORPHAN_AFTER = 60.0
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class NodeSettings:
    name: str
    host: str  # where the relay listens, and this host's address in the fleet (and Ray's)
    port: int
    vcpu: int  # what boxes on this host may reserve in all
    memory_mib: int
    start_ray: bool = True  # False: a Ray node already runs here (KubeRay's pod, say)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def start_ray_node(config: ServerConfig, settings: NodeSettings, log_file: Path) -> subprocess.Popen[bytes]:
    """`ray start --block` as this process' child, ended with it (even by SIGKILL)."""
    assert config.fleet is not None
    command = cluster.ray_start_command(config.fleet.ray, settings.host, settings.vcpu, settings.memory_mib)
    command[0] = str(Path(sys.executable).with_name("ray"))
    with log_file.open("ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)


def join(config: ServerConfig, settings: NodeSettings) -> None:
    """Connect to the cluster through this host's Ray node, once it is up."""
    assert config.fleet is not None
    deadline = time.monotonic() + RAY_JOIN_TIMEOUT
    while True:
        try:
            cluster.connect(config.fleet.ray, settings.host)
            return
        except (ConnectionError, RuntimeError, ValueError) as e:
            if time.monotonic() > deadline:
                raise RuntimeError(f"this host's Ray node did not come up: {e}") from e
            with contextlib.suppress(Exception):
                ray.shutdown()
            time.sleep(1.0)


async def sweep_orphans(store: Store, node: Node, pool: WarmPool, every: float = ORPHAN_AFTER / 2) -> None:
    """Stop the boxes no record claims: booted for a create whose API server died before it
    stored the record. Seen unclaimed twice, ORPHAN_AFTER apart, so a create in flight is spared."""
    unclaimed: dict[str, float] = {}
    while True:
        await asyncio.sleep(every)
        now = time.monotonic()
        held = node.held()
        waiting = pool.waiting()
        for runtime_id in list(unclaimed):
            if runtime_id not in held:
                del unclaimed[runtime_id]
        for runtime_id, key in held.items():
            # a build box has no sandbox: its build's node stops it (hutch.services.build_queue)
            if runtime_id in waiting or key.startswith(BUILD_BOX_PREFIX) or store.sandbox_by_runtime(runtime_id) is not None:
                unclaimed.pop(runtime_id, None)
            elif now - unclaimed.setdefault(runtime_id, now) >= ORPHAN_AFTER:
                log.warning("stopping box %s: no sandbox claims it (its create was cut short)", runtime_id)
                del unclaimed[runtime_id]
                await node.stop(runtime_id, key)


async def serve_node(config: ServerConfig, settings: NodeSettings) -> None:
    assert config.fleet is not None
    config.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    config.checkpoint_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    endpoint = tracing.endpoint_from(config.otlp_endpoint)
    if endpoint:  # its API servers' calls join their traces (hutch.fleet.relay)
        tracing.setup(endpoint, f"hutch-node-{settings.name}")
    store = Store(config.db_url)
    keys.materialize(store, config.data_dir)
    secrets = Secrets(store, Vault(config.data_dir / "secrets.key"))
    side = NodeSide(config, store, secrets)
    sandboxes = Sandboxes(config, store, side.node, TokenSigner(load_or_create_key(config.data_dir / "server.key")),
                          secrets)
    sandboxes.recovery.owner = settings.name
    side.metrics = sandboxes.metrics
    templates = Templates(config, store, side.node)  # builds the fleet's queued templates on this host
    templates.register_base(side.base_root)
    side.build_logs = templates.build_logs  # build boxes' egress policy, and their connections in their build's log
    side.node.start_reaping()
    await sandboxes.recovery.reconcile()
    await templates.queue.serve(settings.name)  # after the reconcile: its adopt stops boxes nothing claims
    pool = WarmPool(side.node, config.warm_pool, side.base_root, sandboxes.setup.base_limits(), config.warm_pool_max)
    pool.start()
    roots = (config.cache_dir, config.fleet.shared_dir / "templates")
    relay = Relay(keys.fleet_key(store), NodeCalls(settings.name, side.node, pool, roots, config.checkpoint_dir,
                                                     config.snapshot_dir),
                  side.node.channel_socket)
    await relay.start(settings.host, settings.port)
    beacon = await asyncio.to_thread(cluster.start_beacon, settings.name)
    vcpu, memory_mib = cluster.room_of(cluster.this_node_id())  # what Ray was told, by us or by KubeRay
    now = time.time()
    store.upsert_node(NodeRecord(id=settings.name, url=settings.url, vcpu=vcpu, memory_mib=memory_mib,
                                 started_at=now, seen_at=now, ray_node_id=cluster.this_node_id()))
    sweeper = asyncio.get_running_loop().create_task(sweep_orphans(store, side.node, pool))
    print(f"hutch node {settings.name} is serving its fleet on {settings.url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        sweeper.cancel()
        await templates.queue.close()  # builds cut short are queued again, for any node
        del beacon
        await relay.close()
        await pool.close()
        await side.close()


def run(config: ServerConfig, settings: NodeSettings) -> int:
    ray_node = None
    if settings.start_ray:
        ray_node = start_ray_node(config, settings, config.data_dir / "ray-node.log")
    try:
        join(config, settings)
        asyncio.run(serve_node(config, settings))
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        if ray_node is not None:
            ray_node.send_signal(signal.SIGTERM)
            try:
                ray_node.wait(30)
            except subprocess.TimeoutExpired:
                ray_node.kill()
    return 0


def default_shape() -> tuple[int, int]:
    """What a host offers boxes unless told: four vcpu per core (boxes are mostly idle), and
    its memory less a GiB for itself."""
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return 4 * (os.cpu_count() or 1), max(1024, pages // 2**20 - 1024)
