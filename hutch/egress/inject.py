"""Secrets swapped in at egress: the HTTP/1.1 relay inside a TLS connection the proxy terminates.

A box holding a secret sees only a stand-in token in its environment. When it opens a tunnel to
one of that secret's allowed hosts, the proxy terminates the TLS (the box trusts hutch's CA), opens
its own verified TLS to the real host, and relays requests one by one with h11. In each request,
the header the secret's auth scheme names, holding the stand-in in the scheme's format (say
`x-api-key: <stand-in>` or `authorization: Bearer <stand-in>`), gets the real value. Anything
else passes unchanged, so a stand-in sent anywhere else, or in another header, is useless.

The request must be for the tunnel's own host: an origin-form target and a Host header naming
it, so a request cannot carry the real value to another site served from the same address. The
real value is read when each request is made (a rotation applies at once; a deleted secret is no
longer swapped), and every swap is reported with the response's status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import h11

from hutch.egress.rules import domain_matches

MAX_HEAD = 64 * 1024
READ = 64 * 1024
IDLE_TIMEOUT = 300.0  # a kept-alive connection with no request for this long is closed


@dataclass(frozen=True)
class Injection:
    """One secret bound to one box: where its stand-in may be swapped for its value."""

    secret_id: str
    secret_name: str
    env: str
    standin: str
    header: str  # lower case
    format: str  # holds "{value}" once
    hosts: tuple[str, ...]  # "api.example.com" or "*.example.com"

    def allows(self, host: str) -> bool:
        return any(domain_matches(pattern, host) for pattern in self.hosts)

    def render(self, value: str) -> bytes:
        return self.format.replace("{value}", value).encode("latin-1")


@dataclass
class Swap:
    """A request in which a secret was swapped in, for the audit log."""

    injection: Injection
    method: str
    path: str
    status: int | None = None


Reveal = Callable[[str], "str | None"]  # a secret id -> its current value (None: it is gone)


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def swap_headers(headers: list[tuple[bytes, bytes]], injections: list[Injection],
                 reveal: Reveal) -> tuple[list[tuple[bytes, bytes]], list[Injection], list[tuple[bytes, bytes]]]:
    """The headers with every stand-in in its scheme's place replaced, the injections used, and
    (real, stand-in) pairs to take back out of the response's headers."""
    out = list(headers)
    used: list[Injection] = []
    pairs: list[tuple[bytes, bytes]] = []
    for inj in injections:
        wanted = inj.render(inj.standin).lower()
        for i, (name, value) in enumerate(out):
            if name == inj.header.encode() and value.strip().lower() == wanted:
                real = reveal(inj.secret_id)
                if real is None:
                    continue  # deleted since: the stand-in goes on as it is
                out[i] = (name, inj.render(real))
                used.append(inj)
                pairs.append((real.encode("latin-1"), inj.standin.encode()))
    return out, used, pairs


async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader, timeout: float) -> object:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        data = await asyncio.wait_for(reader.read(READ), timeout)
        conn.receive_data(data)


async def _send(conn: h11.Connection, writer: asyncio.StreamWriter, event: h11.Event) -> None:
    data = conn.send(event)
    if data:
        writer.write(data)
        await writer.drain()


def _check_target(request: h11.Request, host: str, port: int) -> None:
    target = request.target.decode("latin-1")
    if not target.startswith("/"):
        raise _Refused(400, "inside a tunnel, a request names only a path")
    if len(request.target) + sum(len(k) + len(v) + 4 for k, v in request.headers) > MAX_HEAD:
        raise _Refused(431, f"request heads are limited to {MAX_HEAD} bytes")  # h11 may have parsed more
    names = {k for k, _ in request.headers}
    if b"transfer-encoding" in names and b"content-length" in names:
        # two framings: a server that reads the other one would take the next request (and the
        # secret in it) as this one's body
        raise _Refused(400, "a request has Content-Length or Transfer-Encoding, not both")
    names = [v.decode("latin-1").lower() for k, v in request.headers if k == b"host"]
    allowed = {host, f"{host}:{port}"}
    if len(names) != 1 or names[0] not in allowed:
        raise _Refused(403, f"the Host header must name the tunnel's host {host}")


@dataclass
class _Exchange:
    status: int | None = None  # the upstream's status, once its head has come


