"""HTTP/1.1 over a Unix socket for the agent's channel: h11 on asyncio streams, keeping connections alive.

httpx's own transport (httpcore's pool on anyio streams, cancel scopes, sniffio) cost ~1.2 ms more
server CPU per command on the channel than this one, under the same httpx client. The peer is hostile: heads are capped,
bodies come in bounded pieces, every read and write is bounded by the request's timeouts, and an
answer's whole head by its read timeout.
"""

from __future__ import annotations

import asyncio
import select
import time
from collections.abc import AsyncIterator

import h11
import httpx

READ_SIZE = 64 * 2**10
MAX_HEAD = 64 * 2**10  # h11's cap on an incomplete head (or chunk header) held in its buffer
MAX_CONNECTIONS = 100  # open to one box at once (httpx's default); past it a request waits its pool timeout
IDLE_SECONDS = 5.0  # a kept connection unused this long is closed (httpx's default)
MAX_INFORMATIONAL = 8  # 1xx answers before a request's final one


class _Conn:
    """One socket and its h11 state."""

    __slots__ = ("h11", "idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self.idle_since = 0.0

    def close(self) -> None:
        # abort, not close: a peer that stopped reading must not keep the socket open with our unsent bytes
        self.writer.transport.abort()

    def stale(self) -> bool:
        """Whether the peer closed, or sent something unasked, while this connection was idle (the
        agent closes all its connections before a checkpoint). StreamReader does not say publicly
        how much it holds: its `_buffer` does."""
        if (self.writer.transport.is_closing() or self.reader.at_eof()
                or bool(getattr(self.reader, "_buffer", b""))
                or time.monotonic() - self.idle_since > IDLE_SECONDS):
            return True
        # what the loop has not read yet: a hang-up, or bytes, waiting on the socket itself
        poll = select.poll()
        poll.register(self.writer.get_extra_info("socket").fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
        return bool(poll.poll(0))

    async def write(self, data: bytes, timeout: float | None, request: httpx.Request) -> None:
        try:
            if data:
                self.writer.write(data)
            async with asyncio.timeout(timeout):
                await self.writer.drain()
        except TimeoutError:  # before OSError: it is one
            raise httpx.WriteTimeout("timed out writing to the socket", request=request) from None
        except OSError as e:
            raise httpx.WriteError(f"could not write to the socket: {e}", request=request) from None

    async def next_event(self, timeout: float | None, request: httpx.Request) -> h11.Event:
        """The peer's next event, reading as needed, each read bounded by `timeout`."""
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as e:
                raise httpx.RemoteProtocolError(str(e), request=request) from None
            if isinstance(event, h11.ConnectionClosed):
                raise httpx.RemoteProtocolError("the peer closed the connection", request=request)
            if isinstance(event, h11.Event):
                return event
            if event is h11.PAUSED:  # a 101 to a request that asked for no upgrade
                raise httpx.RemoteProtocolError("the peer switched protocols", request=request)
            try:
                async with asyncio.timeout(timeout):
                    data = await self.reader.read(READ_SIZE)
            except TimeoutError:
                raise httpx.ReadTimeout("timed out reading from the socket", request=request) from None
            except OSError as e:
                raise httpx.ReadError(f"could not read from the socket: {e}", request=request) from None
            self.h11.receive_data(data)  # b"" is the end of the stream: h11 says if that was too soon


class UnixTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 to the socket at `path`; at most `max_idle` idle connections are kept for reuse.
    Concurrent requests each have their own connection."""

    def __init__(self, path: str, max_idle: int = 8, max_connections: int = MAX_CONNECTIONS) -> None:
        self.path, self.max_idle = path, max_idle
        self._idle: list[_Conn] = []
        self._active: set[_Conn] = set()  # handed out: aborted by aclose, as httpcore did
        self._slots = asyncio.Semaphore(max_connections)
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the transport is closed")
        timeout = request.extensions.get("timeout", {})
        try:
            async with asyncio.timeout(timeout.get("pool")):
                await self._slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout("every connection to the socket is in use", request=request) from None
        try:
            conn = await self._connection(timeout.get("connect"), request)
        except BaseException:
            self._slots.release()
            raise
        self._active.add(conn)
        try:
            # A peer that answers before it has read the body must read the rest first (the agent
            # does): one that hangs up on unread bytes resets the socket, and its answer is lost.
            await self._send(conn, request, timeout.get("write"))
            event = await self._head(conn, timeout.get("read"), request)
        except BaseException:
            self._done(conn, reuse=False)
            raise
        return httpx.Response(
            event.status_code, headers=event.headers.raw_items(),
            stream=_Body(self, conn, timeout.get("read"), request),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": event.reason})

    @staticmethod
    async def _head(conn: _Conn, timeout: float | None, request: httpx.Request) -> h11.Response:
        """The answer's head: within `timeout` in all (a peer dripping it, or sending one
        informational answer after another, is cut off as one that sent nothing), after at most
        MAX_INFORMATIONAL 1xx answers."""
        try:
            async with asyncio.timeout(timeout):
                for _ in range(MAX_INFORMATIONAL + 1):
                    event = await conn.next_event(None, request)
                    if isinstance(event, h11.Response):
                        return event
                    if not isinstance(event, h11.InformationalResponse):
                        raise httpx.RemoteProtocolError("the peer sent something other than a response", request=request)
        except TimeoutError:
            raise httpx.ReadTimeout("timed out reading the answer's head from the socket", request=request) from None
        raise httpx.RemoteProtocolError(f"the peer sent more than {MAX_INFORMATIONAL} informational answers",
                                        request=request)

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in [*idle, *self._active]:
            conn.close()

    async def _connection(self, timeout: float | None, request: httpx.Request) -> _Conn:
        while self._idle:
            conn = self._idle.pop()  # the most recently used: the likeliest to be alive
            if not conn.stale():
                return conn
            conn.close()
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(self.path)
        except TimeoutError:
            raise httpx.ConnectTimeout("timed out connecting to the socket", request=request) from None
        except OSError as e:  # FileNotFoundError too
            raise httpx.ConnectError(f"could not connect to {self.path}: {e}", request=request) from None
        return _Conn(reader, writer)

    @staticmethod
    async def _send(conn: _Conn, request: httpx.Request, timeout: float | None) -> None:
        # No retry anywhere: once a byte of a request is sent it may have run (POST /v1/exec must not run twice).
        try:
            head = conn.h11.send(h11.Request(method=request.method, target=request.url.raw_path,
                                             headers=request.headers.raw))
            assert head is not None
            # The head goes out with the body's first piece: each write wakes the box's sentry.
            pending = head
            assert isinstance(request.stream, httpx.AsyncByteStream)
            async for chunk in request.stream:
                if chunk:
                    await conn.write(pending + (conn.h11.send(h11.Data(data=chunk)) or b""), timeout, request)
                    pending = b""
            await conn.write(pending + (conn.h11.send(h11.EndOfMessage()) or b""), timeout, request)
        except h11.LocalProtocolError as e:  # a body longer or shorter than its content-length, a bad header
            raise httpx.LocalProtocolError(str(e), request=request) from None

    def _release(self, conn: _Conn) -> None:
        """Back to the pool if its exchange ended cleanly (h11 has both sides DONE only once the
        answer was read to its end) and there is room; else closed."""
        # bytes past the response, already in h11's buffer, would be read as the next request's answer
        self._done(conn, reuse=conn.h11.our_state is h11.DONE and conn.h11.their_state is h11.DONE
                   and not conn.h11.trailing_data[0])

    def _done(self, conn: _Conn, reuse: bool) -> None:
        """A request is over with its connection: kept if it can be and there is room, else closed."""
        self._active.discard(conn)
        self._slots.release()
        if reuse and not self._closed and len(self._idle) < self.max_idle:
            conn.h11.start_next_cycle()
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()


class _Body(httpx.AsyncByteStream):
    """A response's body as it comes; closing it returns its connection to the pool if it was read to its end."""

    def __init__(self, transport: UnixTransport, conn: _Conn, timeout: float | None, request: httpx.Request) -> None:
        self._transport, self._timeout, self._request = transport, timeout, request
        self._conn: _Conn | None = conn

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            raise httpx.StreamClosed()
        try:
            while True:
                event = await conn.next_event(self._timeout, self._request)
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    return
                else:
                    raise httpx.RemoteProtocolError("the peer sent something other than a body", request=self._request)
        except BaseException:
            # a failed read, or the reader gone midway (GeneratorExit, cancellation): the socket is done for
            self._conn = None
            self._transport._done(conn, reuse=False)
            raise

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._transport._release(conn)
