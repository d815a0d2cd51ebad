"""Volumes on the control plane (/v1/volumes): create, list, get, update and delete them, and their
files with no box (/v1/volumes/{ref}/files...), in the shapes of a sandbox's files calls."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Query, Request, Response
from starlette.responses import StreamingResponse

from hutch.server.auth import TeamDep
from hutch.server.routes.files import WHOLE_UP_TO, declared_length
from hutch.server.state import StateDep
from hutch.services.dataplane import entry_model
from hutch.services.models import (
    CreateVolume,
    DirMade,
    FileWritten,
    FsEntries,
    FsEntry,
    MakeDir,
    MoveEntry,
    UpdateVolume,
    VolumeInfo,
    VolumeRef,
)

router = APIRouter()
FilePath = Annotated[str, Query(max_length=4096)]


@router.post("/v1/volumes", status_code=201, response_model=VolumeInfo)
async def create_volume(body: CreateVolume, st: StateDep, team_id: TeamDep) -> VolumeInfo:
    """An empty volume of `size_mib` (default 1 GiB): its files outlive every box that mounts it."""
    return await st.volumes.info(await st.volumes.create(team_id, body))


@router.get("/v1/volumes", response_model=list[VolumeInfo])
async def list_volumes(st: StateDep, team_id: TeamDep,
                       metadata: Annotated[str | None, Query(max_length=4096, description="key=value&key=value")] = None,
                       ) -> list[VolumeInfo]:
    wanted = dict(parse_qsl(metadata, keep_blank_values=True)) if metadata else None
    return [await st.volumes.info(v) for v in st.store.list_volumes(team_id, wanted)]


@router.get("/v1/volumes/{ref}", response_model=VolumeInfo)
async def get_volume(ref: VolumeRef, st: StateDep, team_id: TeamDep) -> VolumeInfo:
    return await st.volumes.info(st.volumes.get(team_id, ref))


@router.patch("/v1/volumes/{ref}", response_model=VolumeInfo)
async def update_volume(ref: VolumeRef, body: UpdateVolume, st: StateDep, team_id: TeamDep) -> VolumeInfo:
    """Replace its metadata."""
    return await st.volumes.info(st.volumes.update_metadata(team_id, ref, body.metadata))


@router.delete("/v1/volumes/{ref}", status_code=204)
async def delete_volume(ref: VolumeRef, st: StateDep, team_id: TeamDep) -> Response:
    """The volume and its files; 409 volume_in_use while a live box (running or paused) mounts it."""
    await st.volumes.delete(team_id, ref)
    return Response(status_code=204)


# --- files ----------------------------------------------------------------------------------------

@router.put("/v1/volumes/{ref}/files", response_model=FileWritten)
async def write_file(ref: VolumeRef, request: Request, st: StateDep, team_id: TeamDep, path: FilePath) -> Any:
    """Write a file whole (parents made); it belongs to the box user. 507 when the volume is full."""
    entry = await st.volumes.write_file(team_id, ref, path, request.stream(), declared_length(request))
    return {"path": entry["path"], "size": entry["size"]}


@router.get("/v1/volumes/{ref}/files", response_class=StreamingResponse,
            responses={200: {"content": {"application/octet-stream": {}}}})
async def read_file(ref: VolumeRef, st: StateDep, team_id: TeamDep, path: FilePath) -> Any:
    size, body = await st.volumes.read_file(team_id, ref, path)
    if size <= WHOLE_UP_TO:
        return Response(b"".join([piece async for piece in body]), media_type="application/octet-stream")
    return StreamingResponse(body, media_type="application/octet-stream", headers={"Content-Length": str(size)})


@router.get("/v1/volumes/{ref}/files/stat", response_model=FsEntry)
async def stat_file(ref: VolumeRef, st: StateDep, team_id: TeamDep, path: FilePath) -> FsEntry:
    """A file, directory or link (described, not followed)."""
    return entry_model(await st.volumes.stat(team_id, ref, path))


@router.get("/v1/volumes/{ref}/files/list", response_model=FsEntries)
async def list_dir(ref: VolumeRef, st: StateDep, team_id: TeamDep, path: FilePath,
                   depth: Annotated[int, Query(ge=1, le=16)] = 1) -> FsEntries:
    """A directory's entries, `depth` levels down, sorted; at most 10,000 (400 too_many_entries)."""
    return FsEntries(entries=[entry_model(e) for e in await st.volumes.list_dir(team_id, ref, path, depth)])


@router.post("/v1/volumes/{ref}/files/mkdir", response_model=DirMade)
async def make_dir(ref: VolumeRef, body: MakeDir, st: StateDep, team_id: TeamDep) -> DirMade:
    entry, created = await st.volumes.make_dir(team_id, ref, body.path)
    return DirMade(entry=entry_model(entry), created=created)


@router.post("/v1/volumes/{ref}/files/move", response_model=FsEntry)
async def move_file(ref: VolumeRef, body: MoveEntry, st: StateDep, team_id: TeamDep) -> FsEntry:
    return entry_model(await st.volumes.move(team_id, ref, body.source, body.destination))


@router.delete("/v1/volumes/{ref}/files", status_code=204, response_class=Response)
async def remove_file(ref: VolumeRef, st: StateDep, team_id: TeamDep, path: FilePath) -> Response:
    """A file or link, or a directory with everything in it (links are removed, never followed)."""
    await st.volumes.remove(team_id, ref, path)
    return Response(status_code=204)
