"""The data plane's work: relaying commands and files between a client and a box's agent.

What belongs to the control plane is here: finding the box (resuming it first), what a command
starts with (the template's and the sandbox's env, workdir and user), the caps on what a client
sends, metrics and the answer models. The rest is the box's agent (`hutch.node.api.BoxAgent`),
which checks everything the agent sends before it gets here. Bodies stream through in both
directions; nothing here holds a whole file or a command's whole output in memory.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from hutch.errors import ApiError, Code
from hutch.node.api import (
    AgentProtocolError,
    AgentUnreachable,
    BoxAgent,
    ChannelError,
    Command,
    Download,
    Entry,
    Event,
    Exited,
    FsChange,
    Output,
    Ping,
    ProcessDesc,
    Started,
    StartFailed,
    Stream,
)
from hutch.node.box import path_problem
from hutch.services.models import CommandResult, FsEntry, FsEvent, LinkEnd, ProcessInfo, RunCommand, SpawnCommand, timestamp
from hutch.services.sandboxes import Sandboxes
from hutch.services.uploads import capped_body
from hutch.store import SandboxRecord

T = TypeVar("T")

MAX_COLLECTED_OUTPUT = 64 * 2**20  # a command's output gathered into one JSON answer
MAX_DEPTH = 16


def check_path(path: str) -> str:
    problem = path_problem(path)
    if problem:
        raise ApiError(Code.INVALID_PATH, f"{problem}: {path!r}")
    return path


def _as_root(user: str | None) -> bool:
    """The agent acts as the box user unless told "root"."""
    if user not in (None, "user", "root"):
        raise ApiError(Code.INVALID_REQUEST, f"user is 'user' or 'root', not {user!r}")
    return user == "root"


def _process_info(d: ProcessDesc) -> ProcessInfo:
    return ProcessInfo(pid=d["pid"], command=d["command"], user=d["user"], pty=d["pty"],
                       started_at=timestamp(d["started_at"]))


def entry_model(e: Entry) -> FsEntry:
    return FsEntry(name=e["name"], path=e["path"], type=e["type"], size=e["size"], mode=e["mode"],
                   permissions=e["permissions"], owner=e["owner"], group=e["group"],
                   modified_time=timestamp(e["mtime"]), symlink_target=e.get("target"),
                   link=LinkEnd(**link) if (link := e.get("link")) else None, metadata=e.get("metadata"))


@dataclass(frozen=True)
class FileHead:
    """What is known of a download before its bytes: its size, if the agent said it."""

    size: int | None



@dataclass
class FsWatch:
    """A directory's changes as they happen, until closed (or the directory goes). `events` is
    the stream of FsEvents; `ticks` the same with None for the agent's keep-alives (every 10 s of
    quiet), for relays that keep their own connection alive. Read one of them."""

    stream: Stream[FsChange | Ping]
    ticks: AsyncGenerator[FsEvent | None, None]
    events: AsyncGenerator[FsEvent, None]

    async def aclose(self) -> None:
        """End the agent's stream; safe while another task is reading `events` (it ends too)."""
        try:
            await self.stream.aclose()
        finally:
            for gen in (self.events, self.ticks):
                with contextlib.suppress(RuntimeError):  # being read elsewhere: it ends with the stream
                    await gen.aclose()


async def _fs_events(stream: Stream[FsChange | Ping]) -> AsyncGenerator[FsEvent | None, None]:
    try:
        async for change in stream:
            if isinstance(change, Ping):
                yield None  # a tick: relays keep their own connection alive on it
                continue
            entry = change.entry
            yield FsEvent(name=change.name, type=change.type, entry=entry_model(entry) if entry else None)
    except (AgentUnreachable, AgentProtocolError):
        pass  # the box went, or was paused, or the watch was closed: it ends
    finally:
        await stream.aclose()


async def _without_ticks(ticks: AsyncGenerator[FsEvent | None, None]) -> AsyncGenerator[FsEvent, None]:
    async for ev in ticks:
        if ev is not None:
            yield ev


@dataclass
class ProcessStream:
    """A spawned process' events, from its buffered output on. `aclose` lets the agent's stream go
    whether or not anything was read."""

    events: AsyncGenerator[Event, None]
    stream: Stream[Event]

    async def aclose(self) -> None:
        try:
            await self.events.aclose()
        finally:
            await self.stream.aclose()


@dataclass
class CommandStream:
    """A started command: its pid, then its events until it exits."""

    pid: int
    events: AsyncGenerator[Event, None]


