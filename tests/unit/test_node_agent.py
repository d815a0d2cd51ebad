"""The agent client against hostile replies, with no box: oversized answers, 1-byte chunks (linear),
malformed events and entries, JSON nested too deep, error codes the catalogue does not know, a
planted link instead of the socket, and tunnels refused in odd ways."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from hutch.errors import ApiError, Code
from hutch.guest import protocol
from hutch.node import agent
from hutch.node.agent import AgentClient
from hutch.node.api import (
    AgentProtocolError,
    AgentUnreachable,
    ChannelError,
    Command,
    Dropped,
    Event,
    Exited,
    FsChange,
    Output,
    Ping,
    Started,
    StartFailed,
)

T = TypeVar("T")

ENTRY = {"name": "a", "path": "/a", "type": "file", "size": 3, "mode": 0o644, "permissions": "-rw-r--r--",
         "owner": "user", "group": "user", "mtime": 1.7e9}
PROC = {"pid": 7, "command": "sleep 9", "user": "user", "pty": False, "started_at": 1.7e9, "exit_code": None}
REFUSAL = json.dumps({"code": protocol.ERR_PORT_CLOSED, "message": "nothing listens there"}).encode()
DEEP = b"[" * 100_000 + b"]" * 100_000


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro
    return asyncio.run(main())


async def chunks_of(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def collect(items: AsyncIterator[T]) -> list[T]:
    return [item async for item in items]


Handler = Callable[[httpx.Request], httpx.Response] | Callable[[httpx.Request], Coroutine[None, None, httpx.Response]]


def client(handler: Handler) -> AgentClient:
    return AgentClient("/nonexistent", transport=httpx.MockTransport(handler))


def answering(status: int, body: bytes | AsyncIterator[bytes], **headers: str) -> Handler:
    """An answer streamed as a socket's would be (bytes given whole would be read at once)."""
    if isinstance(body, bytes):
        headers.setdefault("content-length", str(len(body)))
        stream = chunks_of(body)
    else:
        stream = body
    return lambda request: httpx.Response(status, content=stream, headers=headers)


def answer_json(value: Any, status: int = 200) -> Handler:
    return answering(status, json.dumps(value).encode())


def ndjson(*events: Any) -> bytes:
    return b"".join(json.dumps(ev).encode() + b"\n" for ev in events)


# --- bounded reads and lines ----------------------------------------------------------------------

def test_lines_are_split_in_linear_time_however_the_stream_is_cut() -> None:
    line = b"x" * 2**20
    one_byte = [line[i:i + 1] for i in range(len(line))] + [b"\n", b"tail"]
    started = time.monotonic()
    got = run(collect(agent.lines(chunks_of(*one_byte))))
    assert got == [line, b"tail"]
    assert time.monotonic() - started < 10  # a buffer split anew at each byte takes hours here


def test_lines_within_and_across_chunks() -> None:
    got = run(collect(agent.lines(chunks_of(b"a\nb", b"c\n\nd", b"\ne"))))
    assert got == [b"a", b"bc", b"", b"d", b"e"]


def test_a_line_longer_than_the_cap_is_refused_whether_it_ends_or_not() -> None:
    with pytest.raises(AgentProtocolError):
        run(collect(agent.lines(chunks_of(b"x" * 101), limit=100)))
    with pytest.raises(AgentProtocolError):
        run(collect(agent.lines(chunks_of(b"x" * 101 + b"\n"), limit=100)))
    with pytest.raises(AgentProtocolError):
        run(collect(agent.lines(chunks_of(*[b"x"] * 101), limit=100)))


def test_a_reply_is_read_up_to_its_cap_and_no_further() -> None:
    read = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal read
        while True:
            read += 1
            yield b"x"

    with pytest.raises(AgentProtocolError):
        run(agent.read_capped(endless(), limit=1000))
    assert read == 1001
    assert run(agent.read_capped(chunks_of(b"a", b"b"), limit=2)) == b"ab"


