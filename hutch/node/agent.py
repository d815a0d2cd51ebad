"""The one client of a box's guest agent: a method per agent route, over the box's channel socket.

Nothing else opens the channel. Everything the agent sends is hostile input (root in a box can put
its own agent on the socket): every reply is read with a cap, streams are split into lines in
linear time with a cap per line, JSON too deep to parse is a malformed reply, and every field is
checked before it leaves this module. The agent's error answers become `ApiError`s here, under the
catalogue's code when it is one the agent may give, else `agent_error`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import socket
import stat
import struct
import typing
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import httpx

from hutch.errors import ApiError, Code
from hutch.guest import protocol
from hutch.node.api import (
    AgentProtocolError,
    AgentUnreachable,
    ChangeType,
    ChannelError,
    Command,
    Dropped,
    Entry,
    EntryType,
    Event,
    Exited,
    FsChange,
    LinkEnd,
    Output,
    Ping,
    ProcessDesc,
    Started,
    StartFailed,
    Tunnel,
)
from hutch.node.uds_transport import UnixTransport

T = TypeVar("T")

# The agent pings every 10 s while a command runs: three missed pings mean the box is gone.
EXEC_TIMEOUT = httpx.Timeout(connect=5.0, read=35.0, write=35.0, pool=10.0)
FILE_TIMEOUT = httpx.Timeout(connect=5.0, read=120.0, write=120.0, pool=10.0)
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
TUNNEL_TIMEOUT = 10.0

MAX_EVENT_BYTES = 8 * 2**20  # one event line (the agent sends at most 256 KiB of output in one)
MAX_REPLY_BYTES = 64 * 2**10  # an error body or a small JSON answer
# A reply's body, once its head is in, arrives whole within this (httpx bounds each read, not the
# sum: an agent root replaced could trickle a byte a second for days).
REPLY_DEADLINE = 60.0
END_DEADLINE = 1.0  # for an event stream's end, which the agent sends with its exit event
MAX_LIST_REPLY = 16 * 2**20  # the agent stops a listing at 10,000 entries or 8 MiB of them
MAX_LIST_ENTRIES = 10_000
MAX_PROCESSES = 1000
MAX_TUNNEL_ERROR = 4096
MAX_MESSAGE = 2000  # of an agent's error message, passed on
MAX_TEXT = 8192  # a name or path in an entry

# what datetime.fromtimestamp takes (years 1 to 9999)
MIN_TIME, MAX_TIME = -62_135_596_800, 253_402_300_798


# Each of the agent's codes (protocol.ERR_*) and the catalogue's code it is passed on as, under the
# catalogue's status; any other code the agent sends is an agent_error. Most are the catalogue's own;
# the two that are not answer clients as an agent before them did (invalid_request, 400).
# tests/unit/test_catalogue.py keeps this to the protocol's list.
AGENT_CODES: dict[str, Code] = {
    protocol.ERR_BAD_PATH: Code.INVALID_PATH,
    protocol.ERR_NOT_FOUND: Code.FILE_NOT_FOUND,
    protocol.ERR_IS_DIR: Code.IS_A_DIRECTORY,
    protocol.ERR_NOT_DIR: Code.NOT_A_DIRECTORY,
    protocol.ERR_NOT_REGULAR: Code.NOT_A_REGULAR_FILE,
    protocol.ERR_UNSAFE_PATH: Code.UNSAFE_PATH,
    protocol.ERR_BAD_REQUEST: Code.INVALID_REQUEST,
    protocol.ERR_NO_ROUTE: Code.INVALID_REQUEST,
    protocol.ERR_BODY_TOO_LARGE: Code.INVALID_REQUEST,
    protocol.ERR_BAD_CWD: Code.INVALID_CWD,
    protocol.ERR_START_FAILED: Code.COMMAND_START_FAILED,
    protocol.ERR_IO: Code.IO_ERROR,
    protocol.ERR_NO_PROCESS: Code.PROCESS_NOT_FOUND,
    protocol.ERR_NOT_TTY: Code.NOT_A_TERMINAL,
    protocol.ERR_STDIN_CLOSED: Code.STDIN_CLOSED,
    protocol.ERR_STDIN_FULL: Code.STDIN_FULL,
    protocol.ERR_TOO_MANY_PROCS: Code.TOO_MANY_PROCESSES,
    protocol.ERR_PORT_CLOSED: Code.PORT_NOT_LISTENING,
    protocol.ERR_PERMISSION: Code.PERMISSION_DENIED,
    protocol.ERR_EXISTS: Code.ALREADY_EXISTS,
    protocol.ERR_TOO_MANY_ENTRIES: Code.TOO_MANY_ENTRIES,
    protocol.ERR_AGENT: Code.AGENT_ERROR,
}

_ENTRY_TYPES = typing.get_args(EntryType)  # what an entry may be, named once (hutch.node.api)
MAX_METADATA_KEYS, MAX_METADATA_BYTES = 512, 4096  # the agent's bound on what it reads back
_CHANGE_TYPES = typing.get_args(ChangeType)
# the agent's output events, by the stream each names on the seam
_OUTPUT_STREAMS: dict[str, Literal["stdout", "stderr"]] = {protocol.EVENT_STDOUT: "stdout",
                                                          protocol.EVENT_STDERR: "stderr"}
_USERS = (protocol.BOX_USER, "root")


# --- reading what the agent sends (no I/O: each takes bytes, or an iterator of them) --------------

async def read_capped(chunks: AsyncIterator[bytes], limit: int = MAX_REPLY_BYTES) -> bytes:
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise AgentProtocolError("the agent's answer is too long")
    return bytes(body)


async def lines(chunks: AsyncIterator[bytes], limit: int = MAX_EVENT_BYTES) -> AsyncIterator[bytes]:
    """The lines of a stream, none longer than `limit`. Each byte is looked at once, however the
    stream is cut (a buffer split anew at each chunk is quadratic on 1-byte chunks)."""
    pending = bytearray()
    async for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            if pending:
                pending += chunk[start:end]
                line = bytes(pending)
                pending.clear()
            else:
                line = chunk[start:end]
            if len(line) > limit:
                raise AgentProtocolError("an event line from the agent is too long")
            yield line
            start = end + 1
        pending += chunk[start:]
        if len(pending) > limit:
            raise AgentProtocolError("an event line from the agent is too long")
    if pending:
        yield bytes(pending)


def loads(data: bytes) -> Any:
    """JSON from the agent; malformed or too deeply nested to parse is a protocol error."""
    try:
        return json.loads(data.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        raise AgentProtocolError("the agent sent malformed JSON") from None


def parse_event(line: bytes) -> Event:
    """One exec or process event as its type (hutch.node.api), checked: its kind is known and its
    fields have their types. The one place the agent's names for events are read."""
    ev = loads(line)
    try:
        kind, seq = ev["t"], ev.get("s")
        if "s" in ev and type(seq) is not int:
            pass  # malformed
        elif kind in _OUTPUT_STREAMS and isinstance(ev["d"], str):
            return Output(_OUTPUT_STREAMS[kind], ev["d"], seq)
        elif kind == protocol.EVENT_EXIT and (ev["code"] is None or type(ev["code"]) is int) \
                and isinstance(ev["timed_out"], bool):
            return Exited(ev["code"], ev["timed_out"], seq)
        elif kind == protocol.EVENT_START and type(ev["pid"]) is int:
            return Started(ev["pid"])
        elif kind == protocol.EVENT_ERROR and isinstance(ev["code"], str) and isinstance(ev["message"], str):
            return StartFailed(ev["code"], ev["message"])
        elif kind == protocol.EVENT_DROPPED and type(ev["chars"]) is int:
            return Dropped(ev["chars"])
        elif kind == protocol.EVENT_PING:
            return Ping()
    except (KeyError, TypeError):
        pass
    raise AgentProtocolError("the agent sent a malformed event")


