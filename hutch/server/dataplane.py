"""The data plane's work: relaying commands and files between a client and a box's agent.

Bodies stream through in both directions; nothing here holds a whole file or a command's whole
output in memory. What the agent sends is read as hostile too (root in a box can take the agent's
place): lines and error bodies are bounded, and every event is checked before it is used.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import ValidationError as PydanticValidationError

from hutch.errors import ApiError, Code, code_of
from hutch.guest import protocol
from hutch.node.boxcmd import (
    EXEC_TIMEOUT,
    MAX_REPLY_BYTES,
    AgentProtocolError,
    event_lines,
    parse_event,
    read_capped,
)
from hutch.node.node import ChannelError
from hutch.server.models import CommandResult, FsEntry, FsEvent, ProcessInfo, RunCommand, SpawnCommand, timestamp
from hutch.server.sandboxes import Sandboxes
from hutch.store import SandboxRecord

FILE_TIMEOUT = httpx.Timeout(connect=5.0, read=120.0, write=120.0, pool=10.0)
MAX_COLLECTED_OUTPUT = 64 * 2**20  # a command's output gathered into one JSON answer


# the agent's codes that are passed on (under the catalogue's status); any other is an agent_error
AGENT_CODES = {code_of(c) for c in (
    protocol.ERR_BAD_PATH, protocol.ERR_NOT_FOUND, protocol.ERR_IS_DIR, protocol.ERR_NOT_DIR, protocol.ERR_NOT_REGULAR,
    protocol.ERR_BAD_REQUEST, protocol.ERR_BAD_CWD, protocol.ERR_IO, protocol.ERR_UNSAFE_PATH, protocol.ERR_NO_PROCESS,
    protocol.ERR_NOT_TTY, protocol.ERR_STDIN_CLOSED, protocol.ERR_TOO_MANY_PROCS, protocol.ERR_STDIN_FULL,
    protocol.ERR_PERMISSION, protocol.ERR_EXISTS, protocol.ERR_TOO_MANY_ENTRIES)}
MAX_LIST_REPLY = 16 * 2**20  # the agent stops a listing at 10,000 entries or 8 MiB of them
MAX_DEPTH = 16
_ENTRY_TYPES = ("file", "dir", "symlink", "other")
_EVENT_TYPES = ("create", "write", "remove", "rename", "chmod")


def check_path(path: str) -> str:
    problem = protocol.path_problem(path)
    if problem:
        raise ApiError(Code.INVALID_PATH, f"{problem}: {path!r}")
    return path


async def _agent_error(resp: httpx.Response) -> ApiError:
    try:
        err = json.loads(await read_capped(resp))
        code, message = err["code"], err["message"]
        if not (isinstance(code, str) and isinstance(message, str)) or not 400 <= resp.status_code < 600:
            raise TypeError
        known = code_of(code) if code in AGENT_CODES else None  # the agent's word: only codes we know
        return ApiError(known or Code.AGENT_ERROR, message[:2000])
    except (ValueError, KeyError, TypeError, AgentProtocolError, httpx.TransportError):
        return ApiError(Code.AGENT_ERROR, f"the sandbox's agent answered {resp.status_code}")


def _process_info(d: Any) -> ProcessInfo:
    try:
        return ProcessInfo.model_validate(d)
    except PydanticValidationError:
        raise ApiError(Code.AGENT_ERROR, "a malformed process description from the sandbox's agent") from None


def _text(value: Any, limit: int = 8192) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise TypeError
    return value


def _entry(d: Any) -> FsEntry:
    """An entry from the agent, checked field by field."""
    try:
        if not isinstance(d, dict) or d["type"] not in _ENTRY_TYPES:
            raise TypeError
        size, mode, mtime, target = d["size"], d["mode"], d["mtime"], d.get("target")
        if type(size) is not int or size < 0 or type(mode) is not int or not 0 <= mode <= 0o7777:
            raise TypeError
        if type(mtime) not in (int, float) or not math.isfinite(mtime):
            raise TypeError
        return FsEntry(name=_text(d["name"]), path=_text(d["path"]), type=d["type"], size=size, mode=mode,
                       permissions=_text(d["permissions"], 16), owner=_text(d["owner"], 256),
                       group=_text(d["group"], 256), modified_time=timestamp(mtime),
                       symlink_target=None if target is None else _text(target))
    except (KeyError, TypeError, ValueError, OverflowError, OSError):
        raise ApiError(Code.AGENT_ERROR, "a malformed file entry from the sandbox's agent") from None


def _fs_event(line: str) -> FsEvent | None:
    """One line of a watch: an event, or None for the agent's keep-alive."""
    try:
        ev = json.loads(line)
        if ev["t"] == protocol.EVENT_PING:
            return None
        if ev["t"] == protocol.EVENT_FS and ev["type"] in _EVENT_TYPES:
            return FsEvent(name=_text(ev["name"]), type=ev["type"])
    except (ValueError, KeyError, TypeError):
        pass
    raise AgentProtocolError("the agent sent a malformed watch event")


