"""E2B's volumes over hutch's (hutch.services.volumes): the control plane's /volumes (X-API-KEY), and
the volume content API at /volumecontent/{volumeID}/... with the volume's own bearer token, as the
e2b SDK (2.63) speaks them. The SDK reads content calls' base from E2B_VOLUME_API_URL, which
hutch's client.env sets to the same <hutch>/e2b as E2B_API_URL.

A volume's token is an HMAC of its id under the server's key: it names one volume, is never
stored, and reads and writes only that volume's files.
"""

from __future__ import annotations

import hmac
import re
import time
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request, Response
from pydantic import ValidationError
from starlette.responses import JSONResponse, StreamingResponse

from hutch.e2b.common import Ctx, StateGetter, validation_message
from hutch.errors import ApiError, Code
from hutch.node.api import Entry
from hutch.server.routes.files import declared_length
from hutch.services.models import CreateVolume, VolumeMountSpec
from hutch.store import VolumeRecord

if TYPE_CHECKING:
    from hutch.server.state import State

_TYPES = {"dir": "directory", "file": "file", "symlink": "symlink"}
_ID = re.compile(r"[0-9a-f-]{36}")
MAX_ID = 36


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds % 1 * 1e6):06d}Z"


def stat_of(e: Entry) -> dict[str, Any]:
    """A volume entry as E2B's VolumeEntryStat."""
    return {"name": e["name"], "type": _TYPES.get(e["type"], "unknown"), "path": e["path"], "size": e["size"],
            "mode": e["mode"], "uid": e.get("uid", 0), "gid": e.get("gid", 0), "atime": _iso(e.get("atime", e["mtime"])),
            "mtime": _iso(e["mtime"]), "ctime": _iso(e.get("ctime", e["mtime"])), "target": e.get("target")}


def token_of(st: State, volume_id: str) -> str:
    return st.signer.keyed(f"volume/{volume_id}", 1)


def mounts_of(body: dict[str, Any]) -> dict[str, str | VolumeMountSpec] | None:
    """E2B's `volumeMounts` ([{"name", "path"}]) as a create's `volumes`."""
    given = body.get("volumeMounts")
    if not given:
        return None
    if not isinstance(given, list) or not all(isinstance(m, dict) for m in given):
        raise ApiError(Code.INVALID_REQUEST, "volumeMounts must be a list of {name, path}")
    mounts: dict[str, str | VolumeMountSpec] = {}
    for m in given:
        name, path = m.get("name"), m.get("path")
        if not isinstance(name, str) or not isinstance(path, str) or not name or not path:
            raise ApiError(Code.INVALID_REQUEST, "each of volumeMounts has a name and a path")
        if path in mounts:
            raise ApiError(Code.INVALID_REQUEST, f"two volumes are mounted at {path[:256]!r}")
        mounts[path] = name
    return mounts


def mounted(volumes: list[dict[str, Any]] | None) -> list[dict[str, str]]:
    """A box's mounts as E2B's sandbox detail shows them."""
    return [{"name": m["name"], "path": m["path"]} for m in volumes or ()]


class VolumeApi:
    def __init__(self, get_state: StateGetter) -> None:
        self.get_state = get_state

    def volume(self, c: Ctx, volume_id: str) -> VolumeRecord:
        """By id only, as E2B's API names them (a name that looks like none is no volume)."""
        rec = c.st.store.get_volume(volume_id, c.team_id) if _ID.fullmatch(volume_id) else None
        if rec is None or rec.id != volume_id:
            raise ApiError(Code.NOT_FOUND, f"volume {volume_id[:MAX_ID]!r} not found")
        return rec

    def with_token(self, c: Ctx, rec: VolumeRecord) -> dict[str, Any]:
        return {"volumeID": rec.id, "name": rec.name, "token": token_of(c.st, rec.id), "domain": None}

    async def create(self, c: Ctx, body: dict[str, Any]) -> dict[str, Any]:
        try:
            req = CreateVolume.model_validate({"name": body.get("name")})
        except ValidationError as e:
            raise ApiError(Code.INVALID_REQUEST, validation_message(e)) from None
        return self.with_token(c, await c.st.volumes.create(c.team_id, req))

    def content_ctx(self, request: Request, volume_id: str) -> tuple[Ctx, VolumeRecord]:
        """The volume a content call's bearer token is for: that token, for that volume, only."""
        st = self.get_state()
        auth = request.headers.get("authorization", "")
        token = auth[7:] if auth[:7].lower() == "bearer " else ""
        if not token or not _ID.fullmatch(volume_id) or not hmac.compare_digest(token, token_of(st, volume_id)):
            raise ApiError(Code.UNAUTHORIZED, "the volume's token is required (Authorization: Bearer)")
        rec = st.store.get_volume(volume_id)
        if rec is None:
            raise ApiError(Code.NOT_FOUND, f"volume {volume_id!r} not found")
        return Ctx(st, rec.team_id), rec


def _path(request: Request) -> str:
    path = request.query_params.get("path")
    if not path:
        raise ApiError(Code.INVALID_REQUEST, "path is required")
    return path if path.startswith("/") else "/" + path