async def relay(box_reader: asyncio.StreamReader, box_writer: asyncio.StreamWriter,
                up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter, host: str, port: int,
                injections: list[Injection], reveal: Reveal, swapped: Callable[[Swap], None],
                counted: Callable[[int, int], None]) -> None:
    """Relay requests from the box to the host until either side closes. `counted(out, in)`
    is told the bytes of each message body."""
    box = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    up = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    while True:
        try:
            event = await _next_event(box, box_reader, IDLE_TIMEOUT)
        except (h11.RemoteProtocolError, TimeoutError, OSError):
            return
        if not isinstance(event, h11.Request):
            return  # ConnectionClosed, or something h11 would not take
        try:
            _check_target(event, host, port)
        except _Refused as e:
            await _refuse(box, box_writer, e)
            return
        headers, used, pairs = swap_headers(list(event.headers), injections, reveal)
        if box.they_are_waiting_for_100_continue:  # answered here: the body is read before the upstream answers
            await _send(box, box_writer, h11.InformationalResponse(status_code=100, headers=[]))
        headers = [(k, v) for k, v in headers if k != b"expect"]
        path = event.target.decode("latin-1").split("?", 1)[0][:300]
        exchange = _Exchange()
        try:
            await _send(up, up_writer, h11.Request(method=event.method, target=event.target, headers=headers))
            while not isinstance(body := await _next_event(box, box_reader, IDLE_TIMEOUT), h11.EndOfMessage):
                if not isinstance(body, h11.Data):
                    return  # the box went away mid-request
                counted(len(body.data), 0)
                await _send(up, up_writer, body)
            await _send(up, up_writer, h11.EndOfMessage())
            await _relay_response(up, up_reader, box, box_writer, pairs, counted, exchange)
        except (h11.ProtocolError, TimeoutError, OSError, asyncio.IncompleteReadError) as e:  # ssl errors too
            if exchange.status is None and box.our_state is h11.SEND_RESPONSE:
                await _refuse(box, box_writer, _Refused(502, f"no good answer from {host}: {e}"))
            return
        finally:
            for inj in used:
                swapped(Swap(inj, event.method.decode("latin-1"), path, exchange.status))
        if box.our_state is h11.SWITCHED_PROTOCOL:
            await _splice(box_reader, box_writer, box.trailing_data[0], up_reader, up_writer, up.trailing_data[0],
                          counted)
            return
        if not (box.our_state is box.their_state is up.our_state is up.their_state is h11.DONE):
            return  # either side asked to close
        box.start_next_cycle()
        up.start_next_cycle()


async def _relay_response(up: h11.Connection, up_reader: asyncio.StreamReader, box: h11.Connection,
                          box_writer: asyncio.StreamWriter, pairs: list[tuple[bytes, bytes]],
                          counted: Callable[[int, int], None], exchange: _Exchange) -> None:
    while True:
        event = await _next_event(up, up_reader, IDLE_TIMEOUT)
        if isinstance(event, h11.InformationalResponse):
            if event.status_code == 101:  # a protocol switch (WebSocket): relayed as bytes from here
                exchange.status = 101
                await _send(box, box_writer, h11.InformationalResponse(status_code=101,
                                                                       headers=_scrub(event.headers, pairs)))
                return
            continue  # 100 Continue: the box was answered already
        if not isinstance(event, h11.Response):
            raise h11.RemoteProtocolError("no response")
        exchange.status = event.status_code
        await _send(box, box_writer, h11.Response(status_code=event.status_code, reason=event.reason,
                                                  headers=_scrub(event.headers, pairs)))
        break
    while not isinstance(body := await _next_event(up, up_reader, IDLE_TIMEOUT), h11.EndOfMessage):
        if not isinstance(body, h11.Data):
            raise h11.RemoteProtocolError("the response ended early")
        counted(0, len(body.data))
        await _send(box, box_writer, body)
    await _send(box, box_writer, h11.EndOfMessage())


def _scrub(headers: Iterable[tuple[bytes, bytes]], pairs: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """A real value a server echoes in a response header goes back to the box as the stand-in."""
    out = []
    for name, value in headers:
        for real, standin in pairs:
            value = value.replace(real, standin)
        out.append((name, value))
    return out


async def _splice(box_reader: asyncio.StreamReader, box_writer: asyncio.StreamWriter, box_left: bytes,
                  up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter, up_left: bytes,
                  counted: Callable[[int, int], None]) -> None:
    """After a protocol switch: bytes both ways, as they are, until both ends are done."""

    async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter, left: bytes, outward: bool) -> None:
        try:
            data = left
            while True:
                if data:
                    counted(len(data), 0) if outward else counted(0, len(data))
                    dst.write(data)
                    await dst.drain()
                data = await src.read(READ)
                if not data:
                    break
            if dst.can_write_eof():
                dst.write_eof()
        except (ConnectionError, OSError):
            dst.close()

    await asyncio.gather(copy(box_reader, up_writer, box_left, True), copy(up_reader, box_writer, up_left, False))


async def _refuse(conn: h11.Connection, writer: asyncio.StreamWriter, refused: _Refused) -> None:
    body = f"hutch egress: {refused}\n".encode()
    try:
        await _send(conn, writer, h11.Response(status_code=refused.status, headers=[
            (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"), (b"x-hutch-egress", b"secret_host_check")]))
        await _send(conn, writer, h11.Data(data=body))
        await _send(conn, writer, h11.EndOfMessage())
    except (h11.ProtocolError, ConnectionError, OSError):
        pass