# --- events, entries, processes -------------------------------------------------------------------

@pytest.mark.parametrize(("line", "event"), [
    ({"t": "start", "pid": 12}, Started(12)), ({"t": "stdout", "d": "hi"}, Output("stdout", "hi")),
    ({"t": "stderr", "d": ""}, Output("stderr", "")),
    ({"t": "exit", "code": 0, "timed_out": False}, Exited(0, False)),
    ({"t": "exit", "code": None, "timed_out": True}, Exited(None, True)),
    ({"t": "error", "code": "invalid_cwd", "message": "no"}, StartFailed("invalid_cwd", "no")),
    ({"t": "ping"}, Ping()), ({"t": "dropped", "chars": 5}, Dropped(5)),
    ({"t": "stdout", "d": "x", "s": 3}, Output("stdout", "x", seq=3)),
    ({"t": "exit", "code": 1, "timed_out": False, "s": 4}, Exited(1, False, seq=4)),
])
def test_every_kind_of_event_passes_when_well_formed_as_its_type(line: dict[str, Any], event: Event) -> None:
    assert agent.parse_event(json.dumps(line).encode()) == event


def test_the_events_names_on_the_seam_are_the_agents() -> None:
    # a stream's name reaches clients as it is (attach's "t", the SSE event's name)
    assert agent.parse_event(json.dumps({"t": protocol.EVENT_STDOUT, "d": ""}).encode()) == Output("stdout", "")
    assert agent.parse_event(json.dumps({"t": protocol.EVENT_STDERR, "d": ""}).encode()) == Output("stderr", "")
    assert StartFailed(protocol.ERR_BAD_CWD, "no").bad_cwd and not StartFailed(protocol.ERR_IO, "no").bad_cwd


@pytest.mark.parametrize("line", [
    b'{"t": "start", "pid": "12"}', b'{"t": "start", "pid": true}', b'{"t": "stdout", "d": 5}',
    b'{"t": "exit", "code": 1.5, "timed_out": false}', b'{"t": "exit", "code": 0}', b'{"t": "error", "code": 1}',
    b'{"t": "dropped", "chars": null}', b'{"t": "stdout", "d": "x", "s": "1"}',
    b'{"t": "ping", "s": null}', b'{"t": "shell"}', b'{"t": ["ping"]}',
    b"[]", b'"ping"', b"7", b"null", b"not json", b"\xff\xfe", DEEP,
])
def test_a_malformed_event_is_a_protocol_error(line: bytes) -> None:
    with pytest.raises(AgentProtocolError) as e:
        agent.parse_event(line)
    assert e.value.code == Code.AGENT_ERROR and e.value.status == 502


def test_watch_lines_are_changes_or_keep_alives() -> None:
    assert agent.parse_change(b'{"t": "ping"}') == Ping()
    assert agent.parse_change(b'{"t": "fs", "name": "a", "type": "write"}') == FsChange("a", "write", None)
    for line in (b'{"t": "fs", "name": "a", "type": "explode"}', b'{"t": "fs", "name": 1, "type": "write"}',
                 b'{"t": "fs", "type": "write"}', b"[1]", DEEP):
        with pytest.raises(AgentProtocolError):
            agent.parse_change(line)


def test_an_entry_is_checked_field_by_field() -> None:
    assert agent.check_entry(ENTRY)["mtime"] == 1.7e9
    assert agent.check_entry({**ENTRY, "type": "symlink", "target": "/b"})["target"] == "/b"
    for bad in ({"type": "fifo"}, {"size": -1}, {"size": True}, {"mode": 0o17777}, {"mode": "644"},
                {"mtime": float("inf")}, {"mtime": 1e300}, {"mtime": "now"}, {"name": "x" * 9000},
                {"owner": None}, {"permissions": "x" * 17}, {"target": 5}):
        with pytest.raises(AgentProtocolError):
            agent.check_entry({**ENTRY, **bad})
    with pytest.raises(AgentProtocolError):
        agent.check_entry([ENTRY])


