"""The agent channel's transport against a real peer on a Unix socket: replies whole and streamed,
connections kept alive and dropped when stale, cut short or abandoned, hostile heads, timeouts,
streamed request bodies, and no request ever sent twice."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import h11
import httpx
import pytest

from hutch.node.uds_transport import UnixTransport

T = TypeVar("T")

# Writes the answer to the server's request number n (from 0); False hangs up after it.
Reply = Callable[[int, asyncio.StreamWriter], Awaitable[bool]]


def ok(body: bytes, *headers: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), b"".join(h + b"\r\n" for h in headers), body)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def answering(*answers: bytes, close: bool = False) -> Reply:
    """Each request answered with `answers[n]` (the last one again past the end)."""
    async def reply(n: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(answers[min(n, len(answers) - 1)])
        return not close
    return reply


class Server:
    """A peer that reads each request with h11 and has `reply` write raw bytes back."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.connections = 0
        self.hung_up = 0  # connections the client closed
        self.heads: list[h11.Request] = []
        self.bodies: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        pending = b""
        try:
            while True:
                conn = h11.Connection(h11.SERVER)
                if pending:  # (b"" would be the end of the stream)
                    conn.receive_data(pending)
                body = bytearray()
                while not isinstance(event := conn.next_event(), h11.EndOfMessage):
                    if event is h11.NEED_DATA:
                        if not (data := await reader.read(65536)):
                            self.hung_up += 1
                            return
                        conn.receive_data(data)
                    elif isinstance(event, h11.Request):
                        self.heads.append(event)
                    else:
                        assert isinstance(event, h11.Data), event  # nothing else comes before a request's end
                        body += event.data
                self.bodies.append(bytes(body))
                pending = conn.trailing_data[0]
                if not await self.reply(len(self.bodies) - 1, writer):
                    return
                await writer.drain()
        except ConnectionError:
            self.hung_up += 1
        finally:
            writer.close()


def serve(path: Path, reply: Reply, main: Callable[[Server], Awaitable[T]]) -> T:
    """`main(server)` while a server on `path` answers with `reply`."""
    async def serving() -> T:
        server = Server(reply)
        async with await asyncio.start_unix_server(server.handle, path=str(path)):
            try:
                return await main(server)
            finally:
                for writer in server.writers:  # handlers left waiting end with the test
                    writer.close()
    return asyncio.run(serving())


