"""The API server's `hutch.node.api.NodeRuntime` in a fleet: a box is placed by Ray (a reservation
of its vcpu and memory on a node), then booted, paused and stopped by calls to that node, and its
agent reached through the node's relay. Which node runs a box is in the store (the sandbox's
`node`), so any API server answers for any box.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from hutch import tracing
from hutch.errors import ApiError, Code
from hutch.fleet import relay
from hutch.fleet.cluster import NoRoom, Placement
from hutch.fleet.nodeside import limits_json, volumes_json
from hutch.node.agent import AgentClient
from hutch.node.api import (
    BoxAgent,
    BoxRef,
    BoxStartError,
    Capacity,
    LimitsUnavailable,
    NoSpaceError,
    UsageSample,
    VolumeMount,
)
from hutch.node.spec import Limits
from hutch.services.metrics import Metrics
from hutch.store import Store

log = logging.getLogger("hutch.fleet")

CALL_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
PAUSE_TIMEOUT = httpx.Timeout(600.0, connect=5.0)  # a checkpoint of a large box to a shared disk
ALIVE_TIMEOUT = httpx.Timeout(5.0, connect=2.0)  # asked in a loop while a call waits: a silent node must not hold it


def vcpu_of(limits: Limits) -> int:
    return max(1, limits.cpu_shares // 1024, limits.cpus)


class FleetRuntime:
    """Boxes on the fleet's nodes, for one API server (any number of them run side by side)."""

    def __init__(self, store: Store, placement: Placement, key: str) -> None:
        self.store, self.placement, self._key = store, placement, key
        self._http = httpx.AsyncClient(timeout=CALL_TIMEOUT, headers={relay.KEY_HEADER: key},
                                       limits=httpx.Limits(max_keepalive_connections=0))
        # runtime id -> (node, box key, sandbox id): a runtime id is never reused. A box's reservation
        # is named by its sandbox's id (a box from a node's warm pool has a key of the pool's).
        self._where: dict[str, tuple[str, str, str]] = {}
        self._agents: dict[str, AgentClient] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.metrics: Metrics | None = None  # the server's, once made

    # --- where -----------------------------------------------------------------------------------

    def _locate(self, runtime_id: str) -> tuple[str, str, str] | None:
        found = self._where.get(runtime_id)
        if found is None:
            rec = self.store.sandbox_by_runtime(runtime_id)
            if rec is None or rec.node is None:
                return None
            found = self._where[runtime_id] = (rec.node, rec.box_key, rec.id)
        return found

    def _url(self, node: str) -> str:
        rec = self.store.get_node(node)
        if rec is None:
            raise ApiError(Code.NODE_UNREACHABLE, f"node {node} is not part of the fleet")
        return rec.url

    def _node_on(self, ray_node_id: str) -> str:
        for rec in self.store.list_nodes():
            if rec.ray_node_id == ray_node_id and rec.state == "up":
                return rec.id
        raise ApiError(Code.NODE_UNREACHABLE, "the box was placed on a Ray node that runs no hutch node")

    async def _call(self, node: str, call: str, args: dict[str, Any],
                    timeout: httpx.Timeout = CALL_TIMEOUT) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            headers: dict[str, str] = {}
            tracing.inject(headers)  # the node's span joins this call's trace
            resp = await self._http.post(f"{self._url(node)}{relay.RPC}{call}", json=args, timeout=timeout,
                                         headers=headers)
            answer = resp.json()
        except (httpx.HTTPError, ValueError) as e:
            raise ApiError(Code.NODE_UNREACHABLE, f"node {node} did not answer: {e}") from None
        finally:
            if self.metrics is not None:
                self.metrics.node_call_seconds.labels(call).observe(time.perf_counter() - started)
        if resp.status_code == 200 and isinstance(answer, dict):
            return answer
        error = answer.get("error") if isinstance(answer, dict) else None
        kind, message = (str(error.get("kind")), str(error.get("message"))) if isinstance(error, dict) else ("failed", "")
        if kind == "box_start":
            raise BoxStartError(message)
        if kind == "limits":
            raise LimitsUnavailable(message)
        if kind == "no_space":
            raise NoSpaceError(message)
        if kind == "disk_full":
            raise OSError(errno.ENOSPC, message)
        if kind == "root_gone":
            raise ApiError(Code.TEMPLATE_ROOT_GONE, message)
        if kind == "busy":
            raise ApiError(Code.NODE_UNREACHABLE, f"node {node} is busy: {message}")
        raise RuntimeError(f"node {node}: {message or kind}")

    # --- boot, restore ------------------------------------------------------------------------------

    async def _placed(self, sandbox_id: str, limits: Limits, call: str, args: dict[str, Any],
                      timeout: httpx.Timeout = CALL_TIMEOUT) -> BoxRef:
        started = time.perf_counter()
        try:
            ray_node = await self.placement.reserve(sandbox_id, vcpu_of(limits), limits.memory_mib)
            if self.metrics is not None:
                self.metrics.placement_seconds.observe(time.perf_counter() - started)
        except NoRoom as e:
            raise ApiError(Code.NO_CAPACITY, f"the fleet has no room for this sandbox: {e}; try again later") from None
        try:
            node = self._node_on(ray_node)
            answer = await self._call(node, call, args, timeout)
        except BaseException:
            await asyncio.shield(self._release(sandbox_id))
            raise
        ref = BoxRef(str(answer["runtime_id"]), str(answer["key"]), node=node)
        self._where[ref.runtime_id] = (node, ref.key, sandbox_id)
        return ref

    async def _release(self, sandbox_id: str) -> None:
        """Best effort: a reservation left behind is the watch's to release (a minute later)."""
        try:
            await self.placement.release(sandbox_id)
        except Exception as e:
            log.warning("releasing the reservation of %s: %r", sandbox_id, e)

    async def boot(self, key: str, rootfs: Path, limits: Limits, writable_root: bool = False,
                   volumes: tuple[VolumeMount, ...] = ()) -> BoxRef:
        if writable_root:
            raise ApiError(Code.INVALID_REQUEST, "a fleet's API server builds no templates itself")
        # the key of a box being created is its sandbox's id (hutch.services.creation)
        return await self._placed(key, limits, "boot", {"key": key, "rootfs": str(rootfs), "limits": limits_json(limits),
                                                        "volumes": volumes_json(volumes)})

    async def restore(self, key: str, rootfs: Path, limits: Limits, image_dir: Path,
                      volumes: tuple[VolumeMount, ...] = ()) -> BoxRef:
        rec = self.store.sandbox_by_box_key(key)
        return await self._placed(rec.id if rec else key, limits, "restore",
                                  {"key": key, "rootfs": str(rootfs), "limits": limits_json(limits), "image": str(image_dir),
                                   "volumes": volumes_json(volumes)},
                                  timeout=PAUSE_TIMEOUT)  # a large image read back from a shared disk

    # --- pause, wake, stop ----------------------------------------------------------------------------

    def _held(self, runtime_id: str) -> tuple[str, str, str]:
        found = self._locate(runtime_id)
        if found is None:
            raise KeyError(runtime_id)
        return found

    async def pause(self, runtime_id: str, image_dir: Path) -> None:
        node, _, sandbox_id = self._held(runtime_id)
        await self._call(node, "pause", {"runtime_id": runtime_id, "image": str(image_dir)}, timeout=PAUSE_TIMEOUT)
        await self._forget(runtime_id)
        await self._release(sandbox_id)  # a paused box holds no reservation

    async def snapshot(self, runtime_id: str, image_dir: Path) -> None:
        node, _, _ = self._held(runtime_id)  # it runs on where it is, with its reservation
        await self._call(node, "snapshot", {"runtime_id": runtime_id, "image": str(image_dir)}, timeout=PAUSE_TIMEOUT)

    async def wake(self, runtime_id: str) -> None:
        node, _, _ = self._held(runtime_id)
        await self._call(node, "wake", {"runtime_id": runtime_id})

    async def stop(self, runtime_id: str, key: str | None = None) -> None:
        found = self._locate(runtime_id)
        reservation = key
        if found is not None:
            node, key, reservation = found
            try:
                await self._call(node, "stop", {"runtime_id": runtime_id, "key": key})
            except ApiError as e:  # a lost node: its boxes went with it
                log.warning("stopping %s on node %s: %s", runtime_id, node, e.message)
        await self._forget(runtime_id)
        if reservation is not None:
            await self._release(reservation)

    def stop_later(self, runtime_id: str, key: str) -> None:
        task = asyncio.get_running_loop().create_task(self.stop(runtime_id, key))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _forget(self, runtime_id: str) -> None:
        self._where.pop(runtime_id, None)
        agent = self._agents.pop(runtime_id, None)
        if agent is not None:
            await agent.aclose()

    # --- what is known ----------------------------------------------------------------------------

    def holds(self, runtime_id: str) -> bool:
        found = self._locate(runtime_id)
        node = self.store.get_node(found[0]) if found else None
        return node is not None and node.state == "up"

    def is_running(self, runtime_id: str) -> bool:
        return self.holds(runtime_id)

    def checkpoint_estimate(self, runtime_id: str) -> int | None:
        return None  # the node's /proc is not this host's: the server holds a pause to its bound

    async def is_alive(self, runtime_id: str) -> bool:
        """Whether the box runs. A node that does not answer is not taken for a dead box: the
        fleet's watch says when a node is lost."""
        found = self._locate(runtime_id)
        if found is None or not self.holds(runtime_id):
            return False
        try:
            return bool((await self._call(found[0], "alive", {"runtime_id": runtime_id}, ALIVE_TIMEOUT))["alive"])
        except (ApiError, RuntimeError, KeyError):
            return True

    async def usage(self, runtime_id: str) -> list[UsageSample]:
        """The box's samples, from its node; none from a node that does not answer."""
        found = self._locate(runtime_id)
        if found is None or not self.holds(runtime_id):
            return []
        try:
            answer = await self._call(found[0], "usage", {"runtime_id": runtime_id}, ALIVE_TIMEOUT)
            return [UsageSample(**s) for s in answer["samples"]]
        except (ApiError, RuntimeError, KeyError, TypeError):
            return []

    def agent(self, runtime_id: str) -> BoxAgent | None:
        client = self._agents.get(runtime_id)
        if client is None:
            found = self._locate(runtime_id)
            if found is None:
                return None
            client = self._agents[runtime_id] = relay_agent(self._url(found[0]), runtime_id, self._key)
        return client

    # --- the rest of NodeRuntime -----------------------------------------------------------------------

    def start_reaping(self) -> None:
        """Each node watches its own boxes."""

    def notify_exits(self, callback: Callable[[str], None]) -> None:
        """A node marks its own ended boxes failed in the store."""

    async def adopt(self, running: dict[str, str]) -> set[str]:
        return set()  # each node takes back its own boxes when it starts

    def capacity(self) -> Capacity:
        nodes = [n for n in self.store.list_nodes() if n.state == "up"]
        return Capacity(boxes=0, cpus=sum(n.vcpu or 0 for n in nodes), memory_bytes=sum(n.memory_mib or 0 for n in nodes) * 2**20,
                        memory_available_bytes=0, cpu_caps=True, disk_caps=True)

    async def close(self) -> None:
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        for runtime_id in list(self._agents):
            await self._forget(runtime_id)
        await self._http.aclose()


def relay_agent(node_url: str, runtime_id: str, key: str) -> AgentClient:
    """A box's agent client through its node's relay: a connection of its own per request."""
    url = httpx.URL(node_url)
    host, port = url.host, url.port or 80

    async def dial() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(host, port)

    transport = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
    return AgentClient(f"{node_url}{relay.CHANNEL}{runtime_id}", transport, base_url=f"{node_url}{relay.CHANNEL}{runtime_id}",
                       headers={relay.KEY_HEADER: key}, dial=dial)

