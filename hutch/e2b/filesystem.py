"""envd's filesystem service (`/filesystem.Filesystem/*`) over hutch's DataPlane file operations.

Paths relative to the user's home are made absolute here. `WatchDir` (the async SDK) streams a
hutch watch; `CreateWatcher`/`GetWatcherEvents`/`RemoveWatcher` (the sync SDK) keep one open in the
server and buffer its events until polled (bounded; a watcher not polled for 10 minutes is closed).
`includeEntry` gives create, write and chmod events their entry (read by the agent in the box);
`allowNetworkMounts` is accepted (a box has no network mounts). Remove of a missing path is done,
as envd's. A link is described as envd does: by what it leads to (`entry`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from hutch.e2b.common import box_path
from hutch.e2b.connect import (
    ConnectError,
    end_stream,
    envelope,
    flag,
    integer,
    invalid,
    read_stream_request,
    stream_response,
    text,
    timestamp,
)
from hutch.e2b.envd import Call
from hutch.errors import ApiError, Code
from hutch.services import boxops
from hutch.services.models import FsEntry, FsEvent

log = logging.getLogger("hutch.e2b")

FILE_TYPES = {"file": "FILE_TYPE_FILE", "dir": "FILE_TYPE_DIRECTORY", "symlink": "FILE_TYPE_SYMLINK"}
EVENT_TYPES = {"create": "EVENT_TYPE_CREATE", "write": "EVENT_TYPE_WRITE", "remove": "EVENT_TYPE_REMOVE",
               "rename": "EVENT_TYPE_RENAME", "chmod": "EVENT_TYPE_CHMOD"}
MAX_BUFFERED_BYTES = 1 * 2**20  # of event names, per watcher; past it events are dropped (and counted)
MAX_WATCHERS_PER_BOX = 32
MAX_WATCHERS_PER_TEAM = 256
IDLE_WATCHER = 600.0


def entry(e: FsEntry) -> dict[str, Any]:
    """A hutch FsEntry as envd's EntryInfo (int64 size as a string, as protojson has it). A link
    is described as envd does: the type and mode of what it leads to, and `symlinkTarget` the
    path it resolves to (a link that leads nowhere: no type, and its own path)."""
    kind: str = e.type
    mode = e.mode
    out: dict[str, Any] = {"name": e.name, "path": e.path, "size": str(e.size), "permissions": e.permissions,
                           "owner": e.owner, "group": e.group, "modifiedTime": timestamp(e.modified_time)}
    if e.type == "symlink":
        kind, mode = (e.link.type, e.link.mode) if e.link else ("", 0)
        out["symlinkTarget"] = e.link.path if e.link else e.path
    out.update(type=FILE_TYPES.get(kind, "FILE_TYPE_UNSPECIFIED"), mode=mode)
    if e.metadata:
        out["metadata"] = e.metadata
    return out


def event(ev: FsEvent, info: FsEntry | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": ev.name, "type": EVENT_TYPES.get(ev.type, "EVENT_TYPE_UNSPECIFIED")}
    if info is not None:
        out["entry"] = entry(info)
    return out


@dataclass
class EnvdWatch:
    """A hutch watch as envd's: where it looks, and whether its events carry the entry."""

    watch: Any  # hutch's FsWatch
    with_entry: bool

    def described(self, ev: FsEvent) -> dict[str, Any]:
        """The event as envd's; the entry (as envd: best effort, only for a create, write or
        chmod, a removed or renamed path's being gone) is the agent's, read in the box."""
        return event(ev, ev.entry if self.with_entry else None)


@dataclass
class Watcher:
    sandbox_id: str
    team_id: str
    watch: Any  # hutch's FsWatch
    events: list[dict[str, Any]] = field(default_factory=list)
    polled: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    buffered: int = 0  # bytes of the names in `events`
    lost: int = 0