def test_an_entrys_link_end_and_metadata_are_checked() -> None:
    link: dict[str, Any] = {"path": "/home/user/t.txt", "type": "file", "mode": 0o644}
    checked = agent.check_entry({**ENTRY, "type": "symlink", "target": "t.txt", "link": link})
    assert checked["link"] == {**link} and "metadata" not in checked
    assert agent.check_entry({**ENTRY, "metadata": {"author": "mish"}})["metadata"] == {"author": "mish"}
    for bad in ({"link": {**link, "type": "fifo"}}, {"link": {**link, "mode": -1}}, {"link": "t.txt"},
                {"link": {"path": 1, "type": "file", "mode": 0}}, {"metadata": {"a": 1}}, {"metadata": ["a"]},
                {"metadata": {"a": "x" * 5000}}, {"metadata": {str(i): "" for i in range(600)}}):
        with pytest.raises(AgentProtocolError):
            agent.check_entry({**ENTRY, **bad})


def test_a_watch_event_may_carry_its_entry_checked() -> None:
    line = json.dumps({"t": "fs", "name": "a", "type": "write", "entry": ENTRY}).encode()
    assert agent.parse_change(line) == FsChange("a", "write", agent.check_entry(ENTRY))
    with pytest.raises(AgentProtocolError):
        agent.parse_change(json.dumps({"t": "fs", "name": "a", "type": "write", "entry": {**ENTRY, "size": -1}}).encode())


def test_a_process_description_is_checked_field_by_field() -> None:
    assert agent.check_process(PROC) == PROC
    for bad in ({"pid": "7"}, {"user": "admin"}, {"pty": 1}, {"started_at": float("nan")}, {"exit_code": "0"},
                {"command": None}):
        with pytest.raises(AgentProtocolError):
            agent.check_process({**PROC, **bad})


# --- the agent's errors ---------------------------------------------------------------------------

def test_a_code_the_agent_may_give_passes_under_the_catalogues_status() -> None:
    err = agent.error_of(404, json.dumps({"code": protocol.ERR_NOT_FOUND, "message": "no such file"}).encode())
    assert (err.code, err.status, err.message) == (Code.FILE_NOT_FOUND, 404, "no such file")
    err = agent.error_of(500, json.dumps({"code": protocol.ERR_PERMISSION, "message": "m"}).encode())
    assert (err.code, err.status) == (Code.PERMISSION_DENIED, 403)  # the status is the catalogue's, not the agent's


@pytest.mark.parametrize(("status", "code", "expected"), [
    (404, protocol.ERR_NO_ROUTE, Code.INVALID_REQUEST),
    (413, protocol.ERR_BODY_TOO_LARGE, Code.INVALID_REQUEST),
    (404, protocol.ERR_BAD_REQUEST, Code.INVALID_REQUEST),  # as an agent from before those two says it (a box resumed)
    (503, protocol.ERR_START_FAILED, Code.COMMAND_START_FAILED),
    (503, protocol.ERR_IO, Code.IO_ERROR),  # an older agent's spawn that could not start: the data plane renames it
    (500, protocol.ERR_AGENT, Code.AGENT_ERROR),
])
def test_the_agents_own_codes_reach_clients_as_they_did_before_it_had_them(status: int, code: str,
                                                                          expected: Code) -> None:
    err = agent.error_of(status, json.dumps({"code": code, "message": "m"}).encode())
    assert (err.code, err.status, err.message) == (expected, expected.status, "m")
    assert expected.status == {Code.INVALID_REQUEST: 400, Code.COMMAND_START_FAILED: 503, Code.IO_ERROR: 400,
                               Code.AGENT_ERROR: 502}[expected]


