"""The console's boxes: the team's list (filtered, refreshed by htmx), a box's page and its live
parts (use over time, processes, network log, audit log, files, preview ports), and the actions
(pause, resume, kill), each through the same services as the API's routes."""

from __future__ import annotations

import time
from typing import Annotated
from urllib.parse import parse_qsl, quote

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response, StreamingResponse

from hutch.console import session
from hutch.console.pages import StateDep, page, see_other
from hutch.console.plots import plots
from hutch.console.screen import is_desktop
from hutch.errors import ApiError, Code
from hutch.services import boxops
from hutch.services.dataplane import check_path
from hutch.services.models import FsEntry, ProcessInfo
from hutch.store import SandboxRecord, SandboxStatus

router = APIRouter()

LOG_ROWS = 100  # the newest rows of a box's network and audit logs a page shows
HOME = "/home/user"
RUNNING = (SandboxStatus.ACTIVE,)


def _session(st: StateDep, request: Request) -> session.Session:
    return session.current(st, request)


SessionDep = Annotated[session.Session, Depends(_session)]
PathQuery = Annotated[str, Query(max_length=4096)]


def _box(st: StateDep, s: session.Session, sandbox_id: str) -> SandboxRecord:
    """The team's own box: another team's is a 404, as it is on the API."""
    return st.sandboxes.get(s.team_id, sandbox_id)


@router.get("/boxes")
async def boxes_page(request: Request, st: StateDep, s: SessionDep) -> Response:
    return page(request, "boxes.html", s, statuses=[x.value for x in SandboxStatus if x != SandboxStatus.DELETED])


@router.get("/boxes/rows")
async def box_rows(request: Request, st: StateDep, s: SessionDep, status: str = "",
                   q: Annotated[str, Query(max_length=200)] = "",
                   metadata: Annotated[str, Query(max_length=4096)] = "") -> Response:
    """The list's rows, filtered by status, by a word of the name or id, and by metadata
    (key=value&key=value, as the API takes it)."""
    wanted = dict(parse_qsl(metadata, keep_blank_values=True)) if metadata.strip() else None
    known = {x.value for x in SandboxStatus}
    infos = st.sandboxes.infos(st.store.list_sandboxes(s.team_id, status if status in known else None, wanted))
    word = q.strip().lower()
    shown = [i for i in reversed(infos) if not word or word in i.name.lower() or word in i.id]
    return page(request, "_box_rows.html", s, boxes=shown, now=time.time())


@router.post("/boxes/{sandbox_id}/{action}")
async def act(request: Request, st: StateDep, sandbox_id: str, action: str) -> Response:
    """Pause, resume or kill (the page asked the person first), as the API's own routes do them."""
    s, _ = await session.changing(st, request)
    rec = _box(st, s, sandbox_id)
    if action == "pause":
        await st.sandboxes.pause(s.team_id, rec.id)
    elif action == "resume":
        await st.sandboxes.resume(s.team_id, rec.id)
    elif action == "kill":
        await st.sandboxes.kill(s.team_id, rec.id)
    else:
        raise ApiError(Code.NOT_FOUND, f"no action {action[:20]!r}")
    if request.headers.get("hx-request"):  # the list and the box's page refresh on this event
        if action == "kill":  # its page is gone: back to the list
            return Response(status_code=204, headers={"HX-Redirect": "/console/boxes"})
        return Response(status_code=204, headers={"HX-Trigger": "boxes-changed"})
    return see_other("/console/boxes" if action == "kill" else f"/console/boxes/{rec.id}")


@router.get("/boxes/{sandbox_id}")
async def box_page(request: Request, st: StateDep, s: SessionDep, sandbox_id: str) -> Response:
    rec = _box(st, s, sandbox_id)
    return page(request, "box.html", s, box=st.sandboxes.info(rec), home=HOME, desktop=is_desktop(st, rec))


@router.get("/boxes/{sandbox_id}/part/info")
async def info_part(request: Request, st: StateDep, s: SessionDep, sandbox_id: str) -> Response:
    return page(request, "_box_info.html", s, box=st.sandboxes.info(_box(st, s, sandbox_id)), now=time.time())


@router.get("/boxes/{sandbox_id}/part/usage")
async def usage_part(request: Request, st: StateDep, s: SessionDep, sandbox_id: str) -> Response:
    rec = _box(st, s, sandbox_id)
    samples = await st.node.usage(rec.runtime_id) if rec.status in RUNNING and rec.runtime_id else []
    return page(request, "_usage.html", s, plots=plots(rec, samples), box=rec)


@router.get("/boxes/{sandbox_id}/part/processes")
async def processes_part(request: Request, st: StateDep, s: SessionDep, sandbox_id: str) -> Response:
    rec = _box(st, s, sandbox_id)
    procs: list[ProcessInfo] = await st.data.list_processes(rec) if rec.status in RUNNING else []
    return page(request, "_processes.html", s, processes=procs, box=rec)


@router.get("/boxes/{sandbox_id}/part/network")
async def network_part(request: Request, st: StateDep, s: SessionDep, sandbox_id: str) -> Response:
    log = st.sandboxes.network_log(s.team_id, sandbox_id, LOG_ROWS, None)
    return page(request, "_network.html", s, entries=log.entries)


@router.get("/boxes/{sandbox_id}/part/audit")
async def audit_part(request: Request, st: StateDep, s: SessionDep, sandbox_id: str) -> Response:
    rec = _box(st, s, sandbox_id)
    return page(request, "_audit.html", s, entries=st.audit.page(rec.id, LOG_ROWS, None).entries)


@router.get("/boxes/{sandbox_id}/part/previews")
async def previews_part(request: Request, st: StateDep, s: SessionDep, sandbox_id: str) -> Response:
    return page(request, "_previews.html", s, ports=st.previews.list(_box(st, s, sandbox_id)))


@router.get("/boxes/{sandbox_id}/part/files")
async def files_part(request: Request, st: StateDep, s: SessionDep, sandbox_id: str, path: PathQuery = HOME) -> Response:
    """A directory's entries, as the box user sees them (the agent keeps the listing to their rights)."""
    rec = _box(st, s, sandbox_id)
    where = check_path(path)
    error: str | None = None
    entries: list[FsEntry] = []
    if rec.status not in RUNNING:
        error = f"the box is {rec.status}: its files can be read while it runs"
    else:
        try:
            entries = await st.data.list_dir(rec, where, 1, None)
        except ApiError as e:  # a wrong path is said on the page, which stays usable
            error = e.message
    parent = where.rstrip("/").rsplit("/", 1)[0] or "/"
    return page(request, "_files.html", s, box=rec, path=where, parent=parent, entries=entries, error=error)


@router.get("/boxes/{sandbox_id}/download")
async def download(request: Request, st: StateDep, s: SessionDep, sandbox_id: str, path: PathQuery) -> Response:
    """A file's bytes as an attachment, read and audited as the SDK's read is (boxops)."""
    rec = _box(st, s, sandbox_id)
    size, body = await boxops.read_file(st, rec, s.actor(request), check_path(path), None)
    name = path.rstrip("/").rsplit("/", 1)[-1] or "file"
    headers = {"Content-Disposition": f"attachment; filename*=UTF-8''{quote(name)}",
               "X-Content-Type-Options": "nosniff"}
    if size is not None:
        headers["Content-Length"] = str(size)
    return StreamingResponse(body, media_type="application/octet-stream", headers=headers)