class DataPlane:
    def __init__(self, sandboxes: Sandboxes, max_file_bytes: int) -> None:
        self.sandboxes = sandboxes
        self.max_file_bytes = max_file_bytes

    async def _call(self, rec: SandboxRecord, call: Callable[[BoxAgent], Awaitable[T]]) -> T:
        """`call` on the box's agent, the box resumed first if it is paused."""
        for _ in range(2):  # a pause may take the channel between finding the box and using it
            try:
                return await call(await self.sandboxes.running_box(rec))
            except ChannelError:
                continue
            except AgentUnreachable:
                raise await self.sandboxes.box_unreachable(rec) from None
        raise ApiError(Code.SANDBOX_PAUSED, f"sandbox {rec.id} was paused while the call ran; call again")

    # --- commands -------------------------------------------------------------------------------

    def _command(self, rec: SandboxRecord, req: RunCommand | SpawnCommand) -> Command:
        """What every command in the box starts with (the template's env, workdir and user, the
        sandbox's env and its secrets' stand-ins), then the call's own."""
        defaults = self.sandboxes.defaults(rec)
        cwd = req.cwd or defaults.cwd
        if cwd is not None:
            check_path(cwd)
        return Command(req.command, cwd, {**defaults.env, **(req.env or {})}, req.user or defaults.user)

    async def start_command(self, rec: SandboxRecord, req: RunCommand) -> CommandStream:
        command = self._command(rec, req)
        started = time.perf_counter()
        stream = await self._call(rec, lambda agent: agent.exec(command, req.timeout_seconds))
        events = aiter(stream)
        try:
            first = await anext(events)
        except (StopAsyncIteration, AgentUnreachable):
            await stream.aclose()
            raise await self.sandboxes.box_unreachable(rec) from None
        except BaseException:
            await stream.aclose()
            raise
        match first:
            case Started(pid):
                return CommandStream(pid, self._events(stream, events, started))
            case StartFailed(message=message) if first.bad_cwd:
                await stream.aclose()
                raise ApiError(Code.INVALID_CWD, message[:2000])
            case StartFailed(message=message):
                await stream.aclose()
                # 503: e.g. the box is out of pids. The code is the agent's word: never a new metrics label
                raise ApiError(Code.COMMAND_START_FAILED, message[:2000])
        await stream.aclose()
        raise AgentProtocolError("the agent did not start with a start event")

    async def _events(self, stream: Stream[Event], events: AsyncIterator[Event], started: float,
                      timed: bool = True) -> AsyncGenerator[Event, None]:
        try:
            async for ev in events:
                if isinstance(ev, Exited) and timed:
                    self.sandboxes.metrics.command_seconds.observe(time.perf_counter() - started)
                yield ev
        except (AgentUnreachable, AgentProtocolError):
            pass  # the stream ends without an exit event: the caller finds out why
        finally:
            await stream.aclose()  # if the client went away, the command runs on in the box

    async def run_to_end(self, stream: CommandStream, rec: SandboxRecord) -> CommandResult:
        out: list[str] = []
        err: list[str] = []
        size = 0
        async for ev in stream.events:
            match ev:
                case Output(stream=which, data=data):
                    (out if which == "stdout" else err).append(data)
                    size += len(data)
                    if size > MAX_COLLECTED_OUTPUT:
                        await stream.events.aclose()
                        raise ApiError(Code.OUTPUT_TOO_LARGE, f"the command printed more than {MAX_COLLECTED_OUTPUT} "
                                       "characters: ask for a stream (Accept: text/event-stream); it runs on in the box")
                case Exited(code, timed_out):
                    return CommandResult(stdout="".join(out), stderr="".join(err), exit_code=code,
                                         timed_out=timed_out)
        raise await self.sandboxes.box_unreachable(rec)

    # --- spawned processes ----------------------------------------------------------------------

    async def spawn(self, rec: SandboxRecord, req: SpawnCommand) -> ProcessInfo:
        command = self._command(rec, req)
        pty = (req.pty.rows, req.pty.cols) if req.pty else None
        try:
            return _process_info(await self._call(rec, lambda agent: agent.spawn(command, pty)))
        except ApiError as e:
            if e.code == Code.IO_ERROR:  # it could not start (out of pids, say), as commands.run says it
                raise ApiError(Code.COMMAND_START_FAILED, e.message) from None
            raise

    async def list_processes(self, rec: SandboxRecord) -> list[ProcessInfo]:
        return [_process_info(d) for d in await self._call(rec, lambda agent: agent.processes())]

    async def signal_process(self, rec: SandboxRecord, pid: int, signal: int) -> bool:
        """Signal a spawned process' group; False if it had already ended."""
        return await self._call(rec, lambda agent: agent.signal(pid, signal))

    async def write_stdin(self, rec: SandboxRecord, pid: int, data: bytes) -> None:
        await self._call(rec, lambda agent: agent.write_stdin(pid, data))

    async def close_stdin(self, rec: SandboxRecord, pid: int) -> None:
        await self._call(rec, lambda agent: agent.close_stdin(pid))

    async def resize_pty(self, rec: SandboxRecord, pid: int, rows: int, cols: int) -> None:
        await self._call(rec, lambda agent: agent.resize(pid, rows, cols))

    async def follow_process(self, rec: SandboxRecord, pid: int, after: int | None = None) -> ProcessStream:
        """A process' buffered output (past sequence number `after`, if given), then its live
        output, to its exit. Opens the stream before returning, so a missing process is an
        ApiError here."""
        stream = await self._call(rec, lambda agent: agent.follow(pid, after))
        return ProcessStream(self._events(stream, aiter(stream), time.perf_counter(), timed=False), stream)

    # --- files ----------------------------------------------------------------------------------

    async def write_file(self, rec: SandboxRecord, path: str, body: AsyncIterator[bytes],
                         user: str | None, metadata: dict[str, str] | None = None, *,
                         length: int | None = None) -> dict[str, Any]:
        """Write a file (replaced whole once all is written), with E2B's metadata if given.
        `length`: the body's, if the client declared it (the box reads a sized body at twice the
        rate of a chunked one)."""
        check_path(path)
        capped = capped_body(body, self.max_file_bytes, length)
        root = _as_root(user)
        size = await self._call(rec, lambda agent: agent.write_file(path, capped, root, metadata, length))
        return {"path": path, "size": size}

    async def read_file(self, rec: SandboxRecord, path: str,
                        user: str | None = None) -> tuple[FileHead, AsyncIterator[bytes]]:
        """A file's bytes, read as the box user (with its rights) unless user is "root"."""
        return await self._download(rec, path, user, lambda agent, root: agent.read_file(path, root))

    async def zip_dir(self, rec: SandboxRecord, path: str,
                      user: str | None = None) -> tuple[FileHead, AsyncIterator[bytes]]:
        """A directory as a zip, as the box user sees it unless user is "root"."""
        return await self._download(rec, path, user, lambda agent, root: agent.zip_dir(path, root))

    async def _download(self, rec: SandboxRecord, path: str, user: str | None,
                        fetch: Callable[[BoxAgent, bool], Awaitable[Download]]) -> tuple[FileHead, AsyncIterator[bytes]]:
        check_path(path)
        root = _as_root(user)
        download = await self._call(rec, lambda agent: fetch(agent, root))
        return FileHead(download.size), aiter(download)

    # --- filesystem operations (the agent acts as the box user, or as root) ----------------------

    async def stat(self, rec: SandboxRecord, path: str, user: str | None = None) -> FsEntry:
        """The entry at `path`; a link is described, not followed."""
        check_path(path)
        root = _as_root(user)
        return entry_model(await self._call(rec, lambda agent: agent.stat(path, root)))

    async def list_dir(self, rec: SandboxRecord, path: str, depth: int = 1, user: str | None = None) -> list[FsEntry]:
        """What is under the directory `path`, `depth` levels down (links listed, not followed)."""
        if type(depth) is not int or not 1 <= depth <= MAX_DEPTH:
            raise ApiError(Code.INVALID_REQUEST, f"depth is 1-{MAX_DEPTH}, not {depth!r}")
        check_path(path)
        root = _as_root(user)
        return [entry_model(e) for e in await self._call(rec, lambda agent: agent.list_dir(path, depth, root))]

    async def make_dir(self, rec: SandboxRecord, path: str, user: str | None = None) -> tuple[FsEntry, bool]:
        """mkdir -p, new directories owned by the acting user; False if it was a directory already
        (409 already_exists if something else is there)."""
        check_path(path)
        root = _as_root(user)
        entry, created = await self._call(rec, lambda agent: agent.make_dir(path, root))
        return entry_model(entry), created

    async def move(self, rec: SandboxRecord, source: str, destination: str, user: str | None = None) -> FsEntry:
        """Rename (within the box's filesystem); the destination's parent must exist. Answers the
        destination's entry."""
        check_path(source)
        check_path(destination)
        root = _as_root(user)
        return entry_model(await self._call(rec, lambda agent: agent.move(source, destination, root)))

    async def remove(self, rec: SandboxRecord, path: str, user: str | None = None) -> None:
        """A file or link (not its target), or a directory with everything in it."""
        check_path(path)
        root = _as_root(user)
        await self._call(rec, lambda agent: agent.remove(path, root))

    async def watch(self, rec: SandboxRecord, path: str, recursive: bool = False, entries: bool = False) -> FsWatch:
        """Watch a directory (as root, through root's links only). Opened before returning: a
        missing directory is an ApiError here. With `entries`, a create, write or chmod carries
        the entry (stat as root, in the box, when the event is read)."""
        check_path(path)
        stream = await self._call(rec, lambda agent: agent.watch(path, recursive, entries))
        ticks = _fs_events(stream)
        return FsWatch(stream, ticks, _without_ticks(ticks))