@pytest.mark.parametrize(("status", "body"), [
    (400, {"code": "sandbox_failed", "message": "a code of the server's, not the agent's"}),
    (400, {"code": "no_such_code", "message": "m"}),
    (400, {"code": 4, "message": "m"}), (400, {"message": "m"}), (400, ["x"]),
    (200, {"code": "file_not_found", "message": "a 200 is not an error answer"}),
    (302, {"code": "file_not_found", "message": "m"}),
])
def test_any_other_error_answer_is_an_agent_error(status: int, body: Any) -> None:
    err = agent.error_of(status, json.dumps(body).encode())
    assert (err.code, err.status) == (Code.AGENT_ERROR, 502)


def test_an_error_answer_that_is_not_json_is_an_agent_error() -> None:
    for body in (b"", b"<html>", DEEP):
        assert agent.error_of(500, body).code == Code.AGENT_ERROR
    long = agent.error_of(400, json.dumps({"code": "io_error", "message": "x" * 10_000}).encode())
    assert len(long.message) == agent.MAX_MESSAGE


def test_a_tunnel_answers_head_is_read_without_trusting_it() -> None:
    assert agent.tunnel_head(b"HTTP/1.1 200 OK\r\nContent-Type: x\r\n\r\n") == (200, 0)
    assert agent.tunnel_head(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 40\r\n\r\n") == (502, 40)
    assert agent.tunnel_head(b"HTTP/1.1 502 x\r\nContent-Length: abc\r\n\r\n") == (502, 0)
    assert agent.tunnel_head(b"HTTP/1.1 502 x\r\ncontent-length: -5\r\n\r\n") == (502, 0)
    assert agent.tunnel_head(b"HTTP/1.1 502 x\r\nContent-Length: 99999999999999999\r\n\r\n") == (502, 0)
    assert agent.tunnel_head(b"garbage\r\n\r\n") == (0, 0)


# --- the client over a scripted transport ---------------------------------------------------------

def test_a_small_answer_is_checked_and_typed() -> None:
    assert run(client(answer_json(ENTRY)).stat("/a", root=False))["name"] == "a"
    assert run(client(answer_json(PROC)).spawn(Command("sleep 9"), None))["pid"] == 7
    assert run(client(answer_json({"signalled": True})).signal(7, 15)) is True
    assert run(client(answer_json({"signalled": "yes"})).signal(7, 15)) is False
    assert run(client(answer_json({"entry": ENTRY, "created": True})).make_dir("/a", root=True))[1] is True


@pytest.mark.parametrize("handler", [
    answering(200, b"x" * (agent.MAX_REPLY_BYTES + 1)),
    answering(200, chunks_of(*[b" "] * (agent.MAX_REPLY_BYTES + 1))),
    answering(200, DEEP), answering(200, b"[1, 2]"), answering(200, b"{"),
    answer_json({**ENTRY, "size": "big"}),
])
def test_a_hostile_answer_is_an_agent_error_never_a_crash(handler: Handler) -> None:
    with pytest.raises(ApiError) as e:
        run(client(handler).stat("/a", root=False))
    assert (e.value.code, e.value.status) == (Code.AGENT_ERROR, 502)


def test_the_agents_refusal_keeps_its_known_code() -> None:
    handler = answer_json({"code": protocol.ERR_NO_PROCESS, "message": "no process 7"}, status=404)
    with pytest.raises(ApiError) as e:
        run(client(handler).signal(7, 9))
    assert (e.value.code, e.value.status) == (Code.PROCESS_NOT_FOUND, 404)
    huge = answering(404, b'{"code": "file_not_found", "message": "' + b"x" * 2**20 + b'"}')
    with pytest.raises(ApiError) as e:
        run(client(huge).stat("/a", root=False))
    assert e.value.code == Code.AGENT_ERROR  # an error body past the cap is not read to its end


def test_a_listing_past_its_cap_is_refused() -> None:
    with pytest.raises(ApiError) as e:
        run(client(answer_json({"entries": [ENTRY] * (agent.MAX_LIST_ENTRIES + 1)})).list_dir("/", 1, root=False))
    assert e.value.code == Code.AGENT_ERROR
    assert len(run(client(answer_json({"entries": [ENTRY] * 3})).list_dir("/", 1, root=False))) == 3
    assert len(run(client(answer_json({"procs": [PROC] * 3})).processes())) == 3
    with pytest.raises(ApiError) as e:  # a process list is a small answer
        run(client(answer_json({"procs": [PROC] * 1000})).processes())
    assert e.value.code == Code.AGENT_ERROR


def test_no_answer_is_unreachable_and_a_closed_client_sends_nothing() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(AgentUnreachable) as e:
        run(client(refuse).stat("/a", root=False))
    assert e.value.code == Code.SANDBOX_UNREACHABLE
    assert run(client(refuse).health(timeout=1.0)) is False

    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, content=chunks_of(b"{}"))

    closed = client(record)
    run(closed.aclose())
    with pytest.raises(ChannelError):
        run(closed.stat("/a", root=False))
    assert not sent