def _fs_user(user: str | None) -> dict[str, str]:
    """The agent acts as the box user unless told "root"."""
    if user not in (None, "user", "root"):
        raise ApiError(Code.INVALID_REQUEST, f"user is 'user' or 'root', not {user!r}")
    return {"user": "root"} if user == "root" else {}


@dataclass
class FsWatch:
    """A directory's changes as they happen, until closed (or the directory goes). `events` is
    the stream of FsEvents; `ticks` the same with None for the agent's keep-alives (every 10 s of
    quiet), for relays that keep their own connection alive. Read one of them."""

    response: httpx.Response
    ticks: AsyncGenerator[FsEvent | None, None]
    events: AsyncGenerator[FsEvent, None]

    async def aclose(self) -> None:
        """End the agent's stream; safe while another task is reading `events` (it ends too)."""
        try:
            await self.response.aclose()
        finally:
            for gen in (self.events, self.ticks):
                with contextlib.suppress(RuntimeError):  # being read elsewhere: it ends with the stream
                    await gen.aclose()


async def _without_ticks(ticks: AsyncGenerator[FsEvent | None, None]) -> AsyncGenerator[FsEvent, None]:
    async for ev in ticks:
        if ev is not None:
            yield ev


@dataclass
class ProcessStream:
    """A spawned process' events, from its buffered output on. `aclose` lets the agent's stream go
    whether or not anything was read."""

    events: AsyncGenerator[dict[str, Any], None]
    response: httpx.Response

    async def aclose(self) -> None:
        await self.events.aclose()
        await self.response.aclose()


@dataclass
class CommandStream:
    """A started command: its pid, then its events until it exits."""

    pid: int
    events: AsyncGenerator[dict[str, Any], None]