async def until(check: Callable[[], bool], within: float = 2.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        await asyncio.sleep(0.01)


def idle(transport: UnixTransport) -> int:
    """How many connections the transport keeps for reuse (the server cannot tell kept from forgotten)."""
    return len(transport._idle)


@pytest.fixture
def sock() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hutch-u", dir="/tmp"))  # Unix socket paths: 108 bytes at most
    yield path / "s"
    shutil.rmtree(path, ignore_errors=True)


def client(transport: UnixTransport, read: float = 5.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=transport, base_url="http://agent", timeout=httpx.Timeout(read, connect=2.0))


# --- replies --------------------------------------------------------------------------------------

def test_a_json_reply(sock: Path) -> None:
    async def main(server: Server) -> None:
        async with client(UnixTransport(str(sock))) as http:
            resp = await http.get("/v1/health", headers={"x-k": "v"})
        assert resp.json() == {"ok": True}
        assert resp.headers["content-type"] == "application/json"
        assert resp.http_version == "HTTP/1.1" and resp.reason_phrase == "OK"
        head = server.heads[0]
        assert (head.method, head.target) == (b"GET", b"/v1/health")
        assert (b"host", b"agent") in list(head.headers) and (b"x-k", b"v") in list(head.headers)

    serve(sock, answering(ok(b'{"ok": true}', b"Content-Type: application/json")), main)


def test_a_chunked_reply_is_read_piece_by_piece(sock: Path) -> None:
    """The server sends each piece only once the client has had the one before: nothing waits for the whole body."""
    parts = [b"one", b"two", b"three"]
    got = asyncio.Event()

    async def reply(n: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for part in parts:
            writer.write(chunk(part))
            await writer.drain()
            await got.wait()
            got.clear()
        writer.write(b"0\r\n\r\n")
        return True

    async def main(server: Server) -> list[bytes]:
        pieces = []
        async with client(UnixTransport(str(sock)), read=2.0) as http, http.stream("GET", "/events") as resp:
            async for piece in resp.aiter_raw():
                pieces.append(piece)
                got.set()
        return pieces

    assert serve(sock, reply, main) == parts


def test_an_informational_response_is_passed_over(sock: Path) -> None:
    async def main(server: Server) -> bytes:
        async with client(UnixTransport(str(sock))) as http:
            resp = await http.post("/v1/files", content=b"x")
        assert resp.status_code == 200
        return resp.content

    assert serve(sock, answering(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"done")), main) == b"done"


def test_a_streamed_request_body_arrives_whole(sock: Path) -> None:
    pieces = [b"%d," % i for i in range(200)] + [b"x" * 2**20]

    async def body() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    async def main(server: Server) -> None:
        async with client(UnixTransport(str(sock))) as http:
            assert (await http.post("/v1/files", content=body())).status_code == 200
            assert (await http.post("/v1/files", content=b"second")).status_code == 200
        assert server.bodies == [b"".join(pieces), b"second"]
        assert (b"transfer-encoding", b"chunked") in list(server.heads[0].headers)
        assert server.connections == 1

    serve(sock, answering(ok(b"")), main)


# --- connections kept, and dropped ----------------------------------------------------------------

def test_a_connection_is_kept_alive_between_requests_and_closed_with_the_transport(sock: Path) -> None:
    async def main(server: Server) -> None:
        transport = UnixTransport(str(sock))
        async with client(transport) as http:
            assert (await http.get("/a")).content == b"hi"
            assert (await http.get("/b")).content == b"hi"
            assert server.connections == 1 and idle(transport) == 1
        await until(lambda: server.hung_up == 1)
        assert idle(transport) == 0
        with pytest.raises(RuntimeError):  # closed: nothing more is sent
            await transport.handle_async_request(httpx.Request("GET", "http://agent/c"))

    serve(sock, answering(ok(b"hi")), main)


def test_a_connection_the_peer_closed_while_idle_is_not_reused(sock: Path) -> None:
    """The agent closes every connection before a checkpoint."""
    async def reply(n: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(ok(b"%d" % n))
        return n > 0  # hangs up after its first answer

    async def main(server: Server) -> None:
        async with client(UnixTransport(str(sock))) as http:
            assert (await http.get("/a")).content == b"0"
            await asyncio.sleep(0.05)  # the hang-up reaches the client
            assert (await http.get("/b")).content == b"1"
        assert server.connections == 2

    serve(sock, reply, main)


@pytest.mark.parametrize("later", [False, True], ids=["with-the-answer", "while-idle"])
def test_a_connection_the_peer_sent_more_on_is_not_reused(sock: Path, later: bool) -> None:
    """Bytes past an answer would be taken for the next request's answer."""
    smuggled = ok(b"smuggled")

    async def reply(n: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(ok(b"%d" % n) + (b"" if later or n else smuggled))
        if later and n == 0:
            await writer.drain()
            await asyncio.sleep(0.02)
            writer.write(smuggled)
        return True

    async def main(server: Server) -> None:
        async with client(UnixTransport(str(sock))) as http:
            assert (await http.get("/a")).content == b"0"
            await asyncio.sleep(0.1)
            assert (await http.get("/b")).content == b"1"
        assert server.connections == 2

    serve(sock, reply, main)


def test_concurrent_requests_each_have_a_connection_and_idle_ones_are_capped(sock: Path) -> None:
    all_in = asyncio.Event()

    async def reply(n: int, writer: asyncio.StreamWriter) -> bool:
        if n == 2:
            all_in.set()
        await all_in.wait()  # no answer until all three are in: none waits for another's connection
        writer.write(ok(b"%d" % n))
        return True

    async def main(server: Server) -> None:
        transport = UnixTransport(str(sock), max_idle=2)
        async with client(transport) as http:
            answers = await asyncio.gather(*(http.get(f"/{i}") for i in range(3)))
            assert sorted(a.content for a in answers) == [b"0", b"1", b"2"]
            assert server.connections == 3 and idle(transport) == 2
            await until(lambda: server.hung_up == 1)
            await http.get("/3")
            await http.get("/4")
            assert server.connections == 3

    serve(sock, reply, main)


@pytest.mark.parametrize("read", [0, 1], ids=["unread", "read-in-part"])
def test_an_abandoned_reply_closes_its_connection(sock: Path, read: int) -> None:
    async def reply(n: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"a") + chunk(b"b") + b"0\r\n\r\n")
        return True

    async def main(server: Server) -> None:
        transport = UnixTransport(str(sock))
        async with client(transport) as http:
            async with http.stream("GET", "/big") as resp:
                pieces = resp.aiter_raw()
                for _ in range(read):
                    await anext(pieces)
            await until(lambda: server.hung_up == 1)
            assert idle(transport) == 0
            assert (await http.get("/again")).content == b"ab"
            assert server.connections == 2

    serve(sock, reply, main)


# --- hostile or broken peers ----------------------------------------------------------------------

@pytest.mark.parametrize("answer", [b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n12345",
                                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\n12345\r\n"])
def test_a_reply_cut_short_is_an_error_and_its_connection_is_dropped(sock: Path, answer: bytes) -> None:
    async def main(server: Server) -> None:
        transport = UnixTransport(str(sock))
        async with client(transport) as http:
            async with http.stream("GET", "/") as resp:
                with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
                    async for _ in resp.aiter_raw():
                        pass
            assert idle(transport) == 0
            with pytest.raises(httpx.RemoteProtocolError):
                await http.get("/")  # read whole

    serve(sock, answering(answer, close=True), main)


@pytest.mark.parametrize("answer", [b"HTTP/1.1 abc\r\n\r\n", b"garbage\r\n\r\n", b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
                                    b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n", b""])
def test_a_malformed_or_missing_head_is_a_protocol_error(sock: Path, answer: bytes) -> None:
    async def main(server: Server) -> None:
        async with client(UnixTransport(str(sock))) as http:
            with pytest.raises(httpx.RemoteProtocolError):
                await http.get("/")

    serve(sock, answering(answer, close=True), main)


def test_a_head_too_long_is_refused_without_reading_on(sock: Path) -> None:
    async def reply(n: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nx: " + b"a" * 2**20)  # and never ends it
        return True

    async def main(server: Server) -> None:
        async with client(UnixTransport(str(sock))) as http:
            with pytest.raises(httpx.RemoteProtocolError):
                await http.get("/")
        await until(lambda: server.hung_up == 1)

    serve(sock, reply, main)


@pytest.mark.parametrize("head", [b"", b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nab"], ids=["no-head", "no-body"])
def test_a_silent_peer_is_a_read_timeout(sock: Path, head: bytes) -> None:
    async def reply(n: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(head)
        await writer.drain()
        await asyncio.sleep(30)
        return True

    async def main(server: Server) -> None:
        started = time.monotonic()
        async with client(UnixTransport(str(sock)), read=0.2) as http:
            with pytest.raises(httpx.ReadTimeout):
                await http.get("/")
        assert time.monotonic() - started < 2

    serve(sock, reply, main)


@pytest.mark.parametrize("drip", [b"x-drip: 1\r\n", b"HTTP/1.1 102 Processing\r\n\r\n"], ids=["header", "1xx"])
def test_a_head_dripped_within_each_read_timeout_is_still_a_read_timeout(sock: Path, drip: bytes) -> None:
    async def reply(n: int, writer: asyncio.StreamWriter) -> bool:
        if drip.startswith(b"x-"):
            writer.write(b"HTTP/1.1 200 OK\r\n")
        for _ in range(300):  # a piece every 0.1 s: each read comes well within the 0.3 s read timeout
            writer.write(drip)
            await writer.drain()
            await asyncio.sleep(0.1)
        return True

    async def main(server: Server) -> None:
        async with client(UnixTransport(str(sock)), read=0.3) as http:
            with pytest.raises(httpx.ReadTimeout):
                await asyncio.wait_for(http.get("/"), 10)  # (without the whole head's bound: past 10 s, a failure)

    serve(sock, reply, main)


def test_more_informational_answers_than_any_peer_sends_are_a_protocol_error(sock: Path) -> None:
    async def main(server: Server) -> None:
        async with client(UnixTransport(str(sock))) as http:
            with pytest.raises(httpx.RemoteProtocolError):
                await http.get("/")

    serve(sock, answering(b"HTTP/1.1 102 Processing\r\n\r\n" * 9 + ok(b"late")), main)


def test_a_missing_socket_is_a_connect_error(sock: Path) -> None:
    async def main() -> None:
        async with client(UnixTransport(str(sock))) as http:
            with pytest.raises(httpx.ConnectError):
                await http.get("/")

    asyncio.run(main())


@pytest.mark.parametrize("kept", [False, True], ids=["new-connection", "kept-connection"])
def test_a_request_is_never_sent_twice(sock: Path, kept: bool) -> None:
    """A peer that hangs up once it has a request may have run it: the error is the caller's."""
    async def reply(n: int, writer: asyncio.StreamWriter) -> bool:
        if kept and n == 0:
            writer.write(ok(b""))
            return True
        return False  # hangs up, no answer

    async def main(server: Server) -> None:
        async with client(UnixTransport(str(sock))) as http:
            if kept:
                await http.get("/first")
            with pytest.raises(httpx.RemoteProtocolError):
                await http.post("/v1/exec", content=b'{"cmd": "once"}')
        assert [h.target for h in server.heads] == [b"/first", b"/v1/exec"][not kept:]
        assert server.connections == 1

    serve(sock, reply, main)


# --- limits and early answers ---------------------------------------------------------------------

def test_connections_to_one_peer_are_capped_and_each_gives_its_place_back(sock: Path) -> None:
    async def main(server: Server) -> None:
        async with client(UnixTransport(str(sock), max_connections=1)) as http:
            async with http.stream("GET", "/") as held:  # its connection is in use until it is closed
                with pytest.raises(httpx.PoolTimeout):
                    await http.get("/", timeout=httpx.Timeout(5.0, pool=0.2))
            assert held.is_closed
            assert (await http.get("/")).content == b"x"  # an abandoned reply gave its place back
            async with http.stream("GET", "/") as read:
                assert await read.aread() == b"x"
            assert (await http.get("/")).content == b"x"  # so did one read to its end

    serve(sock, answering(ok(b"x")), main)


def test_a_reply_cut_short_gives_its_place_back(sock: Path) -> None:
    async def main(server: Server) -> None:
        async with client(UnixTransport(str(sock), max_connections=1)) as http:
            for _ in range(3):  # a leaked place would make the second one wait for ever
                with pytest.raises(httpx.RemoteProtocolError):
                    await http.get("/", timeout=httpx.Timeout(5.0, pool=0.5))

    serve(sock, answering(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n12345", close=True), main)