def test_health_is_an_answer_that_is_a_small_object() -> None:
    assert run(client(answer_json({"version": 1, "pid": 1})).health(timeout=1.0)) is True
    assert run(client(answer_json({"version": 1}, status=500)).health(timeout=1.0)) is False
    assert run(client(answering(200, b"x" * (agent.MAX_REPLY_BYTES + 1))).health(timeout=1.0)) is False


def test_an_exec_stream_yields_checked_events_and_stops_at_a_malformed_one() -> None:
    body = ndjson({"t": "start", "pid": 3}, {"t": "stdout", "d": "hi"}) + b"\n" + ndjson({"t": "exit", "code": 0,
                                                                                         "timed_out": False})
    one_byte = [body[i:i + 1] for i in range(len(body))]
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=chunks_of(*one_byte))

    async def events(c: AgentClient) -> list[Any]:
        stream = await c.exec(Command("echo hi", cwd="/tmp", env={"A": "1"}, user="root"), 5.0)
        try:
            return [ev async for ev in stream]
        finally:
            await stream.aclose()

    assert run(events(client(handler))) == [Started(3), Output("stdout", "hi"), Exited(0, False)]
    assert json.loads(seen[0].content) == {"cmd": "echo hi", "cwd": "/tmp", "env": {"A": "1"}, "user": "root",
                                           "timeout": 5.0}
    bad = answering(200, ndjson({"t": "start", "pid": 3}) + b'{"t": "stdout", "d": 1}\n' + ndjson({"t": "ping"}))
    with pytest.raises(AgentProtocolError):
        run(events(client(bad)))


class Told(httpx.AsyncByteStream):
    """A command's events, then (unless `hang`) the answer's end; says whether it was read to
    that end and whether it was closed."""

    def __init__(self, body: bytes, hang: bool = False) -> None:
        self.body, self.hang = body, hang
        self.ended = self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.body
        if self.hang:
            await asyncio.sleep(3600)
        self.ended = True

    async def aclose(self) -> None:
        self.closed = True


@pytest.mark.parametrize("hang", [False, True])
def test_at_an_exit_the_answers_end_is_read_so_its_connection_is_kept(monkeypatch: pytest.MonkeyPatch,
                                                                      hang: bool) -> None:
    """A caller stops reading at the exit (it has its result): the answer's end is read first, so
    the channel's connection goes back to the pool; an agent that withholds the end costs the call
    END_DEADLINE, and the connection."""
    monkeypatch.setattr(agent, "END_DEADLINE", 0.05)
    body = Told(ndjson({"t": "start", "pid": 3}, {"t": "exit", "code": 0, "timed_out": False}), hang=hang)

    async def until_exit() -> list[Event]:
        stream = await client(lambda request: httpx.Response(200, stream=body)).exec(Command("true", None, {}, None), 5.0)
        seen: list[Event] = []
        async for ev in stream:
            seen.append(ev)
            if isinstance(ev, Exited):
                return seen  # as DataPlane.run_to_end does: the stream is not read on, nor closed
        return seen

    assert run(until_exit()) == [Started(3), Exited(0, False)]
    assert body.ended is not hang and body.closed


