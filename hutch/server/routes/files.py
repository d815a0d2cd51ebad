"""The data plane's files (/data/v1/sandboxes/{id}/files): write, read, zip a directory, and the
filesystem calls (stat, list, mkdir, move, remove, watch), as the box user unless user=root."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from starlette.responses import StreamingResponse

from hutch.server.auth import ActorDep, BoxDep
from hutch.server.state import StateDep
from hutch.services import boxops
from hutch.services.models import DirMade, FileWritten, FsEntries, FsEntry, MakeDir, MoveEntry, User

router = APIRouter(prefix="/data/v1/sandboxes/{sandbox_id}")
WHOLE_UP_TO = 256 * 2**10  # a file up to this size is read whole and sent in one answer


def declared_length(request: Request) -> int | None:
    """An upload's Content-Length, if it is a plain number (uvicorn holds the body to it)."""
    declared = request.headers.get("content-length") or ""
    return int(declared) if declared.isascii() and declared.isdigit() and len(declared) <= 20 else None


@router.put("/files", response_model=FileWritten)
async def write_file(request: Request, rec: BoxDep, st: StateDep, who: ActorDep,
                     path: Annotated[str, Query(max_length=4096)],
                     user: Literal["user", "root"] | None = None) -> Any:
    return await boxops.write_file(st, rec, who, path, request.stream(), user, length=declared_length(request))


@router.get("/files", response_class=StreamingResponse,
            responses={200: {"content": {"application/octet-stream": {}}}})
async def read_file(rec: BoxDep, st: StateDep, who: ActorDep, path: Annotated[str, Query(max_length=4096)],
                    user: User | None = None) -> Any:
    """A file's bytes, read as the box user (its rights, its links) unless user=root."""
    size, body = await boxops.read_file(st, rec, who, path, user)
    if size is not None and size <= WHOLE_UP_TO:  # a streamed answer costs ~1 ms more to set up than to send
        return Response(b"".join([piece async for piece in body]), media_type="application/octet-stream")
    headers = {"Content-Length": str(size)} if size is not None else None
    return StreamingResponse(body, media_type="application/octet-stream", headers=headers)


@router.get("/files/zip", response_class=StreamingResponse,
            responses={200: {"content": {"application/zip": {}}}})
async def download_dir(rec: BoxDep, st: StateDep, who: ActorDep, path: Annotated[str, Query(max_length=4096)],
                       user: User | None = None) -> Any:
    """A directory and everything under it as a zip, as the box user sees it unless user=root."""
    return StreamingResponse(await boxops.zip_dir(st, rec, who, path, user), media_type="application/zip")


# filesystem operations: as the box user unless user=root (the agent keeps each to its rights)

@router.get("/files/stat", response_model=FsEntry)
async def stat_file(rec: BoxDep, st: StateDep, path: Annotated[str, Query(max_length=4096)],
                    user: User | None = None) -> FsEntry:
    """A file, directory or link (described, not followed)."""
    return await st.data.stat(rec, path, user)


@router.get("/files/list", response_model=FsEntries)
async def list_dir(rec: BoxDep, st: StateDep, path: Annotated[str, Query(max_length=4096)],
                   depth: Annotated[int, Query(ge=1, le=16)] = 1, user: User | None = None) -> FsEntries:
    """A directory's entries, `depth` levels down, sorted; at most 10,000 (400 too_many_entries)."""
    return FsEntries(entries=await st.data.list_dir(rec, path, depth, user))


@router.post("/files/mkdir", response_model=DirMade)
async def make_dir(body: MakeDir, rec: BoxDep, st: StateDep, who: ActorDep) -> DirMade:
    """mkdir -p; `created` is false if it was a directory already (409 if it is something else)."""
    entry, created = await boxops.make_dir(st, rec, who, body.path, body.user)
    return DirMade(entry=entry, created=created)


@router.post("/files/move", response_model=FsEntry)
async def move_file(body: MoveEntry, rec: BoxDep, st: StateDep, who: ActorDep) -> FsEntry:
    """Rename a file or directory; answers the destination's entry."""
    return await boxops.move(st, rec, who, body.source, body.destination, body.user)


@router.delete("/files", status_code=204, response_class=Response)
async def remove_file(rec: BoxDep, st: StateDep, who: ActorDep, path: Annotated[str, Query(max_length=4096)],
                      user: User | None = None) -> Response:
    """A file or link, or a directory with everything in it."""
    await boxops.remove(st, rec, who, path, user)
    return Response(status_code=204)


@router.get("/files/watch", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
async def watch_dir(rec: BoxDep, st: StateDep, path: Annotated[str, Query(max_length=4096)],
                    recursive: bool = False) -> Any:
    """A directory's changes as server-sent events, one FsEvent per `data:` line, with keep-alive
    comments; the watch is in place when the headers arrive. Ends when the directory goes."""
    watch = await st.data.watch(rec, path, recursive)

    async def events() -> AsyncIterator[bytes]:
        try:
            yield b": watching\n\n"
            async for ev in watch.ticks:
                yield b": keep-alive\n\n" if ev is None else b"data: " + ev.model_dump_json().encode() + b"\n\n"
        finally:
            await watch.aclose()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
