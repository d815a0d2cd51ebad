"""Snapshots on the control plane: take one of a box (/v1/sandboxes/{id}/snapshots), list, get and
delete them (/v1/snapshots), boot boxes from one, and fork a box (a snapshot taken for the forks)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qsl

from fastapi import APIRouter, Query, Response

from hutch.errors import ApiError
from hutch.server.auth import TeamDep
from hutch.server.state import State, StateDep
from hutch.services.models import BootSnapshot, CreateSnapshot, SandboxAccess, SnapshotInfo
from hutch.store import SandboxRecord

router = APIRouter()


@router.post("/v1/sandboxes/{sandbox_id}/snapshots", status_code=201, response_model=SnapshotInfo)
async def take_snapshot(sandbox_id: str, body: CreateSnapshot, st: StateDep, team_id: TeamDep) -> SnapshotInfo:
    return st.snapshots.info(await st.snapshots.take(team_id, sandbox_id, name=body.name, metadata=body.metadata,
                                                     memory=body.memory))


@router.get("/v1/snapshots", response_model=list[SnapshotInfo])
async def list_snapshots(st: StateDep, team_id: TeamDep,
                         metadata: Annotated[str | None, Query(max_length=4096, description="key=value&key=value")] = None,
                         sandbox_id: Annotated[str | None, Query(max_length=64, description="the box they were taken of")] = None,
                         ) -> list[SnapshotInfo]:
    wanted = dict(parse_qsl(metadata, keep_blank_values=True)) if metadata else None
    return [st.snapshots.info(s) for s in st.snapshots.find(team_id, wanted, sandbox_id)]


@router.get("/v1/snapshots/{ref}", response_model=SnapshotInfo)
async def get_snapshot(ref: str, st: StateDep, team_id: TeamDep) -> SnapshotInfo:
    return st.snapshots.info(st.snapshots.get(team_id, ref))


@router.delete("/v1/snapshots/{ref}", status_code=204)
async def delete_snapshot(ref: str, st: StateDep, team_id: TeamDep) -> Response:
    await st.snapshots.delete(team_id, ref)
    return Response(status_code=204)


async def _all_or_none(st: State, results: list[SandboxRecord | ApiError]) -> list[SandboxAccess]:
    """Every box, or the first failure with none of them left."""
    failed = next((r for r in results if isinstance(r, ApiError)), None)
    if failed is not None:
        for r in results:
            if isinstance(r, SandboxRecord):
                await st.sandboxes.kill(None, r.id)
        raise failed
    return [st.sandboxes.access(r) for r in results if isinstance(r, SandboxRecord)]


@router.post("/v1/snapshots/{ref}/sandboxes", status_code=201, response_model=list[SandboxAccess])
async def boot_snapshot(ref: str, body: BootSnapshot, st: StateDep, team_id: TeamDep) -> list[SandboxAccess]:
    snap = st.snapshots.get(team_id, ref)
    return await _all_or_none(st, await st.snapshots.boot(team_id, snap.id, body.create(st.snapshots.box_name(snap), snap.id),
                                                          body.count))


@router.post("/v1/sandboxes/{sandbox_id}/fork", status_code=201, response_model=list[SandboxAccess])
async def fork_sandbox(sandbox_id: str, body: BootSnapshot, st: StateDep, team_id: TeamDep) -> list[SandboxAccess]:
    return await _all_or_none(st, await st.snapshots.fork(team_id, sandbox_id, body))