class Endless(httpx.AsyncByteStream):
    """A process' events that never end; closed when the client lets them go."""

    closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            yield ndjson({"t": "ping"})
            await asyncio.sleep(0.01)

    async def aclose(self) -> None:
        self.closed = True


def test_a_stream_is_let_go_read_or_not() -> None:
    async def follow(read: int) -> Endless:
        body = Endless()
        stream = await client(lambda request: httpx.Response(200, stream=body)).follow(3, after=None)
        events = aiter(stream)
        for _ in range(read):
            assert await anext(events) == Ping()
        await stream.aclose()
        return body

    assert run(follow(0)).closed and run(follow(2)).closed


def test_a_download_streams_its_bytes_and_tells_its_size() -> None:
    async def main(handler: Handler) -> tuple[int | None, bytes]:
        download = await client(handler).read_file("/a", False)
        return download.size, b"".join([chunk async for chunk in download])

    assert run(main(answering(200, b"abc"))) == (3, b"abc")
    assert run(main(answering(200, chunks_of(b"a", b"b")))) == (None, b"ab")  # chunked: no size


def test_a_write_streams_its_body_to_the_agent() -> None:
    received = bytearray()

    async def handler(request: httpx.Request) -> httpx.Response:
        async for chunk in request.stream:  # type: ignore[union-attr]
            received.extend(chunk)
        assert request.url.params["path"] == "/f" and request.url.params["user"] == "root"
        return httpx.Response(200, content=chunks_of(json.dumps({"size": len(received)}).encode()))

    written = run(client(handler).write_file("/f", chunks_of(b"ab", b"cd"), root=True))
    assert (written, bytes(received)) == (4, b"abcd")
    with pytest.raises(ApiError) as e:
        run(client(answer_json({"size": "4"})).write_file("/f", chunks_of(b"x"), root=False))
    assert e.value.code == Code.AGENT_ERROR


def test_a_write_with_metadata_wants_the_agent_to_say_it_stored_it() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        async for _chunk in request.stream:  # type: ignore[union-attr]
            pass
        stored = len(json.loads(request.url.params["metadata"]))
        return httpx.Response(200, content=chunks_of(json.dumps({"size": 1, "metadata": stored}).encode()))

    assert run(client(handler).write_file("/f", chunks_of(b"x"), False, {"a": "b", "c": "d"})) == 1
    with pytest.raises(ApiError) as e:  # an agent from before metadata answers without the count
        run(client(answer_json({"size": 1})).write_file("/f", chunks_of(b"x"), False, {"a": "b"}))
    assert e.value.code == Code.AGENT_ERROR
    assert run(client(answer_json({"size": 1})).write_file("/f", chunks_of(b"x"), False)) == 1


# --- the socket: pinned, never a link; tunnels ----------------------------------------------------

@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hutch-u", dir="/tmp"))  # Unix socket paths: 108 bytes at most
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_socket_is_pinned_and_a_planted_link_or_file_is_refused(short_dir: Path) -> None:
    sock_path = short_dir / "agent.sock"
    assert agent.pin(sock_path) is None  # not there yet
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock_path))
    try:
        assert agent.pin(sock_path) is None  # there, but nothing listens yet
        link = short_dir / "link.sock"
        link.symlink_to(sock_path)
        with pytest.raises(ChannelError):
            agent.pin(link)
        plain = short_dir / "plain"
        plain.write_text("")
        with pytest.raises(ChannelError):
            agent.pin(plain)
    finally:
        listener.close()


