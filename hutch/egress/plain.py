"""Plain HTTP through the egress proxy: one request per connection, enforced here, whatever the
upstream does with `Connection: close`.

The request goes upstream framed anew by h11 (its Content-Length, or chunked), so the upstream
reads exactly the one request the proxy checked, ending where the proxy says it ends; nothing the
box sends after it is read. The answer comes back byte for byte, and the connection closes at its
end, which h11 finds: a second request on the connection, to the same host or another, never
reaches any upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import h11

CHUNK = 64 * 1024
MAX_HEAD = 64 * 1024
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "te",
              "trailer", "upgrade"}

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Moved = Callable[[int, int], None]  # bytes out (to the upstream), in (to the box)


def request(method: str, path: str, headers: dict[str, str], host: str, port: int) -> h11.Request:
    """What goes upstream: the box's headers but the hop-by-hop ones, its Host (or the URL's), and
    `Connection: close`. ValueError for what h11 would not send (a bad length or value), and for
    two framings, which an upstream could read another way than the proxy."""
    if "transfer-encoding" in headers and "content-length" in headers:
        raise ValueError("a request has Content-Length or Transfer-Encoding, not both")
    fields = [("Host", headers.get("host") or (host if port == 80 else f"{host}:{port}"))]
    fields += [(name, value) for name, value in headers.items() if name not in HOP_BY_HOP and name != "host"]
    fields.append(("Connection", "close"))
    try:
        return h11.Request(method=method.encode(), target=path.encode("latin-1"),
                           headers=[(k.encode("latin-1"), v.encode("latin-1")) for k, v in fields])
    except h11.LocalProtocolError as e:
        raise ValueError(str(e)) from None


async def exchange(box: Streams, upstream: Streams, req: h11.Request, moved: Moved) -> None:
    """Send `req` and the box's body upstream, relay the answer back, and stop."""
    up = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    head = up.send(req) or b""
    upstream[1].write(head)
    moved(len(head), 0)
    if not any(name in (b"content-length", b"transfer-encoding") for name, _ in req.headers):
        up.send(h11.EndOfMessage())  # no body: the common case, without a parser for it or a task
        await _answer(up, upstream[0], box[1], moved, req.method == b"HEAD")
        return
    body = h11.Connection(h11.SERVER)
    body.receive_data(head)  # the box's body is read with the framing of the request as it goes on
    body.next_event()
    sending = asyncio.ensure_future(_send_body(body, box[0], up, upstream[1], moved))
    answering = asyncio.ensure_future(_answer(up, upstream[0], box[1], moved, req.method == b"HEAD"))
    try:
        await asyncio.wait((sending, answering), return_when=asyncio.FIRST_COMPLETED)
        if answering.done() or sending.result():  # an early answer ends it; a body cut short too
            await answering
    finally:
        for task in (sending, answering):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(sending, answering, return_exceptions=True)


async def _send_body(body: h11.Connection, reader: asyncio.StreamReader, up: h11.Connection,
                     writer: asyncio.StreamWriter, moved: Moved) -> bool:
    """The box's body, re-framed: True once it has all gone, False if the box broke it off."""
    try:
        while True:
            event = body.next_event()
            if event is h11.NEED_DATA:
                body.receive_data(await reader.read(CHUNK))
                continue
            if not isinstance(event, h11.Data | h11.EndOfMessage):
                return False
            data = up.send(event) or b""
            writer.write(data)
            moved(len(data), 0)
            await writer.drain()
            if isinstance(event, h11.EndOfMessage):
                return True
    except (h11.ProtocolError, ConnectionError, OSError):
        return False


async def _answer(up: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  moved: Moved, head: bool) -> None:
    """The upstream's bytes as they come, up to the end of its answer."""
    framing = _Framing(up, head)
    while True:
        data = await reader.read(CHUNK)
        end = framing.end(data)
        if end is not None and end < len(data):
            data = data[:end]
        if data:
            writer.write(data)
            moved(0, len(data))
            await writer.drain()
        if end is not None or not data:
            return


class _Framing:
    """Where the upstream's answer ends, in its bytes as they come: h11 reads the head (and a
    chunked body); a body of known length is counted, not parsed; one that ends with the
    connection, and bytes h11 cannot frame, go on until the upstream closes."""

    def __init__(self, up: h11.Connection, head: bool) -> None:
        self.conn: h11.Connection | None = up
        self.head = head  # the request was a HEAD: no answer to it has a body
        self.left: int | None = None  # a known length's bytes still to come

    def end(self, data: bytes) -> int | None:
        """Where in `data` (b"": the upstream closed) the answer ended, if it did."""
        if self.left is not None:
            if len(data) >= self.left:
                return self.left
            self.left -= len(data)
            return None
        if self.conn is None:
            return None
        try:
            self.conn.receive_data(data)
            while (event := self.conn.next_event()) is not h11.NEED_DATA:
                if isinstance(event, h11.EndOfMessage | h11.ConnectionClosed) or event is h11.PAUSED:
                    return len(data) - len(self.conn.trailing_data[0])
                if isinstance(event, h11.Response) and not (self.head or event.status_code in (204, 304)):
                    names = {k: v for k, v in event.headers}
                    if b"transfer-encoding" in names:
                        continue  # chunked: h11 reads it to its end
                    if b"content-length" not in names:
                        self.conn = None  # it ends when the upstream closes
                        return None
                    length, received = int(names[b"content-length"]), len(self.conn.trailing_data[0])
                    if received >= length:
                        return len(data) - received + length
                    self.left = length - received
                    return None
            return None
        except h11.RemoteProtocolError:
            self.conn = None
            return None