class DataPlane:
    def __init__(self, sandboxes: Sandboxes, max_file_bytes: int) -> None:
        self.sandboxes = sandboxes
        self.max_file_bytes = max_file_bytes

    async def _open(self, rec: SandboxRecord, method: str, route: str, **kwargs: Any) -> httpx.Response:
        for _ in range(2):  # a pause may take the channel between finding the box and using it
            box = await self.sandboxes.running_box(rec)
            try:
                request = box.agent.build_request(method, route, **kwargs)
                resp = await box.agent.send(request, stream=True)
                break
            except ChannelError:
                continue
            except httpx.TransportError:
                raise await self.sandboxes.box_unreachable(rec) from None
        else:
            raise ApiError(Code.SANDBOX_PAUSED, f"sandbox {rec.id} was paused while the call ran; call again")
        if resp.status_code != 200:
            err = await _agent_error(resp)
            await resp.aclose()
            raise err
        return resp

    # --- commands -------------------------------------------------------------------------------

    def _context(self, rec: SandboxRecord, req: RunCommand | SpawnCommand) -> dict[str, Any]:
        """What every command in the box starts with (the template's env, workdir and user, the
        sandbox's env and its secrets' stand-ins), then the call's own."""
        defaults = self.sandboxes.defaults(rec)
        cwd = req.cwd or defaults.cwd
        if cwd is not None:
            check_path(cwd)
        return {"cmd": req.command, "cwd": cwd, "env": {**defaults.env, **(req.env or {})},
                "user": req.user or defaults.user}

    async def _ask(self, rec: SandboxRecord, method: str, route: str, timeout: httpx.Timeout = EXEC_TIMEOUT,
                   limit: int = MAX_REPLY_BYTES, **kwargs: Any) -> Any:
        """A request to the agent with a small JSON answer (an object)."""
        resp = await self._open(rec, method, route, timeout=timeout, **kwargs)
        try:
            answer = json.loads(await read_capped(resp, limit))
            if not isinstance(answer, dict):
                raise AgentProtocolError("the agent's answer is not an object")
        except (ValueError, AgentProtocolError, httpx.TransportError) as e:
            raise ApiError(Code.AGENT_ERROR, f"a malformed answer from the sandbox's agent: {e}") from None
        finally:
            await resp.aclose()
        return answer

    async def start_command(self, rec: SandboxRecord, req: RunCommand) -> CommandStream:
        body = {**self._context(rec, req), "timeout": req.timeout_seconds}
        started = time.perf_counter()
        resp = await self._open(rec, "POST", protocol.EXEC, json=body, timeout=EXEC_TIMEOUT)
        lines = event_lines(resp)
        try:
            first = parse_event(await anext(lines))
            if first["t"] not in (protocol.EVENT_START, protocol.EVENT_ERROR):
                raise AgentProtocolError("the agent did not start with a start event")
        except (StopAsyncIteration, httpx.TransportError):
            await resp.aclose()
            raise await self.sandboxes.box_unreachable(rec) from None
        except AgentProtocolError as e:
            await resp.aclose()
            raise ApiError(Code.AGENT_ERROR, str(e)) from None
        if first["t"] == protocol.EVENT_ERROR:
            await resp.aclose()
            if first["code"] == protocol.ERR_BAD_CWD:
                raise ApiError(Code.INVALID_CWD, first["message"][:2000])
            # 503: e.g. the box is out of pids. The code is the agent's word: never a new metrics label
            raise ApiError(Code.COMMAND_START_FAILED, first["message"][:2000])
        return CommandStream(first["pid"], self._events(resp, lines, started))

    async def _events(self, resp: httpx.Response, lines: AsyncIterator[str], started: float,
                      timed: bool = True) -> AsyncGenerator[dict[str, Any], None]:
        try:
            async for line in lines:
                if line:
                    ev = parse_event(line)
                    if ev["t"] == protocol.EVENT_EXIT and timed:
                        self.sandboxes.metrics.command_seconds.observe(time.perf_counter() - started)
                    yield ev
        except (httpx.TransportError, AgentProtocolError):
            pass  # the stream ends without an exit event: the caller finds out why
        finally:
            await resp.aclose()  # if the client went away, the command runs on in the box

    async def run_to_end(self, stream: CommandStream, rec: SandboxRecord) -> CommandResult:
        out: list[str] = []
        err: list[str] = []
        size = 0
        async for ev in stream.events:
            if ev["t"] in (protocol.EVENT_STDOUT, protocol.EVENT_STDERR):
                (out if ev["t"] == protocol.EVENT_STDOUT else err).append(ev["d"])
                size += len(ev["d"])
                if size > MAX_COLLECTED_OUTPUT:
                    await stream.events.aclose()
                    raise ApiError(Code.OUTPUT_TOO_LARGE, f"the command printed more than {MAX_COLLECTED_OUTPUT} "
                                   "characters: ask for a stream (Accept: text/event-stream); it runs on in the box")
            elif ev["t"] == protocol.EVENT_EXIT:
                return CommandResult(stdout="".join(out), stderr="".join(err), exit_code=ev["code"],
                                     timed_out=ev["timed_out"])
        raise await self.sandboxes.box_unreachable(rec)

    # --- spawned processes ----------------------------------------------------------------------

    async def spawn(self, rec: SandboxRecord, req: SpawnCommand) -> ProcessInfo:
        body = {**self._context(rec, req), "pty": req.pty.model_dump() if req.pty else None}
        return _process_info(await self._ask(rec, "POST", protocol.PROCS, json=body))

    async def list_processes(self, rec: SandboxRecord) -> list[ProcessInfo]:
        answer = await self._ask(rec, "GET", protocol.PROCS)
        procs = answer.get("procs")
        if not isinstance(procs, list):
            raise ApiError(Code.AGENT_ERROR, "a malformed process list from the sandbox's agent")
        return [_process_info(d) for d in procs[:1000]]

    async def process_call(self, rec: SandboxRecord, pid: int, action: str, **kwargs: Any) -> dict[str, Any]:
        """stdin, stdin-close, signal or resize, on one spawned process."""
        answer: dict[str, Any] = await self._ask(rec, "POST", f"{protocol.PROCS}/{pid}/{action}", **kwargs)
        return answer

    async def follow_process(self, rec: SandboxRecord, pid: int, after: int | None = None) -> ProcessStream:
        """A process' buffered output (past sequence number `after`, if given), then its live
        output, to its exit. Opens the stream before returning, so a missing process is an
        ApiError here."""
        params = {"after": str(after)} if after is not None else None
        resp = await self._open(rec, "GET", f"{protocol.PROCS}/{pid}/{protocol.PROC_EVENTS}", timeout=EXEC_TIMEOUT,
                                params=params)
        return ProcessStream(self._events(resp, event_lines(resp), time.perf_counter(), timed=False), resp)

    # --- files ----------------------------------------------------------------------------------

    async def write_file(self, rec: SandboxRecord, path: str, body: AsyncIterator[bytes],
                         user: str | None) -> dict[str, Any]:
        check_path(path)
        limit = self.max_file_bytes

        async def capped() -> AsyncIterator[bytes]:
            seen = 0
            async for chunk in body:
                seen += len(chunk)
                if seen > limit:
                    raise ApiError(Code.PAYLOAD_TOO_LARGE, f"files are limited to {limit} bytes")
                yield chunk

        params = {"path": path, **({"user": user} if user else {})}
        result = await self._ask(rec, "PUT", protocol.FILES, FILE_TIMEOUT, params=params, content=capped())
        if type(result.get("size")) is not int:
            raise ApiError(Code.AGENT_ERROR, "a malformed answer to a file write")
        return {"path": path, "size": result["size"]}

    async def read_file(self, rec: SandboxRecord, path: str) -> tuple[httpx.Response, AsyncIterator[bytes]]:
        return await self._download(rec, protocol.FILES, path)

    async def zip_dir(self, rec: SandboxRecord, path: str) -> tuple[httpx.Response, AsyncIterator[bytes]]:
        return await self._download(rec, protocol.DIR_ZIP, path)

    async def _download(self, rec: SandboxRecord, route: str,
                        path: str) -> tuple[httpx.Response, AsyncIterator[bytes]]:
        check_path(path)
        resp = await self._open(rec, "GET", route, params={"path": path}, timeout=FILE_TIMEOUT)

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.aiter_raw():
                    yield chunk
            finally:
                await resp.aclose()

        return resp, body()

    # --- filesystem operations (the agent acts as the box user, or as root) ----------------------

    async def stat(self, rec: SandboxRecord, path: str, user: str | None = None) -> FsEntry:
        """The entry at `path`; a link is described, not followed."""
        params = {"path": check_path(path), **_fs_user(user)}
        return _entry(await self._ask(rec, "GET", protocol.FS_STAT, params=params))

    async def list_dir(self, rec: SandboxRecord, path: str, depth: int = 1, user: str | None = None) -> list[FsEntry]:
        """What is under the directory `path`, `depth` levels down (links listed, not followed)."""
        if type(depth) is not int or not 1 <= depth <= MAX_DEPTH:
            raise ApiError(Code.INVALID_REQUEST, f"depth is 1-{MAX_DEPTH}, not {depth!r}")
        params = {"path": check_path(path), "depth": str(depth), **_fs_user(user)}
        answer = await self._ask(rec, "GET", protocol.FS_LIST, FILE_TIMEOUT, MAX_LIST_REPLY, params=params)
        entries = answer.get("entries")
        if not isinstance(entries, list) or len(entries) > 10_000:
            raise ApiError(Code.AGENT_ERROR, "a malformed listing from the sandbox's agent")
        return [_entry(d) for d in entries]

    async def make_dir(self, rec: SandboxRecord, path: str, user: str | None = None) -> tuple[FsEntry, bool]:
        """mkdir -p, new directories owned by the acting user; False if it was a directory already
        (409 already_exists if something else is there)."""
        body = {"path": check_path(path), **_fs_user(user)}
        answer = await self._ask(rec, "POST", protocol.FS_MKDIR, json=body)
        if not isinstance(answer.get("created"), bool):
            raise ApiError(Code.AGENT_ERROR, "a malformed answer to a mkdir")
        return _entry(answer.get("entry")), answer["created"]

    async def move(self, rec: SandboxRecord, source: str, destination: str, user: str | None = None) -> FsEntry:
        """Rename (within the box's filesystem); the destination's parent must exist. Answers the
        destination's entry."""
        body = {"source": check_path(source), "destination": check_path(destination), **_fs_user(user)}
        return _entry(await self._ask(rec, "POST", protocol.FS_MOVE, json=body))

    async def remove(self, rec: SandboxRecord, path: str, user: str | None = None) -> None:
        """A file or link (not its target), or a directory with everything in it."""
        body = {"path": check_path(path), **_fs_user(user)}
        await self._ask(rec, "POST", protocol.FS_REMOVE, FILE_TIMEOUT, json=body)

    async def watch(self, rec: SandboxRecord, path: str, recursive: bool = False) -> FsWatch:
        """Watch a directory (as root, through root's links only). Opened before returning: a
        missing directory is an ApiError here."""
        params = {"path": check_path(path), "recursive": "true" if recursive else "false"}
        resp = await self._open(rec, "GET", protocol.FS_WATCH, params=params, timeout=EXEC_TIMEOUT)
        ticks = self._watch_events(resp)
        return FsWatch(resp, ticks, _without_ticks(ticks))

    async def _watch_events(self, resp: httpx.Response) -> AsyncGenerator[FsEvent | None, None]:
        try:
            async for line in event_lines(resp):
                if line:
                    yield _fs_event(line)
        except (httpx.TransportError, httpx.StreamError, AgentProtocolError):
            pass  # the box went, or was paused, or the watch was closed: it ends
        finally:
            await resp.aclose()