def test_the_hosts_own_socket_in_the_agents_place_is_refused_and_the_boxs_is_pinned(short_dir: Path) -> None:
    """The box can rename the host's egress socket, beside the agent's, to the agent's name."""
    sock_path = short_dir / "agent.sock"
    own = socket.socket(socket.AF_UNIX)
    own.bind(str(sock_path))
    own.listen()
    try:
        with pytest.raises(ChannelError, match="host's own"):
            agent.pin(sock_path)
    finally:
        own.close()
        sock_path.unlink()
    # another process's listener (a box's socket is its gofer's): pinned
    other = subprocess.Popen([sys.executable, "-c", "import socket, sys, time\n"
                              "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen()\n"
                              "print('ready', flush=True); time.sleep(60)", str(sock_path)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline() == "ready\n"
        pinned = agent.pin(sock_path)
        assert pinned is not None and pinned.socket.startswith("/proc/self/fd/")
        fd = int(pinned.socket.rsplit("/", 1)[1])
        run(pinned.aclose())
        with pytest.raises(OSError):
            os.fstat(fd)  # closed with the client
    finally:
        other.kill()
        other.wait()


async def fake_agent(path: Path, answer: bytes, then: Callable[[], Awaitable[T]]) -> T:
    """`then()`, while a fake agent on `path` answers each tunnel request with `answer`; then it
    echoes what it is sent if that was a 200, else hangs up."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        while answer.startswith(b"HTTP/1.1 200 ") and (data := await reader.read(100)):
            writer.write(data)
        writer.close()

    async with await asyncio.start_unix_server(handle, path=str(path)):
        return await then()


def test_a_tunnel_carries_bytes_once_the_agent_says_200(short_dir: Path) -> None:
    async def ping() -> bytes:
        reader, writer = await AgentClient(str(short_dir / "s")).open_tunnel(8080)
        writer.write(b"ping")
        try:
            return await reader.readexactly(4)
        finally:
            writer.close()

    assert run(fake_agent(short_dir / "s", b"HTTP/1.1 200 OK\r\n\r\n", ping)) == b"ping"


@pytest.mark.parametrize(("answer", "code"), [
    (b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: %d\r\n\r\n%s" % (len(REFUSAL), REFUSAL), Code.PORT_NOT_LISTENING),
    (b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: abc\r\n\r\n", Code.AGENT_ERROR),
    (b"HTTP/1.1 400 Bad\r\nContent-Length: 12\r\n\r\n" + b"[" * 12, Code.AGENT_ERROR),
    (b"HTTP/1.1 500 x\r\nContent-Length: 40\r\n\r\n{", Code.SANDBOX_UNREACHABLE),  # cut short
    (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 20_000, Code.SANDBOX_UNREACHABLE),  # a head past the stream's limit
])
def test_a_refused_tunnel_is_an_api_error_with_a_catalogue_code(short_dir: Path, answer: bytes, code: Code) -> None:
    async def refused() -> None:
        await AgentClient(str(short_dir / "s")).open_tunnel(8080)

    with pytest.raises(ApiError) as e:
        run(fake_agent(short_dir / "s", answer, refused))
    assert e.value.code == code


async def trickle() -> AsyncIterator[bytes]:
    """An answer that never ends: a byte now and then, each well within httpx's read timeout."""
    yield b"{"
    while True:
        await asyncio.sleep(0.05)
        yield b" "


def test_a_trickling_health_answer_is_no_answer_within_its_timeout() -> None:
    started = time.monotonic()
    assert run(client(answering(200, trickle())).health(0.5)) is False
    assert time.monotonic() - started < 5, "the whole answer is bounded, not only each read"


def test_a_trickling_reply_is_cut_at_the_reply_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent, "REPLY_DEADLINE", 0.3)
    with pytest.raises(AgentProtocolError):
        run(client(answering(200, trickle())).processes())
