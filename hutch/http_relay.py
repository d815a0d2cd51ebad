"""An HTTP/1.1 relay that reads every request before it goes on: the one used where hutch stands
in the middle of HTTP (the egress proxy swapping secrets in, the preview proxy checking access).

Both sides are parsed with h11, so framing is never guessed: a request is read, handed to the
caller's `prepare` (which may refuse it, answer it here, or say how it goes on), sent upstream,
and its answer streamed back (chunked bodies and server-sent events as they come). Keep-alive
goes request by request, each one prepared anew; a protocol switch (WebSocket) turns the
connection into plain bytes both ways.

The client is hostile: a request with two framings or a head over MAX_HEAD is refused, and
anything h11 will not parse ends the connection. Every head must arrive whole within the head
timeout of its first byte (the first one, of the connection's opening); with a stall timeout, a
write that waits that long for the other side to read, or an upgraded connection that passes no
byte either way that long, ends the connection too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import h11

log = logging.getLogger("hutch.http_relay")

MAX_HEAD = 64 * 1024
READ = 64 * 1024
IDLE_TIMEOUT = 300.0  # a kept-alive connection with no request for this long is closed
HEAD_TIMEOUT = 30.0  # a whole request head, from the connection's opening or the head's first byte: no slow drip

Headers = list[tuple[bytes, bytes]]
Upstream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Answer(Exception):
    """Answer the request here instead of sending it on (a refusal, a redirect); the connection
    then closes."""

    def __init__(self, status: int, message: str = "", headers: Headers | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.headers, self.reason = status, message, headers or [], reason


@dataclass
class Forward:
    """How a prepared request goes on."""

    headers: Headers
    scrub: list[tuple[bytes, bytes]] = field(default_factory=list)  # (found, put instead) in the answer's headers
    answered: Callable[[int | None], None] | None = None  # told the upstream's status (None: no answer)
    answer_headers: Callable[[Headers], Headers] | None = None  # rewrites the answer's headers, after scrub


Prepare = Callable[[h11.Request], Awaitable[Forward]]
Counted = Callable[[int, int], None]  # body bytes out (to upstream), in (to the client)


def check_request(request: h11.Request) -> None:
    """What every relayed request must be: origin-form, one framing, a bounded head."""
    if not request.target.startswith(b"/"):
        raise Answer(400, "a request here names only a path")
    if len(request.target) + sum(len(k) + len(v) + 4 for k, v in request.headers) > MAX_HEAD:
        raise Answer(431, f"request heads are limited to {MAX_HEAD} bytes")  # h11 may have parsed more
    names = {k for k, _ in request.headers}
    if b"transfer-encoding" in names and b"content-length" in names:
        # two framings: a server that reads the other one would take the next request (and
        # whatever it carries) as this one's body
        raise Answer(400, "a request has Content-Length or Transfer-Encoding, not both")


def host_of(request: h11.Request) -> str | None:
    """The request's one Host header, in lower case (None if it has none or several)."""
    hosts = [v for k, v in request.headers if k == b"host"]
    return hosts[0].decode("latin-1").lower() if len(hosts) == 1 else None


async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader, timeout: float) -> object:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        async with asyncio.timeout(timeout):  # a timer, not a task as wait_for makes
            data = await reader.read(READ)
        conn.receive_data(data)


async def _next_request(conn: h11.Connection, reader: asyncio.StreamReader, first: bool, head_timeout: float,
                        idle_timeout: float) -> object:
    """The next request's head, under one deadline. The first must be whole within head_timeout
    of the connection's opening; a later one may take idle_timeout to begin, then head_timeout
    from its first byte to be whole."""
    waiting = not first and conn.trailing_data == (b"", False)  # nothing of the next request yet
    async with asyncio.timeout(idle_timeout if waiting else head_timeout) as deadline:
        while (event := conn.next_event()) is h11.NEED_DATA:
            conn.receive_data(await reader.read(READ))
            if waiting:
                waiting = False
                deadline.reschedule(asyncio.get_running_loop().time() + head_timeout)
        return event


async def _drain(writer: asyncio.StreamWriter, stall: float | None) -> None:
    """drain(), for at most `stall` seconds if given: a reader that stops reading must not hold
    the relay for ever. Timed only when the write buffer is past its high mark (only then does
    drain wait), so the common case costs no timer."""
    transport = writer.transport
    if stall is not None and transport.get_write_buffer_size() > transport.get_write_buffer_limits()[1]:
        await asyncio.wait_for(writer.drain(), stall)
    else:
        await writer.drain()


async def _send(conn: h11.Connection, writer: asyncio.StreamWriter, event: h11.Event,
                stall: float | None = None) -> None:
    data = conn.send(event)
    if data:
        writer.write(data)
        await _drain(writer, stall)


@dataclass
class _Exchange:
    status: int | None = None  # the upstream's status, once its head has come