def _opt_int(request: Request, key: str, top: int) -> int | None:
    raw = request.query_params.get(key)
    if raw is None or raw == "":
        return None
    if not re.fullmatch(r"[0-9]{1,10}", raw) or int(raw) > top:
        raise ApiError(Code.INVALID_REQUEST, f"{key} must be an integer from 0 to {top}")
    return int(raw)


def _attrs(values: dict[str, Any]) -> tuple[int | None, int | None, int | None]:
    out: list[int | None] = []
    for key, top in (("uid", 65535), ("gid", 65535), ("mode", 0o7777)):
        v = values.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= top):
            raise ApiError(Code.INVALID_REQUEST, f"{key} must be an integer from 0 to {top}")
        out.append(v)
    return out[0], out[1], out[2]


def _query_attrs(request: Request) -> tuple[int | None, int | None, int | None]:
    return _opt_int(request, "uid", 65535), _opt_int(request, "gid", 65535), _opt_int(request, "mode", 0o7777)


def volume_routes(app: FastAPI, get_state: StateGetter, ctx: Any, body_of: Any) -> None:
    """On E2B's control app: `ctx(request)` is its API-key check, `body_of(request)` its JSON body."""
    api = VolumeApi(get_state)

    @app.post("/volumes", status_code=201)
    async def create(request: Request) -> Any:
        c = await ctx(request)
        return JSONResponse(await api.create(c, await body_of(request)), status_code=201)

    @app.get("/volumes")
    async def list_volumes(request: Request) -> Any:
        c = await ctx(request)
        return [{"volumeID": v.id, "name": v.name} for v in c.st.store.list_volumes(c.team_id)]

    @app.get("/volumes/{volume_id}")
    async def get_volume(volume_id: str, request: Request) -> Any:
        c = await ctx(request)
        return api.with_token(c, api.volume(c, volume_id))

    @app.delete("/volumes/{volume_id}", status_code=204)
    async def delete_volume(volume_id: str, request: Request) -> Response:
        c = await ctx(request)
        await c.st.volumes.delete(c.team_id, api.volume(c, volume_id).id)
        return Response(status_code=204)

    # --- content: the volume's token ------------------------------------------------------------

    @app.get("/volumecontent/{volume_id}/file")
    async def read_file(volume_id: str, request: Request) -> Any:
        c, rec = api.content_ctx(request, volume_id)
        size, body = await c.st.volumes.read_file(c.team_id, rec.id, _path(request))
        return StreamingResponse(body, media_type="application/octet-stream", headers={"Content-Length": str(size)})

    @app.put("/volumecontent/{volume_id}/file", status_code=201)
    async def write_file(volume_id: str, request: Request) -> Any:
        c, rec = api.content_ctx(request, volume_id)
        path = _path(request)
        uid, gid, mode = _query_attrs(request)
        entry = await c.st.volumes.write_file(c.team_id, rec.id, path, request.stream(), declared_length(request))
        if uid is not None or gid is not None or mode is not None:
            entry = await c.st.volumes.set_attrs(c.team_id, rec.id, path, uid, gid, mode)
        return JSONResponse(stat_of(entry), status_code=201)

    @app.get("/volumecontent/{volume_id}/dir")
    async def list_dir(volume_id: str, request: Request) -> Any:
        c, rec = api.content_ctx(request, volume_id)
        depth = _opt_int(request, "depth", 16) or 1
        return [stat_of(e) for e in await c.st.volumes.list_dir(c.team_id, rec.id, _path(request), depth)]

    @app.post("/volumecontent/{volume_id}/dir", status_code=201)
    async def make_dir(volume_id: str, request: Request) -> Any:
        c, rec = api.content_ctx(request, volume_id)
        path = _path(request)
        uid, gid, mode = _query_attrs(request)
        if request.query_params.get("force") != "true":  # without force, as mkdir: its parent must be there
            parent = path.rstrip("/").rsplit("/", 1)[0] or "/"
            if (await c.st.volumes.stat(c.team_id, rec.id, parent))["type"] != "dir":
                raise ApiError(Code.NOT_A_DIRECTORY, f"{parent} is not a directory")
        entry, _created = await c.st.volumes.make_dir(c.team_id, rec.id, path)
        if uid is not None or gid is not None or mode is not None:
            entry = await c.st.volumes.set_attrs(c.team_id, rec.id, path, uid, gid, mode)
        return JSONResponse(stat_of(entry), status_code=201)

    @app.get("/volumecontent/{volume_id}/path")
    async def stat_path(volume_id: str, request: Request) -> Any:
        c, rec = api.content_ctx(request, volume_id)
        return stat_of(await c.st.volumes.stat(c.team_id, rec.id, _path(request)))

    @app.patch("/volumecontent/{volume_id}/path")
    async def update_path(volume_id: str, request: Request) -> Any:
        c, rec = api.content_ctx(request, volume_id)
        uid, gid, mode = _attrs(await body_of(request))
        return stat_of(await c.st.volumes.set_attrs(c.team_id, rec.id, _path(request), uid, gid, mode))

    @app.delete("/volumecontent/{volume_id}/path", status_code=204)
    async def remove_path(volume_id: str, request: Request) -> Response:
        c, rec = api.content_ctx(request, volume_id)
        await c.st.volumes.remove(c.team_id, rec.id, _path(request))
        return Response(status_code=204)