@dataclass
class Watchers:
    open: dict[str, Watcher] = field(default_factory=dict)
    reaper: asyncio.Task[None] | None = None  # closes idle watchers even when no call comes

    def _start_reaper(self) -> None:
        async def every_minute() -> None:
            while self.open:
                await asyncio.sleep(60)
                with contextlib.suppress(Exception):
                    await self.reap()

        if self.reaper is None or self.reaper.done():
            self.reaper = asyncio.get_running_loop().create_task(every_minute())

    def _path(self, call: Call, msg: dict[str, Any], key: str = "path") -> str:
        path = text(msg, key)
        if not path:
            raise invalid(f"{key} is required")
        return box_path(path, call.user)

    async def _watch(self, call: Call, msg: dict[str, Any]) -> EnvdWatch:
        # allowNetworkMounts lifts envd's refusal of NFS, SMB and FUSE paths: a hutch box has none
        path = self._path(call, msg)
        with_entry = bool(flag(msg, "includeEntry", "include_entry"))
        return EnvdWatch(await call.st.data.watch(call.rec, path, bool(flag(msg, "recursive")), with_entry), with_entry)

    # --- unary ----------------------------------------------------------------------------------

    async def stat(self, call: Call, msg: dict[str, Any]) -> dict[str, Any]:
        return {"entry": entry(await call.st.data.stat(call.rec, self._path(call, msg), user=call.user))}

    async def list_dir(self, call: Call, msg: dict[str, Any]) -> dict[str, Any]:
        depth = integer(msg, "depth", default=1) or 1
        if not 1 <= depth <= 16:
            raise invalid("depth must be 1..16")
        entries = await call.st.data.list_dir(call.rec, self._path(call, msg), depth=depth, user=call.user)
        return {"entries": [entry(e) for e in entries]}

    async def make_dir(self, call: Call, msg: dict[str, Any]) -> dict[str, Any]:
        path = self._path(call, msg)
        made, created = await boxops.make_dir(call.st, call.rec, call.who, path, call.user)
        if not created:
            raise ApiError(Code.ALREADY_EXISTS, f"directory {path} already exists")
        return {"entry": entry(made)}

    async def move(self, call: Call, msg: dict[str, Any]) -> dict[str, Any]:
        source, destination = self._path(call, msg, "source"), self._path(call, msg, "destination")
        moved = await boxops.move(call.st, call.rec, call.who, source, destination, call.user)
        return {"entry": entry(moved)}

    async def remove(self, call: Call, msg: dict[str, Any]) -> dict[str, Any]:
        path = self._path(call, msg)
        try:
            await boxops.remove(call.st, call.rec, call.who, path, call.user)
        except ApiError as e:
            if e.code != Code.FILE_NOT_FOUND:  # as envd's (os.RemoveAll): nothing there is done
                raise
        return {}

    async def create_watcher(self, call: Call, msg: dict[str, Any]) -> dict[str, Any]:
        await self.reap()
        mine = [w for w in self.open.values() if w.team_id == call.rec.team_id]
        if (len(mine) >= MAX_WATCHERS_PER_TEAM
                or sum(w.sandbox_id == call.rec.id for w in mine) >= MAX_WATCHERS_PER_BOX):
            raise ApiError(Code.TOO_MANY_WATCHERS, "too many watchers are open; remove some")
        envd_watch = await self._watch(call, msg)
        w = Watcher(call.rec.id, call.rec.team_id, envd_watch.watch)
        watcher_id = str(uuid.uuid4())
        self.open[watcher_id] = w

        async def buffer() -> None:
            with contextlib.suppress(Exception):
                async for ev in w.watch.events:
                    described = envd_watch.described(ev)
                    size = len(ev.name) + (len(json.dumps(described["entry"])) if "entry" in described else 0) + 32
                    if w.buffered + size <= MAX_BUFFERED_BYTES:
                        w.events.append(described)
                        w.buffered += size
                    else:
                        w.lost += 1

        w.task = asyncio.get_running_loop().create_task(buffer())
        self._start_reaper()
        return {"watcherId": watcher_id}

    def _watcher(self, call: Call, msg: dict[str, Any]) -> tuple[str, Watcher]:
        watcher_id = text(msg, "watcherId", "watcher_id")
        w = self.open.get(watcher_id)
        if w is None or w.sandbox_id != call.rec.id:
            raise ApiError(Code.NOT_FOUND, f"watcher {watcher_id[:64]} not found")
        return watcher_id, w

    async def get_watcher_events(self, call: Call, msg: dict[str, Any]) -> dict[str, Any]:
        _id, w = self._watcher(call, msg)
        events, w.events, w.buffered, w.polled = w.events, [], 0, time.monotonic()
        if w.lost:  # envd's answer has no field for it: the server log says so
            log.warning("watcher %s of %s dropped %d events (not polled in time)", _id, w.sandbox_id, w.lost)
            w.lost = 0
        return {"events": events}

    async def remove_watcher(self, call: Call, msg: dict[str, Any]) -> dict[str, Any]:
        watcher_id, w = self._watcher(call, msg)
        await self._close(watcher_id, w)
        return {}

    async def _close(self, watcher_id: str, w: Watcher) -> None:
        self.open.pop(watcher_id, None)
        if w.task:  # stopped first: the events generator is not running when it is closed
            w.task.cancel()
            with contextlib.suppress(BaseException):
                await w.task
        with contextlib.suppress(Exception):
            await w.watch.aclose()

    async def reap(self) -> None:
        """Closes the watchers not polled for IDLE_WATCHER seconds and those whose watch ended
        (the box paused, was killed, or the directory went)."""
        now = time.monotonic()
        for watcher_id, w in list(self.open.items()):
            if now - w.polled > IDLE_WATCHER or (w.task and w.task.done()):
                await self._close(watcher_id, w)

    async def close(self) -> None:
        if self.reaper:
            self.reaper.cancel()
        for watcher_id, w in list(self.open.items()):
            await self._close(watcher_id, w)

    # --- streamed -------------------------------------------------------------------------------

    async def watch_dir(self, call: Call, request: Request) -> Response:
        envd_watch = await self._watch(call, await read_stream_request(request.stream()))
        watch = envd_watch.watch

        async def relay() -> AsyncIterator[bytes]:
            try:
                yield envelope({"start": {}})
                async for ev in watch.ticks:  # None: the agent's keep-alive, every 10 s of quiet
                    if ev is None:
                        yield envelope({"keepalive": {}})
                    else:
                        yield envelope({"filesystem": envd_watch.described(ev)})
                yield end_stream()
            except ApiError as e:
                yield end_stream(ConnectError.of(e))
            finally:
                with contextlib.suppress(Exception):
                    await watch.aclose()

        return stream_response(relay())


UNARY = {"Stat": Watchers.stat, "ListDir": Watchers.list_dir, "MakeDir": Watchers.make_dir,
         "Move": Watchers.move, "Remove": Watchers.remove, "CreateWatcher": Watchers.create_watcher,
         "GetWatcherEvents": Watchers.get_watcher_events, "RemoveWatcher": Watchers.remove_watcher}


async def dispatch(service: Watchers, method: str, call: Call, request: Request) -> Response:
    await service.reap()
    if method == "WatchDir":
        return await service.watch_dir(call, request)
    handler = UNARY.get(method)
    if handler is None:
        raise ConnectError.unimplemented(f"filesystem.Filesystem/{method}")
    return JSONResponse(await handler(service, call, await call.unary_message(request)))

