"""hutch.fleet.relay on loopback, as a fleet's API server (or anyone else on the network) meets
it: the fleet's key before anything is reached, the bounds on heads and on connections, the
refusals that never reach a box or a call, and a box's channel relayed byte for byte both ways.

The boxes are stand-ins: tiny HTTP servers on unix sockets in tmp_path that record what they
got; the calls are a script. No root, no runsc.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hutch.fleet.relay import KEY_HEADER, MAX_CALL_BODY, MAX_HEAD, CallError, Relay, RelayLimits

KEY = secrets.token_hex(32)
BOX_A = "h" + "a" * 24
BOX_B = "h" + "b" * 24
UNKNOWN = "h" + "c" * 24  # well formed, but no box of this node
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
QUICK = RelayLimits(head_seconds=0.5)


@dataclass
class Box:
    """A box's agent on its unix socket. Routes: /length (a Content-Length body), /chunked (a
    chunked body), /until-eof (everything until the caller's half-close), /stream (one chunk, the
    next once `go` is set), /hold (an answer that ends once `go` is set), /drop (closed unanswered);
    anything else a short answer."""

    socket: Path
    heads: list[bytes] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    connections: int = 0
    go: asyncio.Event = field(default_factory=asyncio.Event)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            path = head.split(b" ", 2)[1].split(b"?")[0]
            body = b""
            if path == b"/length":
                body = await reader.readexactly(int(header(head, b"content-length") or b"0"))
            elif path == b"/chunked":
                body = await reader.readuntil(b"\r\n0\r\n\r\n")
            elif path == b"/until-eof":
                body = await reader.read(-1)
            self.bodies.append(body)
            if path == b"/stream":
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
                await writer.drain()
                await self.go.wait()
                writer.write(b"6\r\nsecond\r\n0\r\n\r\n")
            elif path == b"/hold":
                writer.write(b"HTTP/1.1 200 OK\r\n\r\nheld")
                await writer.drain()
                await self.go.wait()
            elif path != b"/drop":
                answer = f"{len(body)} bytes".encode()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(answer) + answer)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


@dataclass
class Calls:
    """The node's calls, scripted: `conflict` fails as a call, `boom` and `bare` as a bug."""

    asked: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def __call__(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        self.asked.append((name, args))
        if name == "conflict":
            raise CallError("no_space", "the disk is full")
        if name == "boom":
            raise RuntimeError("kaput")
        if name == "bare":
            raise RuntimeError
        return {"call": name, "args": args}


@dataclass
class Harness:
    relay: Relay
    port: int
    calls: Calls
    boxes: dict[str, Box]
    looked_up: list[str]  # the runtime ids the relay asked for a socket

    async def open(self) -> Streams:
        return await asyncio.open_connection("127.0.0.1", self.port)

    async def send(self, data: bytes, half_close: bool = False) -> bytes:
        """`data` on a new connection; all the node sent back before it closed."""
        reader, writer = await self.open()
        writer.write(data)
        if half_close:
            writer.write_eof()
        try:
            return await read_all(reader)
        finally:
            writer.close()


async def read_all(reader: asyncio.StreamReader, timeout: float = 5) -> bytes:
    """What came before the close (a close with our bytes unread is a reset: what came, still)."""
    got = b""
    try:
        async with asyncio.timeout(timeout):
            while data := await reader.read(65536):
                got += data
    except ConnectionResetError:
        pass
    return got


def request(target: str, body: bytes = b"", key: str | None = KEY, method: str = "POST",
            headers: tuple[str, ...] = ()) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: node", *headers]
    if key is not None:
        lines.append(f"{KEY_HEADER}: {key}")
    if not any(h.lower().startswith("transfer-encoding:") for h in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def parsed(raw: bytes) -> tuple[int, Any]:
    """An answer's status and its JSON body."""
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), raw[:200]
    return int(head.split(b" ")[1]), json.loads(body)


def refusal(raw: bytes, status: int) -> str:
    """The kind of an error answer that must have `status`."""
    got, body = parsed(raw)
    assert got == status, raw[:300]
    kind: str = body["error"]["kind"]
    return kind


async def until(condition: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "never came to pass"
        await asyncio.sleep(0.005)


@asynccontextmanager
async def harness(tmp_path: Path, limits: RelayLimits | None = None) -> AsyncIterator[Harness]:
    boxes = {BOX_A: Box(tmp_path / "a.sock"), BOX_B: Box(tmp_path / "b.sock")}
    servers = [await asyncio.start_unix_server(box.serve, str(box.socket)) for box in boxes.values()]
    looked_up: list[str] = []

    def sockets(runtime_id: str) -> str | None:
        looked_up.append(runtime_id)
        box = boxes.get(runtime_id)
        return None if box is None else str(box.socket)

    calls = Calls()
    relay = Relay(KEY, calls, sockets, limits)
    await relay.start("127.0.0.1", 0)
    assert relay._server is not None
    port = relay._server.sockets[0].getsockname()[1]
    try:
        yield Harness(relay, port, calls, boxes, looked_up)
    finally:
        await relay.close()
        for server in servers:
            server.close()


def run(tmp_path: Path, test: Callable[[Harness], Awaitable[None]], limits: RelayLimits | None = None) -> None:
    async def main() -> None:
        async with harness(tmp_path, limits) as node:
            await asyncio.wait_for(test(node), 15)

    asyncio.run(main())


# --- the fleet's key ----------------------------------------------------------------------------------

@pytest.mark.parametrize("key", [None, "", "not-the-key", KEY[:-1], KEY + "0", KEY.upper(), KEY[1:] + KEY[0]],
                         ids=["none", "empty", "wrong", "shorter", "longer", "case", "rotated"])
def test_without_the_fleet_key_nothing_is_reached(tmp_path: Path, key: str | None) -> None:
    async def test(node: Harness) -> None:
        assert refusal(await node.send(request("/rpc/ping", key=key)), 401) == "unauthorized"
        assert refusal(await node.send(request(f"/channel/{BOX_A}/length", key=key)), 401) == "unauthorized"
        assert refusal(await node.send(request("/nowhere", key=key, method="GET")), 401) == "unauthorized"
        assert node.calls.asked == [] and node.looked_up == [] and node.boxes[BOX_A].connections == 0

    run(tmp_path, test)


def test_with_the_fleet_key_calls_and_boxes_are_reached(tmp_path: Path) -> None:
    async def test(node: Harness) -> None:
        assert parsed(await node.send(request("/rpc/ping", b'{"a": 1}'))) == (200, {"call": "ping", "args": {"a": 1}})
        assert (await node.send(request(f"/channel/{BOX_A}/length", b"hello"))).endswith(b"5 bytes")
        assert node.calls.asked == [("ping", {"a": 1})] and node.looked_up == [BOX_A]
        assert node.boxes[BOX_A].bodies == [b"hello"]

    run(tmp_path, test)


# --- heads: their deadline and their size --------------------------------------------------------------

def test_a_head_that_never_completes_is_cut_at_the_deadline(tmp_path: Path) -> None:
    async def test(node: Harness) -> None:
        reader, writer = await node.open()
        writer.write(request("/rpc/ping")[:-2])  # all but the blank line
        started = time.monotonic()
        assert await read_all(reader) == b"", "cut unanswered"
        assert QUICK.head_seconds - 0.1 <= time.monotonic() - started < QUICK.head_seconds + 1.5
        writer.close()
        assert node.calls.asked == []

    run(tmp_path, test, QUICK)


def test_a_dripping_head_is_cut_at_the_deadline_though_bytes_keep_coming(tmp_path: Path) -> None:
    async def test(node: Harness) -> None:
        reader, writer = await node.open()
        head = request("/rpc/ping")  # ~130 bytes: at one per 20 ms, 2.6 s to finish

        async def drip() -> None:
            for byte in head:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.02)

        dripping = asyncio.ensure_future(drip())
        started = time.monotonic()
        assert await read_all(reader) == b""
        assert time.monotonic() - started < QUICK.head_seconds + 1.0
        assert not dripping.done() or dripping.exception() is not None, "cut before the head was whole"
        dripping.cancel()
        await asyncio.gather(dripping, return_exceptions=True)
        writer.close()
        assert node.calls.asked == []

    run(tmp_path, test, QUICK)


def test_an_incomplete_head_over_max_head_is_refused_at_once(tmp_path: Path) -> None:
    async def test(node: Harness) -> None:
        reader, writer = await node.open()
        writer.write(f"POST /rpc/ping HTTP/1.1\r\n{KEY_HEADER}: {KEY}\r\nX-Pad: ".encode() + b"a" * (MAX_HEAD + 1024))
        started = time.monotonic()
        assert await read_all(reader) == b""
        assert time.monotonic() - started < 2.0, "not left to the head's deadline"
        writer.close()
        assert node.calls.asked == []

    run(tmp_path, test, RelayLimits(head_seconds=5.0))


def test_a_whole_head_over_max_head_is_refused(tmp_path: Path) -> None:
    async def test(node: Harness) -> None:
        got = await node.send(request("/rpc/ping", headers=("X-Pad: " + "a" * (MAX_HEAD + 2048),)))
        assert node.calls.asked == [], "a head over MAX_HEAD reached the calls"
        assert not got.startswith(b"HTTP/1.1 200")

    run(tmp_path, test)


# --- connection caps -----------------------------------------------------------------------------------

def test_connections_still_in_their_heads_are_capped_then_served_again_once_cut(tmp_path: Path) -> None:
    limits = RelayLimits(unauthenticated=2, head_seconds=1.0)

    async def test(node: Harness) -> None:
        silent = [await node.open() for _ in range(limits.unauthenticated)]
        for _, writer in silent:
            writer.write(b"POST /rpc/ping HTTP/1.1\r\n")
        while True:  # until the relay has both (a probe served before it has is harmless)
            got = await node.send(request("/rpc/probe"))
            if not got.startswith(b"HTTP/1.1 200"):
                break
        assert refusal(got, 503) == "busy"
        assert all(name == "probe" for name, _ in node.calls.asked)
        for reader, writer in silent:
            assert await read_all(reader) == b"", "cut at the head's deadline"
            writer.close()
        assert parsed(await node.send(request("/rpc/after")))[0] == 200
        assert node.calls.asked[-1][0] == "after"

    run(tmp_path, test, limits)


def test_one_box_s_connections_are_capped_without_touching_another_s(tmp_path: Path) -> None:
    limits = RelayLimits(per_box=2)

    async def test(node: Harness) -> None:
        a, b = node.boxes[BOX_A], node.boxes[BOX_B]
        held = [await node.open() for _ in range(limits.per_box)]
        for _, writer in held:
            writer.write(request(f"/channel/{BOX_A}/hold"))
        await until(lambda: len(a.heads) == limits.per_box)
        assert refusal(await node.send(request(f"/channel/{BOX_A}/length", b"x")), 503) == "busy"
        assert a.connections == limits.per_box, "the refused one never reached the box"
        assert (await node.send(request(f"/channel/{BOX_B}/length", b"xy"))).endswith(b"2 bytes")
        assert b.bodies == [b"xy"]
        a.go.set()
        for reader, writer in held:
            assert (await read_all(reader)).endswith(b"held")
            writer.close()
        while True:  # the relay lets go of a connection's slot just after its answer has ended
            got = await node.send(request(f"/channel/{BOX_A}/length", b"xyz"))
            if not got.startswith(b"HTTP/1.1 503"):
                break
        assert got.endswith(b"3 bytes")

    run(tmp_path, test, limits)


# --- what is refused or dropped before a box --------------------------------------------------------------

def test_a_request_with_two_framings_is_refused(tmp_path: Path) -> None:
    two = ("Content-Length: 5", "Transfer-Encoding: chunked")

    async def test(node: Harness) -> None:
        assert refusal(await node.send(request("/rpc/ping", headers=two)), 400) == "invalid"
        assert refusal(await node.send(request(f"/channel/{BOX_A}/length", headers=two)), 400) == "invalid"
        assert node.calls.asked == [] and node.looked_up == [] and node.boxes[BOX_A].connections == 0

    run(tmp_path, test)


@pytest.mark.parametrize("target", ["/channel/../x/length", f"/channel/../{BOX_A}/length", f"/channel/{BOX_A[:-1]}/length",
                                    f"/channel/{BOX_A}a/length", f"/channel/{BOX_A.upper()}/length",
                                    "/channel/H" + "a" * 24 + "/length", "/channel/h" + "A" * 24 + "/length",
                                    f"/channel/{BOX_A}%2F/length", f"/channel/{BOX_A}", "/channel/", "/channel//length"])
def test_a_malformed_runtime_id_is_closed_unanswered_before_any_box(tmp_path: Path, target: str) -> None:
    async def test(node: Harness) -> None:
        assert await node.send(request(target, b"x")) == b""
        assert node.looked_up == [], "not even asked for a socket"
        assert all(box.connections == 0 for box in node.boxes.values())

    run(tmp_path, test)


def test_an_unknown_runtime_id_is_closed_unanswered(tmp_path: Path) -> None:
    async def test(node: Harness) -> None:
        assert await node.send(request(f"/channel/{UNKNOWN}/length", b"x")) == b""
        assert node.looked_up == [UNKNOWN]
        assert all(box.connections == 0 for box in node.boxes.values())

    run(tmp_path, test)


# --- the relayed request and its answer -------------------------------------------------------------------

def test_the_box_gets_the_route_and_headers_without_the_key_and_with_connection_close(tmp_path: Path) -> None:
    async def test(node: Harness) -> None:
        body = bytes(range(256)) * 64  # every byte value, 16 KiB
        raw = request(f"/channel/{BOX_A}/length?path=%2Ftmp%2Fa%20b&mode=0644", body,
                      headers=("Connection: keep-alive, x-custom", "Keep-Alive: timeout=5", "X-Custom: kept"))
        raw = raw.replace(KEY_HEADER.encode(), b"X-Hutch-Fleet-KEY")  # any case of the name is the key
        reader, writer = await node.open()
        split = len(raw) - len(body) + 1000
        writer.write(raw[:split])  # the head and some of the body together, the rest after
        await writer.drain()
        writer.write(raw[split:])
        assert (await read_all(reader)).endswith(f"{len(body)} bytes".encode())
        writer.close()
        [head] = node.boxes[BOX_A].heads
        lines = head[:-4].split(b"\r\n")
        assert lines[0] == b"POST /length?path=%2Ftmp%2Fa%20b&mode=0644 HTTP/1.1"
        assert KEY.encode() not in head and KEY_HEADER.encode() not in head.lower()
        assert [line for line in lines if line.lower().startswith((b"connection:", b"keep-alive:"))] == [b"connection: close"]
        assert b"x-custom: kept" in lines and b"host: node" in lines and f"content-length: {len(body)}".encode() in lines
        assert node.boxes[BOX_A].bodies == [body]

    run(tmp_path, test)


def test_a_chunked_body_arrives_byte_for_byte(tmp_path: Path) -> None:
    async def test(node: Harness) -> None:
        chunked = b"3;ext=1\r\nabc\r\n100\r\n" + bytes(range(256)) + b"\r\n1\r\n\n\r\n0\r\n\r\n"
        raw = request(f"/channel/{BOX_A}/chunked", headers=("Transfer-Encoding: chunked",))
        reader, writer = await node.open()
        writer.write(raw + chunked[:7])
        await writer.drain()
        writer.write(chunked[7:])
        assert (await read_all(reader)).endswith(f"{len(chunked)} bytes".encode())
        writer.close()
        assert node.boxes[BOX_A].bodies == [chunked], "passed as it came, not decoded and encoded again"
        assert b"transfer-encoding: chunked" in node.boxes[BOX_A].heads[0]

    run(tmp_path, test)


def test_a_streamed_answer_arrives_as_it_is_sent_and_the_box_s_close_ends_it(tmp_path: Path) -> None:
    async def test(node: Harness) -> None:
        box = node.boxes[BOX_A]
        reader, writer = await node.open()
        writer.write(request(f"/channel/{BOX_A}/stream"))
        first = await asyncio.wait_for(reader.readuntil(b"5\r\nfirst\r\n"), 5)
        assert not box.go.is_set(), "the first chunk came while the box still held the second"
        assert first.startswith(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        box.go.set()
        assert await read_all(reader) == b"6\r\nsecond\r\n0\r\n\r\n", "then the rest, and the end at the box's close"
        writer.close()

    run(tmp_path, test)


def test_a_box_that_closes_unanswered_ends_the_connection(tmp_path: Path) -> None:
    async def test(node: Harness) -> None:
        reader, writer = await node.open()
        writer.write(request(f"/channel/{BOX_A}/drop"))  # and the caller keeps its side open
        assert await read_all(reader) == b""
        assert node.boxes[BOX_A].connections == 1
        writer.close()

    run(tmp_path, test)


def test_a_caller_that_half_closes_still_gets_the_rest(tmp_path: Path) -> None:
    async def test(node: Harness) -> None:
        raw = f"PUT /channel/{BOX_A}/until-eof HTTP/1.1\r\nHost: node\r\n{KEY_HEADER}: {KEY}\r\n\r\n".encode()
        got = await node.send(raw + b"an upload delimited by its end", half_close=True)
        assert got.endswith(b"30 bytes"), "the half-close reached the box, and its answer came back"
        assert node.boxes[BOX_A].bodies == [b"an upload delimited by its end"]

    run(tmp_path, test)


# --- calls -------------------------------------------------------------------------------------------

def test_a_call_s_body_is_capped(tmp_path: Path) -> None:
    async def test(node: Harness) -> None:
        assert refusal(await node.send(request("/rpc/ping", b" " * (MAX_CALL_BODY + 1))), 413) == "too_large"
        chunks = b"".join(b"10000\r\n" + b" " * 0x10000 + b"\r\n" for _ in range(MAX_CALL_BODY // 0x10000 + 1))
        over = request("/rpc/ping", headers=("Transfer-Encoding: chunked",)) + chunks + b"0\r\n\r\n"
        assert refusal(await node.send(over), 413) == "too_large", "whatever the framing"
        assert node.calls.asked == []
        padded = b'{"pad": "' + b"x" * (MAX_CALL_BODY - 11) + b'"}'
        assert len(padded) == MAX_CALL_BODY
        assert parsed(await node.send(request("/rpc/ping", padded)))[0] == 200, "at the cap, taken"

    run(tmp_path, test)


@pytest.mark.parametrize("body", [b"[1]", b"3", b'"s"', b"null", b"not json", b'{"a": ', b"\xff\xfe{}", b"[" * 100_000],
                         ids=["list", "number", "string", "null", "text", "cut", "not-utf8", "deep"])
def test_a_call_s_body_that_is_not_a_json_object_is_refused(tmp_path: Path, body: bytes) -> None:
    async def test(node: Harness) -> None:
        assert refusal(await node.send(request("/rpc/ping", body)), 400) == "invalid"
        assert node.calls.asked == []

    run(tmp_path, test)


def test_calls_answers_and_failures(tmp_path: Path) -> None:
    async def test(node: Harness) -> None:
        assert parsed(await node.send(request("/rpc/ping"))) == (200, {"call": "ping", "args": {}}), "no body: no args"
        assert parsed(await node.send(request("/rpc/conflict", b"{}"))) == (
            409, {"error": {"kind": "no_space", "message": "the disk is full"}})
        assert parsed(await node.send(request("/rpc/boom", b"{}"))) == (500, {"error": {"kind": "failed", "message": "kaput"}})
        assert parsed(await node.send(request("/rpc/bare", b"{}"))) == (
            500, {"error": {"kind": "failed", "message": "RuntimeError"}})
        assert refusal(await node.send(request("/rpc/ping", method="GET")), 404) == "not_found"
        assert refusal(await node.send(request("/elsewhere")), 404) == "not_found"
        assert [name for name, _ in node.calls.asked] == ["ping", "conflict", "boom", "bare"]

    run(tmp_path, test)
