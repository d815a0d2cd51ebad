"""Volumes' calls: create, read, list, update and delete them; their files go through the same
calls as a sandbox's (`hutch.sdk.ops.files`), at the volume's own address with the API key."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from hutch.sdk import routes
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.flow import Call, Flow, send
from hutch.sdk.ops.sandboxes import DataPlane
from hutch.sdk.types import VolumeInfo


class VolumePlane(DataPlane):
    """Where a volume's files calls go: they carry the API key (no token to rotate)."""

    def __init__(self, cfg: ConnectionConfig, volume_id: str) -> None:
        super().__init__(cfg.base_url + routes.fill(routes.VOLUME_PLANE, ref=volume_id), "", "", cfg)

    def headers(self) -> dict[str, str]:
        return self.cfg.headers()


def create(cfg: ConnectionConfig, name: str, size_mib: int | None, metadata: dict[str, str] | None) -> Flow[VolumeInfo]:
    body: dict[str, Any] = {"name": name, "size_mib": size_mib, "metadata": metadata}
    reply = yield from send(Call(*routes.CREATE_VOLUME.at(cfg.base_url), cfg.headers(),
                                 json={k: v for k, v in body.items() if v is not None}))
    return VolumeInfo.from_json(json.loads(reply.body))


def get(cfg: ConnectionConfig, ref: str) -> Flow[VolumeInfo]:
    reply = yield from send(Call(*routes.GET_VOLUME.at(cfg.base_url, ref=ref), cfg.headers()))
    return VolumeInfo.from_json(json.loads(reply.body))


def list_volumes(cfg: ConnectionConfig, metadata: dict[str, str] | None) -> Flow[list[VolumeInfo]]:
    params = {"metadata": urlencode(metadata)} if metadata else {}
    reply = yield from send(Call(*routes.LIST_VOLUMES.at(cfg.base_url), cfg.headers(), params=params))
    return [VolumeInfo.from_json(d) for d in json.loads(reply.body)]


def update_metadata(cfg: ConnectionConfig, ref: str, metadata: dict[str, str]) -> Flow[VolumeInfo]:
    reply = yield from send(Call(*routes.UPDATE_VOLUME.at(cfg.base_url, ref=ref), cfg.headers(),
                                 json={"metadata": metadata}))
    return VolumeInfo.from_json(json.loads(reply.body))


def delete(cfg: ConnectionConfig, ref: str) -> Flow[None]:
    yield from send(Call(*routes.DELETE_VOLUME.at(cfg.base_url, ref=ref), cfg.headers()))
