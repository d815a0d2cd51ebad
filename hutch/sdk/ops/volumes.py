"""Volumes' calls: create, read, list, update and delete them; their files go through the same
calls as a sandbox's (`hutch.sdk.ops.files`), at the volume's own address with the API key."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlencode

from hutch.sdk.config import ConnectionConfig
from hutch.sdk.flow import Call, Flow, send
from hutch.sdk.ops.sandboxes import DataPlane
from hutch.sdk.types import VolumeInfo


def _url(cfg: ConnectionConfig, ref: str = "") -> str:
    return f"{cfg.base_url}/v1/volumes" + (f"/{quote(ref, safe='')}" if ref else "")


class VolumePlane(DataPlane):
    """Where a volume's files calls go: they carry the API key (no token to rotate)."""

    def __init__(self, cfg: ConnectionConfig, volume_id: str) -> None:
        super().__init__(_url(cfg, volume_id), "", "", cfg)

    def headers(self) -> dict[str, str]:
        return self.cfg.headers()


def create(cfg: ConnectionConfig, name: str, size_mib: int | None, metadata: dict[str, str] | None) -> Flow[VolumeInfo]:
    body: dict[str, Any] = {"name": name, "size_mib": size_mib, "metadata": metadata}
    reply = yield from send(Call("POST", _url(cfg), cfg.headers(), json={k: v for k, v in body.items() if v is not None}))
    return VolumeInfo.from_json(json.loads(reply.body))


def get(cfg: ConnectionConfig, ref: str) -> Flow[VolumeInfo]:
    reply = yield from send(Call("GET", _url(cfg, ref), cfg.headers()))
    return VolumeInfo.from_json(json.loads(reply.body))


def list_volumes(cfg: ConnectionConfig, metadata: dict[str, str] | None) -> Flow[list[VolumeInfo]]:
    params = {"metadata": urlencode(metadata)} if metadata else {}
    reply = yield from send(Call("GET", _url(cfg), cfg.headers(), params=params))
    return [VolumeInfo.from_json(d) for d in json.loads(reply.body)]


def update_metadata(cfg: ConnectionConfig, ref: str, metadata: dict[str, str]) -> Flow[VolumeInfo]:
    reply = yield from send(Call("PATCH", _url(cfg, ref), cfg.headers(), json={"metadata": metadata}))
    return VolumeInfo.from_json(json.loads(reply.body))


def delete(cfg: ConnectionConfig, ref: str) -> Flow[None]:
    yield from send(Call("DELETE", _url(cfg, ref), cfg.headers()))