def parse_change(line: bytes) -> FsChange | Ping:
    """One line of a watch: a change, or the agent's keep-alive."""
    ev = loads(line)
    try:
        if ev["t"] == protocol.EVENT_PING:
            return Ping()
        if ev["t"] == protocol.EVENT_FS and ev["type"] in _CHANGE_TYPES:
            entry = ev.get("entry")
            return FsChange(_text(ev["name"]), ev["type"], None if entry is None else check_entry(entry))
    except (KeyError, TypeError):
        pass
    raise AgentProtocolError("the agent sent a malformed watch event")


def _text(value: Any, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise TypeError
    return value


def _time(value: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or not MIN_TIME <= value <= MAX_TIME:
        raise TypeError
    return float(value)


def check_entry(d: Any) -> Entry:
    """An entry from the agent, checked field by field."""
    try:
        if not isinstance(d, dict) or d["type"] not in _ENTRY_TYPES:
            raise TypeError
        size, mode, target = d["size"], d["mode"], d.get("target")
        if type(size) is not int or size < 0 or type(mode) is not int or not 0 <= mode <= 0o7777:
            raise TypeError
        entry = Entry(name=_text(d["name"]), path=_text(d["path"]), type=d["type"], size=size, mode=mode,
                      permissions=_text(d["permissions"], 16), owner=_text(d["owner"], 256),
                      group=_text(d["group"], 256), mtime=_time(d["mtime"]),
                      target=None if target is None else _text(target), link=_link(d.get("link")))
        if (metadata := _metadata(d.get("metadata"))) is not None:
            entry["metadata"] = metadata
        return entry
    except (KeyError, TypeError):
        raise AgentProtocolError("a malformed file entry from the sandbox's agent") from None


def _link(d: Any) -> LinkEnd | None:
    if d is None:
        return None
    if not isinstance(d, dict) or d["type"] not in _ENTRY_TYPES or type(d["mode"]) is not int \
            or not 0 <= d["mode"] <= 0o7777:
        raise TypeError
    return LinkEnd(path=_text(d["path"]), type=d["type"], mode=d["mode"])


def _metadata(d: Any) -> dict[str, str] | None:
    if d is None:
        return None
    if not isinstance(d, dict) or len(d) > MAX_METADATA_KEYS:
        raise TypeError
    return {_text(k, 255): _text(v, MAX_METADATA_BYTES) for k, v in d.items()}


def check_process(d: Any) -> ProcessDesc:
    """A process description from the agent, checked field by field."""
    try:
        if not isinstance(d, dict) or d["user"] not in _USERS:
            raise TypeError
        pid, pty, code = d["pid"], d["pty"], d.get("exit_code")
        if type(pid) is not int or not isinstance(pty, bool) or not (code is None or type(code) is int):
            raise TypeError
        return ProcessDesc(pid=pid, command=_text(d["command"], MAX_REPLY_BYTES), user=d["user"], pty=pty,
                           started_at=_time(d["started_at"]), exit_code=code)
    except (KeyError, TypeError):
        raise AgentProtocolError("a malformed process description from the sandbox's agent") from None


def error_of(status: int, body: bytes) -> ApiError:
    """The agent's error answer ({"code", "message"} under a 4xx or 5xx) as an ApiError: its code
    if the agent may give it, else agent_error."""
    try:
        err = json.loads(body.decode("utf-8", "replace"))
        code, message = err["code"], err["message"]
        if not (isinstance(code, str) and isinstance(message, str)) or not 400 <= status < 600:
            raise TypeError
    except (ValueError, RecursionError, KeyError, TypeError):
        return AgentProtocolError(f"the sandbox's agent answered {status or 'nothing'}")
    # the agent's word: only codes it may give, and the status is the catalogue's, not the agent's
    return ApiError(AGENT_CODES.get(code, Code.AGENT_ERROR), message[:MAX_MESSAGE])


def tunnel_head(head: bytes) -> tuple[int, int]:
    """The status and Content-Length of the agent's answer to a tunnel request (0 for either
    that is missing or not a number)."""
    status_line, *fields = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    status = int(parts[1]) if len(parts) >= 2 and parts[1].isascii() and parts[1].isdigit() and len(parts[1]) == 3 else 0
    length = 0
    for line in fields:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            value = value.strip()
            length = int(value) if value.isascii() and value.isdigit() and len(value) < 12 else 0
    return status, length


# --- streams --------------------------------------------------------------------------------------

class AgentStream(Generic[T]):
    """An open stream of the agent's: its items, checked, until it ends. `aclose` is safe while
    another task reads it (that read ends too)."""

    def __init__(self, resp: httpx.Response, items: AsyncGenerator[T, None]) -> None:
        self._resp, self._items = resp, items

    def __aiter__(self) -> AsyncGenerator[T, None]:
        return self._items

    async def aclose(self) -> None:
        try:
            await self._resp.aclose()
        finally:
            try:
                await self._items.aclose()
            except RuntimeError:  # being read elsewhere: it ends with the response
                pass


class AgentDownload(AgentStream[bytes]):
    """A file's or a zip's bytes, as they come."""

    def __init__(self, resp: httpx.Response, items: AsyncGenerator[bytes, None]) -> None:
        super().__init__(resp, items)
        length = resp.headers.get("content-length")
        self._size = int(length) if length is not None and length.isascii() and length.isdigit() else None

    @property
    def size(self) -> int | None:
        return self._size


async def _items(resp: httpx.Response, parse: Callable[[bytes], T]) -> AsyncGenerator[T, None]:
    try:
        async for line in lines(resp.aiter_raw()):
            if line:
                yield parse(line)
    except httpx.TransportError as e:
        raise AgentUnreachable(f"the sandbox's agent stopped answering: {e}") from None
    except httpx.StreamError:
        pass  # closed while it was read: it ends
    finally:
        await resp.aclose()


async def _events(resp: httpx.Response) -> AsyncGenerator[Event, None]:
    """A command's or process' events. The exit is the last: the answer's end, which the agent
    sends with it, is read before the exit is handed on, so the connection goes back to the pool
    for the next call (a new one per command cost the server ~1 ms) and the box's meter sees the
    answer done. An end that does not come within END_DEADLINE, or anything more, and the
    connection is closed instead."""
    items = _items(resp, parse_event)
    try:
        async for ev in items:
            if isinstance(ev, Exited):
                with contextlib.suppress(StopAsyncIteration, TimeoutError, AgentUnreachable, AgentProtocolError):
                    async with asyncio.timeout(END_DEADLINE):
                        await anext(items)
                yield ev
                return
            yield ev
    finally:
        await items.aclose()


async def _chunks(resp: httpx.Response) -> AsyncGenerator[bytes, None]:
    try:
        async for chunk in resp.aiter_raw():
            yield chunk
    except httpx.TransportError as e:
        raise AgentUnreachable(f"the sandbox's agent stopped answering: {e}") from None
    finally:
        await resp.aclose()


# --- the client -----------------------------------------------------------------------------------

def pin(path: Path, channel: Channel | None = None) -> AgentClient | None:
    """A client of the agent's socket at `path`, opened once without following links (the
    channel directory is the box's to write) and talked to through that open file ever after.
    None while the agent has not made it; ChannelError if something other than a socket is there.
    `channel` makes its transport and tunnel dialer for that file (hutch.node.idle's meter)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise ChannelError("the box's channel holds something other than a socket")
        if not _listened_by_another(f"/proc/self/fd/{fd}"):
            os.close(fd)
            return None
    except BaseException:
        os.close(fd)
        raise
    uds = f"/proc/self/fd/{fd}"
    transport, dial = channel(uds) if channel else (None, None)
    return AgentClient(uds, transport, on_close=lambda: os.close(fd), dial=dial)


def _listened_by_another(path: str) -> bool:
    """Whether something listens on the socket at `path`, and it is not this process. The box
    can move the host's own egress socket (it is in the same directory) to the agent's name:
    the host must not take its own listener for the box's agent. A socket the box bound is
    listened on by its gofer. False for a socket nothing listens on (yet) or whose backlog is
    full: a connect here never waits."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC) as probe:
        try:
            probe.connect(path)
        except (ConnectionRefusedError, BlockingIOError):
            return False
        pid, _uid, _gid = struct.unpack("3i", probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    if pid == os.getpid():
        raise ChannelError("the box's channel holds one of the host's own sockets in the agent's place")
    return True


Dial = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
Channel = Callable[[str], tuple[httpx.AsyncBaseTransport, Dial]]  # a socket's path -> how to talk through it


class AgentClient:
    """One box's agent over HTTP/1.1 on its socket: the `hutch.node.api.BoxAgent` of the node.
    `transport` replaces the socket's (tests); `on_close` runs once the client is closed.

    A fleet's API server reaches a box on another host through that node's relay
    (hutch.fleet.relay): `base_url` names the relay's path to the box, `headers` its credential,
    and `dial` opens a tunnel's own connection to it. What comes back is as hostile either way."""

    def __init__(self, socket: str, transport: httpx.AsyncBaseTransport | None = None,
                 on_close: Callable[[], None] | None = None, *, base_url: str = "http://agent",
                 headers: dict[str, str] | None = None, dial: Dial | None = None) -> None:
        self.socket = socket
        self._on_close = on_close
        self._headers = headers or {}
        self._dial = dial or (lambda: asyncio.open_unix_connection(self.socket))
        self._prefix = httpx.URL(base_url).path.rstrip("/")
        self._http: httpx.AsyncClient | None = httpx.AsyncClient(
            transport=transport or UnixTransport(socket),
            base_url=base_url, timeout=DEFAULT_TIMEOUT, headers=self._headers)

    async def aclose(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            try:
                await http.aclose()
            finally:
                if self._on_close is not None:
                    self._on_close()

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            raise ChannelError("the box's channel is closed")
        return self._http

    async def _open(self, method: str, route: str, timeout: httpx.Timeout, **kwargs: Any) -> httpx.Response:
        """The agent's answer to a request, its head read; anything but a 200 raises."""
        http = self._client()
        try:
            resp = await http.send(http.build_request(method, route, timeout=timeout, **kwargs), stream=True)
        except httpx.TransportError as e:
            raise AgentUnreachable(f"the sandbox's agent did not answer: {e}") from None
        if resp.status_code != 200:
            try:
                async with asyncio.timeout(REPLY_DEADLINE):
                    body = await read_capped(resp.aiter_raw())
            except (AgentProtocolError, httpx.TransportError, httpx.StreamError, TimeoutError):
                body = b""
            finally:
                await resp.aclose()
            raise error_of(resp.status_code, body)
        return resp

    async def _ask(self, method: str, route: str, timeout: httpx.Timeout = EXEC_TIMEOUT,
                   limit: int = MAX_REPLY_BYTES, **kwargs: Any) -> dict[str, Any]:
        """A request with a small JSON answer, an object."""
        resp = await self._open(method, route, timeout, **kwargs)
        try:
            async with asyncio.timeout(REPLY_DEADLINE):
                answer = loads(await read_capped(resp.aiter_raw(), limit))
        except (httpx.TransportError, httpx.StreamError) as e:
            raise AgentProtocolError(f"a malformed answer from the sandbox's agent: {e}") from None
        except TimeoutError:
            raise AgentProtocolError("the sandbox's agent did not finish its answer in time") from None
        finally:
            await resp.aclose()
        if not isinstance(answer, dict):
            raise AgentProtocolError("a malformed answer from the sandbox's agent: not an object")
        return answer

    async def _stream(self, parse: Callable[[bytes], T], method: str, route: str, **kwargs: Any) -> AgentStream[T]:
        resp = await self._open(method, route, EXEC_TIMEOUT, **kwargs)
        return AgentStream(resp, _items(resp, parse))

    async def _event_stream(self, method: str, route: str, **kwargs: Any) -> AgentStream[Event]:
        resp = await self._open(method, route, EXEC_TIMEOUT, **kwargs)
        return AgentStream(resp, _events(resp))

    async def _download(self, route: str, path: str, root: bool) -> AgentDownload:
        resp = await self._open("GET", route, FILE_TIMEOUT, params={"path": path, **self._as(root)})
        return AgentDownload(resp, _chunks(resp))

    # --- health, quiesce ------------------------------------------------------------------------

    async def health(self, timeout: float) -> bool:
        """Whether the agent answers, all of it within `timeout` (a start, an adopt and the pool
        wait on this, so a trickling agent must not hold them)."""
        try:
            async with asyncio.timeout(timeout):
                await self._ask("GET", protocol.HEALTH, httpx.Timeout(timeout))
        except (ApiError, ChannelError, TimeoutError):
            return False
        return True

    async def quiesce(self) -> None:
        """Close the agent's host connections for a checkpoint; the whole call within the
        default timeout (the lifetime scheduler pauses boxes in turn)."""
        try:
            async with asyncio.timeout(DEFAULT_TIMEOUT.read or 60.0):
                await self._ask("POST", protocol.QUIESCE, DEFAULT_TIMEOUT)
        except TimeoutError:
            raise AgentProtocolError("the sandbox's agent did not quiesce in time") from None

    # --- commands and processes -----------------------------------------------------------------

    @staticmethod
    def _command(command: Command) -> dict[str, Any]:
        return {"cmd": command.cmd, "cwd": command.cwd, "env": command.env, "user": command.user}

    async def exec(self, command: Command, timeout: float | None) -> AgentStream[Event]:
        return await self._event_stream("POST", protocol.EXEC, json={**self._command(command), "timeout": timeout})

    async def spawn(self, command: Command, pty: tuple[int, int] | None) -> ProcessDesc:
        size = {"rows": pty[0], "cols": pty[1]} if pty else None
        return check_process(await self._ask("POST", protocol.PROCS, json={**self._command(command), "pty": size}))

    async def processes(self) -> list[ProcessDesc]:
        procs = (await self._ask("GET", protocol.PROCS)).get("procs")
        if not isinstance(procs, list):
            raise AgentProtocolError("a malformed process list from the sandbox's agent")
        return [check_process(d) for d in procs[:MAX_PROCESSES]]

    async def process(self, pid: int) -> ProcessDesc:
        return check_process(await self._ask("GET", f"{protocol.PROCS}/{int(pid)}"))

    async def signal(self, pid: int, signal: int) -> bool:
        answer = await self._ask("POST", f"{protocol.PROCS}/{int(pid)}/{protocol.PROC_SIGNAL}", json={"signal": signal})
        return answer.get("signalled") is True

    async def write_stdin(self, pid: int, data: bytes) -> None:
        await self._ask("POST", f"{protocol.PROCS}/{int(pid)}/{protocol.PROC_STDIN}", content=data)

    async def close_stdin(self, pid: int) -> None:
        await self._ask("POST", f"{protocol.PROCS}/{int(pid)}/{protocol.PROC_STDIN_CLOSE}")

    async def resize(self, pid: int, rows: int, cols: int) -> None:
        await self._ask("POST", f"{protocol.PROCS}/{int(pid)}/{protocol.PROC_RESIZE}", json={"rows": rows, "cols": cols})

    async def follow(self, pid: int, after: int | None) -> AgentStream[Event]:
        params = {"after": str(int(after))} if after is not None else None
        return await self._event_stream("GET", f"{protocol.PROCS}/{int(pid)}/{protocol.PROC_EVENTS}", params=params)

    # --- files ----------------------------------------------------------------------------------

    async def write_file(self, path: str, body: AsyncIterator[bytes], root: bool,
                         metadata: dict[str, str] | None = None, length: int | None = None) -> int:
        """`length`, if known, is sent as the body's Content-Length (else it goes chunked): the
        agent reads a sized body at twice the rate. A body that then differs from it fails the
        write (the agent removes what it began)."""
        params = {"path": path, **({"user": "root"} if root else {}),
                  **({"metadata": json.dumps(metadata)} if metadata else {})}
        sized = {"Content-Length": str(length)} if length is not None else None
        answer = await self._ask("PUT", protocol.FILES, FILE_TIMEOUT, params=params, content=body, headers=sized)
        size = answer.get("size")
        if type(size) is not int:
            raise AgentProtocolError("a malformed answer to a file write")
        if metadata and answer.get("metadata") != len(metadata):  # an agent from before metadata ignores it
            raise ApiError(Code.AGENT_ERROR, "the sandbox's agent did not store the file's metadata "
                                             "(it predates metadata: restart the sandbox)")
        return size

    async def read_file(self, path: str, root: bool) -> AgentDownload:
        return await self._download(protocol.FILES, path, root)

    async def zip_dir(self, path: str, root: bool) -> AgentDownload:
        return await self._download(protocol.DIR_ZIP, path, root)

    @staticmethod
    def _as(root: bool) -> dict[str, str]:
        return {"user": "root"} if root else {}  # else the box user

    async def stat(self, path: str, root: bool) -> Entry:
        return check_entry(await self._ask("GET", protocol.FS_STAT, params={"path": path, **self._as(root)}))

    async def list_dir(self, path: str, depth: int, root: bool) -> list[Entry]:
        params = {"path": path, "depth": str(int(depth)), **self._as(root)}
        entries = (await self._ask("GET", protocol.FS_LIST, FILE_TIMEOUT, MAX_LIST_REPLY, params=params)).get("entries")
        if not isinstance(entries, list) or len(entries) > MAX_LIST_ENTRIES:
            raise AgentProtocolError("a malformed listing from the sandbox's agent")
        return [check_entry(d) for d in entries]

    async def make_dir(self, path: str, root: bool) -> tuple[Entry, bool]:
        answer = await self._ask("POST", protocol.FS_MKDIR, json={"path": path, **self._as(root)})
        if not isinstance(answer.get("created"), bool):
            raise AgentProtocolError("a malformed answer to a mkdir")
        return check_entry(answer.get("entry")), answer["created"]

    async def move(self, source: str, destination: str, root: bool) -> Entry:
        body = {"source": source, "destination": destination, **self._as(root)}
        return check_entry(await self._ask("POST", protocol.FS_MOVE, json=body))

    async def remove(self, path: str, root: bool) -> None:
        await self._ask("POST", protocol.FS_REMOVE, FILE_TIMEOUT, json={"path": path, **self._as(root)})

    async def watch(self, path: str, recursive: bool, entries: bool = False) -> AgentStream[FsChange | Ping]:
        params = {"path": path, "recursive": "true" if recursive else "false", **({"entries": "true"} if entries else {})}
        return await self._stream(parse_change, "GET", protocol.FS_WATCH, params=params)

    # --- tunnels --------------------------------------------------------------------------------

    async def open_tunnel(self, port: int) -> Tunnel:
        """The connection becomes the tunnel once the agent answers 200; its own socket, not the
        client's keep-alive pool, since it never goes back to HTTP."""
        self._client()
        try:
            reader, writer = await asyncio.wait_for(self._dial(), TUNNEL_TIMEOUT)
        except (OSError, TimeoutError) as e:
            raise AgentUnreachable(f"the sandbox could not be reached: {e}") from None
        try:
            extra = "".join(f"{name}: {value}\r\n" for name, value in self._headers.items())
            writer.write(f"POST {self._prefix}{protocol.TUNNEL}?port={int(port)} HTTP/1.1\r\nHost: agent\r\n"
                         f"{extra}Content-Length: 0\r\n\r\n".encode())
            status, length = tunnel_head(await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TUNNEL_TIMEOUT))
            if status == 200:
                return reader, writer
            body = await asyncio.wait_for(reader.readexactly(min(length, MAX_TUNNEL_ERROR)), TUNNEL_TIMEOUT)
            raise error_of(status, body)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
            writer.close()
            raise AgentUnreachable(f"the sandbox could not be reached: {e}") from None
        except BaseException:
            writer.close()
            raise
