"""Snapshots' calls: take one of a box, read, list and delete them, boot boxes from one, fork a box."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from hutch.sdk import routes
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.flow import Call, Flow, send
from hutch.sdk.ops.sandboxes import DataPlane, network_body
from hutch.sdk.types import NetworkConfig, SandboxInfo, SnapshotInfo


def take(cfg: ConnectionConfig, sandbox_id: str, name: str | None, metadata: dict[str, str] | None,
         memory: bool) -> Flow[SnapshotInfo]:
    body = {"name": name, "metadata": metadata, "memory": memory}
    reply = yield from send(Call(*routes.TAKE_SNAPSHOT.at(cfg.base_url, sandbox_id=sandbox_id), cfg.headers(),
                                 json={k: v for k, v in body.items() if v is not None}))
    return SnapshotInfo.from_json(json.loads(reply.body))


def get(cfg: ConnectionConfig, ref: str) -> Flow[SnapshotInfo]:
    reply = yield from send(Call(*routes.GET_SNAPSHOT.at(cfg.base_url, ref=ref), cfg.headers()))
    return SnapshotInfo.from_json(json.loads(reply.body))


def list_snapshots(cfg: ConnectionConfig, metadata: dict[str, str] | None,
                   sandbox_id: str | None) -> Flow[list[SnapshotInfo]]:
    params = {}
    if metadata:
        params["metadata"] = urlencode(metadata)
    if sandbox_id:
        params["sandbox_id"] = sandbox_id
    reply = yield from send(Call(*routes.LIST_SNAPSHOTS.at(cfg.base_url), cfg.headers(), params=params))
    return [SnapshotInfo.from_json(d) for d in json.loads(reply.body)]


def delete(cfg: ConnectionConfig, ref: str) -> Flow[None]:
    yield from send(Call(*routes.DELETE_SNAPSHOT.at(cfg.base_url, ref=ref), cfg.headers()))


def boot_body(count: int, name: str | None, timeout_seconds: int | None, auto_delete_seconds: int | None,
              metadata: dict[str, str] | None, env_vars: dict[str, str] | None, network: NetworkConfig | None,
              secrets: dict[str, str] | None, volumes: dict[str, Any] | None = None) -> dict[str, Any]:
    body = {"count": count, "name": name, "timeout_seconds": timeout_seconds, "auto_delete_seconds": auto_delete_seconds,
            "metadata": metadata, "env_vars": env_vars, "network": network_body(network), "secrets": secrets,
            "volumes": volumes}
    return {k: v for k, v in body.items() if v is not None}


def _accesses(cfg: ConnectionConfig, body: bytes) -> list[tuple[SandboxInfo, DataPlane]]:
    return [(SandboxInfo.from_json(d), DataPlane(d["data_plane_url"], d["access_token"], d["id"], cfg))
            for d in json.loads(body)]


def boot(cfg: ConnectionConfig, ref: str, body: dict[str, Any]) -> Flow[list[tuple[SandboxInfo, DataPlane]]]:
    """Every box, or none (the server kills those that started when one did not)."""
    reply = yield from send(Call(*routes.BOOT_SNAPSHOT.at(cfg.base_url, ref=ref), cfg.headers(), json=body))
    return _accesses(cfg, reply.body)


def fork(cfg: ConnectionConfig, sandbox_id: str, body: dict[str, Any]) -> Flow[list[tuple[SandboxInfo, DataPlane]]]:
    reply = yield from send(Call(*routes.FORK_SANDBOX.at(cfg.base_url, sandbox_id=sandbox_id), cfg.headers(),
                                 json=body))
    return _accesses(cfg, reply.body)
