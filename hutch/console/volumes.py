"""The console's volumes: the team's list (what each takes, which boxes mount it, refreshed by
htmx), and the changes (create, delete), through the same service as the API's routes. A delete
while a live box mounts the volume is refused as the API refuses it, and the page says why."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.responses import Response

from hutch.console import session
from hutch.console.boxes import SessionDep
from hutch.console.pages import StateDep, changed, page, refused_form
from hutch.errors import ApiError, Code
from hutch.server.state import State
from hutch.services.models import CreateVolume, VolumeInfo

router = APIRouter()

PROBLEMS = {  # what a form's field must be, said the way a person reads it (never echoing what was sent)
    "name": "a volume's name is 1 to 128 letters, digits, '.', '_' and '-', starting with a letter or digit",
    "size_mib": "the size is a whole number of MiB, from 16 to 1048576 (or empty for the server's default)",
}


async def _infos(st: State, team_id: str) -> list[VolumeInfo]:
    return [await st.volumes.info(v) for v in st.store.list_volumes(team_id)]


@router.get("/volumes")
async def volumes_page(request: Request, st: StateDep, s: SessionDep) -> Response:
    """The list is rendered with the page (so a box's link to a volume's row lands on it), then refreshed."""
    return page(request, "volumes.html", s, volumes=await _infos(st, s.team_id), available=st.volumes.disks is not None)


@router.get("/volumes/rows")
async def volume_rows(request: Request, st: StateDep, s: SessionDep) -> Response:
    return page(request, "_volume_rows.html", s, volumes=await _infos(st, s.team_id))


def _request(fields: dict[str, str]) -> CreateVolume:
    size = fields.get("size_mib", "").strip()
    if size and not (size.isascii() and size.isdigit() and len(size) <= 9):  # int() takes '²' and 10**4300 badly
        raise ApiError(Code.INVALID_REQUEST, PROBLEMS["size_mib"])
    try:
        return CreateVolume(name=fields.get("name", "").strip(), size_mib=int(size) if size else None)
    except ValidationError as e:
        raise refused_form(e, PROBLEMS, "name") from None


@router.post("/volumes")
async def create(request: Request, st: StateDep) -> Response:
    """An empty volume, from the page's form (name, size in MiB)."""
    s, fields = await session.changing(st, request)
    await st.volumes.create(s.team_id, _request(fields))
    return changed(request, "volumes-changed", "/console/volumes")


@router.post("/volumes/{ref}/delete")
async def delete(request: Request, st: StateDep, ref: str) -> Response:
    """The volume and its files (the page asked the person first); refused while a live box mounts it."""
    s, _ = await session.changing(st, request)
    await st.volumes.delete(s.team_id, ref)  # by id (the page's) or name; another team's is a 404
    return changed(request, "volumes-changed", "/console/volumes")