async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, prepare: Prepare,
                open_upstream: Callable[[], Awaitable[Upstream]], counted: Counted = lambda _o, _i: None,
                idle_timeout: float = IDLE_TIMEOUT, head_timeout: float = HEAD_TIMEOUT,
                stall_timeout: float | None = None) -> None:
    """Relay requests from a client until either side is done. The upstream is opened when the
    first request has been prepared (so a refused client never costs one); the caller closes
    both ends. `stall_timeout` bounds a blocked write and an upgraded connection's silence
    (None: no bound)."""
    client = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    up_conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    upstream: Upstream | None = None
    while True:
        try:  # one deadline for the whole head, not one per read
            request = await _next_request(client, reader, upstream is None, head_timeout, idle_timeout)
        except (h11.RemoteProtocolError, TimeoutError, OSError):
            return
        if not isinstance(request, h11.Request):
            return  # ConnectionClosed, or something h11 would not take
        try:
            check_request(request)
            forward = await prepare(request)
            if upstream is None:
                upstream = await open_upstream()
        except Answer as e:
            await answer(client, writer, e)
            return
        up_reader, up_writer = upstream
        stall = stall_timeout
        if client.they_are_waiting_for_100_continue:  # the body is read before the upstream answers
            await _send(client, writer, h11.InformationalResponse(status_code=100, headers=[]), stall)
        headers = [(k, v) for k, v in forward.headers if k != b"expect"]
        exchange = _Exchange()
        try:
            await _send(up_conn, up_writer, h11.Request(method=request.method, target=request.target, headers=headers),
                        stall)
            while not isinstance(body := await _next_event(client, reader, idle_timeout), h11.EndOfMessage):
                if not isinstance(body, h11.Data):
                    return  # the client went away mid-request
                counted(len(body.data), 0)
                await _send(up_conn, up_writer, body, stall)
            await _send(up_conn, up_writer, h11.EndOfMessage(), stall)
            await _relay_response(up_conn, up_reader, client, writer, forward, counted, exchange, idle_timeout, stall)
        except (h11.ProtocolError, TimeoutError, OSError, asyncio.IncompleteReadError) as e:  # ssl errors too
            # Never the exception's text: it can quote the request as sent upstream (a secret in it)
            log.info("relay ended: %s", type(e).__name__)
            if exchange.status is None and client.our_state is h11.SEND_RESPONSE:
                await answer(client, writer, Answer(502, "no good answer from upstream", reason="bad_gateway"))
            return
        finally:
            if forward.answered is not None:
                forward.answered(exchange.status)
        if client.our_state is h11.SWITCHED_PROTOCOL:
            await _splice(reader, writer, client.trailing_data[0], up_reader, up_writer, up_conn.trailing_data[0],
                          counted, stall_timeout)
            return
        if not (client.our_state is client.their_state is up_conn.our_state is up_conn.their_state is h11.DONE):
            return  # either side asked to close
        client.start_next_cycle()
        up_conn.start_next_cycle()


async def _relay_response(up: h11.Connection, up_reader: asyncio.StreamReader, client: h11.Connection,
                          writer: asyncio.StreamWriter, forward: Forward, counted: Counted,
                          exchange: _Exchange, idle_timeout: float, stall: float | None) -> None:
    while True:
        event = await _next_event(up, up_reader, idle_timeout)
        if isinstance(event, h11.InformationalResponse):
            if event.status_code == 101:  # a protocol switch: plain bytes from here
                exchange.status = 101
                await _send(client, writer, h11.InformationalResponse(status_code=101,
                                                                      headers=_answer_headers(event, forward)), stall)
                return
            continue  # 100 Continue: the client was answered already
        if not isinstance(event, h11.Response):
            raise h11.RemoteProtocolError("no response")
        exchange.status = event.status_code
        await _send(client, writer, h11.Response(status_code=event.status_code, reason=event.reason,
                                                 headers=_answer_headers(event, forward)), stall)
        break
    while not isinstance(body := await _next_event(up, up_reader, idle_timeout), h11.EndOfMessage):
        if not isinstance(body, h11.Data):
            raise h11.RemoteProtocolError("the response ended early")
        counted(0, len(body.data))
        await _send(client, writer, body, stall)
    await _send(client, writer, h11.EndOfMessage(), stall)


def _answer_headers(event: h11.Response | h11.InformationalResponse, forward: Forward) -> Headers:
    headers = _scrub(event.headers, forward.scrub)
    return forward.answer_headers(headers) if forward.answer_headers else headers


def _scrub(headers: Iterable[tuple[bytes, bytes]], pairs: list[tuple[bytes, bytes]]) -> Headers:
    out = []
    for name, value in headers:
        for found, instead in pairs:
            value = value.replace(found, instead)
        out.append((name, value))
    return out


async def _splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_left: bytes,
                  up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter, up_left: bytes,
                  counted: Counted, idle: float | None) -> None:
    """After a protocol switch: bytes both ways, as they are, until both ends are done, or (with
    `idle`) until no byte has moved either way for that long."""
    loop = asyncio.get_running_loop()
    moved = [loop.time()]

    async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter, data: bytes, outward: bool) -> None:
        try:
            while True:
                if data:
                    counted(len(data), 0) if outward else counted(0, len(data))
                    dst.write(data)
                    await dst.drain()
                    moved[0] = loop.time()
                data = await src.read(READ)
                moved[0] = loop.time()
                if not data:
                    break
            if dst.can_write_eof():
                dst.write_eof()
            else:  # TLS cannot half-close: the other side learns of the end by the close
                dst.close()
        except (ConnectionError, OSError):
            dst.close()

    copies = asyncio.gather(copy(reader, up_writer, client_left, True), copy(up_reader, writer, up_left, False))
    if idle is None:
        await copies
        return
    try:
        while not copies.done() and (left := moved[0] + idle - loop.time()) > 0:
            await asyncio.wait([copies], timeout=left)
    finally:
        if not copies.done():
            copies.cancel()  # idle (or this task cancelled): the caller closes both ends
    if copies.done() and not copies.cancelled():
        copies.result()


async def answer(conn: h11.Connection, writer: asyncio.StreamWriter, e: Answer) -> None:
    """Answer here, and close."""
    body = f"hutch: {e.message}\n".encode() if e.message else b""
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close"), *e.headers]
    with contextlib.suppress(h11.ProtocolError, ConnectionError, OSError):
        await _send(conn, writer, h11.Response(status_code=e.status, headers=headers))
        await _send(conn, writer, h11.Data(data=body))
        await _send(conn, writer, h11.EndOfMessage())
