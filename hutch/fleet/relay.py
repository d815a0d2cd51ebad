"""A node's internal API, which only its fleet's API servers call: the node runtime's calls
(`/rpc/<call>`, a JSON body and a JSON answer) and each box's agent channel (`/channel/<runtime
id>/<agent route>`), relayed byte for byte so streams, uploads and tunnels pass as they come.

One request per connection, and every request carries the fleet's key. The node trusts its API
servers no more than it must: the head is read with a bound and a deadline, a call's body is
capped, and the relay never interprets what flows once the head has gone on; the API server's
agent client reads the box's answers with the same caps as on one host. What the box sends is
hostile on this side too: it is only copied, at most `READ` bytes at a time, and a connection that
passes nothing either way for `IDLE_TIMEOUT` is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import logging
import re
import resource
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import h11

from hutch import tracing
from hutch.node.nodebox import RUNTIME_ID_PATTERN

log = logging.getLogger("hutch.fleet.relay")

KEY_HEADER = "x-hutch-fleet-key"
CHANNEL = "/channel/"
RPC = "/rpc/"
MAX_HEAD = 16 * 1024
MAX_CALL_BODY = 1 * 2**20
BODY_TIMEOUT = 30.0
IDLE_TIMEOUT = 330.0  # longer than a preview's idle tunnel (300 s); commands ping every 10 s
READ = 64 * 1024
RUNTIME_ID = re.compile(RUNTIME_ID_PATTERN.encode())


@dataclass(frozen=True)
class RelayLimits:
    """What the relay holds open. Connections whose head has not yet shown the fleet's key are
    few and short (anyone on the network can open them); one box's are capped, so a tenant's
    streams and previews cannot take the node's whole budget."""

    connections: int = 4096  # in all (kept within a quarter of the process' descriptors)
    unauthenticated: int = 128
    per_box: int = 256
    head_seconds: float = 3.0

    def within(self, nofile: int) -> RelayLimits:
        return dataclasses.replace(self, connections=max(16, min(self.connections, nofile // 4)))
_HOP_BY_HOP = {b"connection", b"keep-alive", KEY_HEADER.encode()}


class CallError(Exception):
    """A call that failed on the node: `kind` says how (the API server raises the same kind)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


Calls = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
Sockets = Callable[[str], str | None]  # a runtime id's pinned channel socket, None if not held here


class Relay:
    """The node's listener for its API servers."""

    def __init__(self, key: str, calls: Calls, sockets: Sockets, limits: RelayLimits | None = None) -> None:
        self._key = key.encode()
        self._calls = calls
        self._sockets = sockets
        self.limits = (limits or RelayLimits()).within(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        self._server: asyncio.Server | None = None
        self._open = 0
        self._unauthenticated = 0
        self._per_box: Counter[bytes] = Counter()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port, limit=READ)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._open += 1
        try:
            if self._open > self.limits.connections or self._unauthenticated >= self.limits.unauthenticated:
                await _answer(writer, 503, {"kind": "busy", "message": "the node has too many connections open"})
                return
            await self._one(reader, writer)
        except (ConnectionError, TimeoutError, h11.ProtocolError, asyncio.IncompleteReadError):
            pass
        finally:
            self._open -= 1
            self._tasks.discard(task)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self._unauthenticated += 1
        try:
            async with asyncio.timeout(self.limits.head_seconds):
                request = await _next(conn, reader)
        finally:
            self._unauthenticated -= 1
        if not isinstance(request, h11.Request):
            return
        # h11 bounds a head still arriving; one that came whole in a read is measured here
        if len(request.target) + sum(len(n) + len(v) + 4 for n, v in request.headers) > MAX_HEAD:
            await _answer(writer, 431, {"kind": "too_large", "message": "the request's head is too large"})
            return
        given = dict(request.headers).get(KEY_HEADER.encode(), b"")
        if not hmac.compare_digest(given, self._key):
            await _answer(writer, 401, {"kind": "unauthorized", "message": "not a member of this fleet"})
            return
        framing = {name for name, _ in request.headers} & {b"content-length", b"transfer-encoding"}
        if len(framing) > 1:  # never left to two parsers to agree on
            await _answer(writer, 400, {"kind": "invalid", "message": "a request with two framings"})
            return
        target = bytes(request.target)
        if target.startswith(CHANNEL.encode()):
            await self._relay(conn, request, target[len(CHANNEL):], reader, writer)
        elif target.startswith(RPC.encode()) and request.method == b"POST":
            name = target[len(RPC):].decode("ascii", "replace")
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.headers if k == b"traceparent"}
            with tracing.joined(headers, f"node.call.{name[:64]}"):  # the API server's trace, when traced
                await self._call(conn, name, reader, writer)
        else:
            await _answer(writer, 404, {"kind": "not_found", "message": "no such route on a node"})

    async def _call(self, conn: h11.Connection, name: str, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        body = bytearray()
        async with asyncio.timeout(BODY_TIMEOUT):
            while not isinstance(event := await _next(conn, reader), h11.EndOfMessage):
                if not isinstance(event, h11.Data):
                    return
                body += event.data
                if len(body) > MAX_CALL_BODY:
                    await _answer(writer, 413, {"kind": "too_large", "message": "the call's body is too large"})
                    return
        try:
            args = json.loads(body or b"{}")
            if not isinstance(args, dict):
                raise ValueError("not an object")
        except (ValueError, RecursionError) as e:
            await _answer(writer, 400, {"kind": "invalid", "message": f"the call's body is not a JSON object: {e}"})
            return
        try:
            result = await self._calls(name, args)
        except CallError as e:
            await _answer(writer, 409, {"kind": e.kind, "message": str(e)})
            return
        except Exception as e:
            log.exception("node call %s failed", name)
            await _answer(writer, 500, {"kind": "failed", "message": str(e) or type(e).__name__})
            return
        await _answer(writer, 200, result)

    async def _relay(self, conn: h11.Connection, request: h11.Request, rest: bytes,
                     reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        runtime_id, slash, route = rest.partition(b"/")
        socket = self._sockets(runtime_id.decode()) if RUNTIME_ID.fullmatch(runtime_id) and slash else None
        if socket is None:
            return  # closed unanswered: to the API server, a box that cannot be reached
        if self._per_box[runtime_id] >= self.limits.per_box:
            await _answer(writer, 503, {"kind": "busy", "message": "the box has too many connections open"})
            return
        self._per_box[runtime_id] += 1
        try:
            await self._to_box(conn, request, route, socket, reader, writer)
        finally:
            self._per_box[runtime_id] -= 1
            if not self._per_box[runtime_id]:
                del self._per_box[runtime_id]

    async def _to_box(self, conn: h11.Connection, request: h11.Request, route: bytes, socket: str,
                      reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            box_reader, box_writer = await asyncio.wait_for(asyncio.open_unix_connection(socket, limit=READ),
                                                            BODY_TIMEOUT)
        except (OSError, TimeoutError):
            return
        head = [request.method + b" /" + route + b" HTTP/1.1"]
        head += [name + b": " + value for name, value in request.headers if name.lower() not in _HOP_BY_HOP]
        head.append(b"connection: close")  # one request per connection: the answer's end is the box's close
        box_writer.write(b"\r\n".join(head) + b"\r\n\r\n" + conn.trailing_data[0])
        try:
            await _splice(reader, writer, box_reader, box_writer)
        finally:
            box_writer.close()


async def _next(conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
    while (event := conn.next_event()) is h11.NEED_DATA:
        conn.receive_data(await reader.read(READ))
    return event


async def _answer(writer: asyncio.StreamWriter, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body if status == 200 else {"error": body}).encode()
    writer.write(f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\ncontent-type: application/json\r\n"
                 f"content-length: {len(data)}\r\nconnection: close\r\n\r\n".encode() + data)
    with contextlib.suppress(ConnectionError):
        await writer.drain()


async def _splice(a_reader: asyncio.StreamReader, a_writer: asyncio.StreamWriter,
                  b_reader: asyncio.StreamReader, b_writer: asyncio.StreamWriter) -> None:
    """Bytes both ways until both sides are done (a half-close passed on) or one fails or idles."""
    async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        while data := await asyncio.wait_for(src.read(READ), IDLE_TIMEOUT):
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            with contextlib.suppress(OSError):  # the other side may be gone already
                dst.write_eof()

    ups = asyncio.ensure_future(copy(a_reader, b_writer))
    downs = asyncio.ensure_future(copy(b_reader, a_writer))
    try:
        # The box's close ends the answer; a caller that only half-closed still gets the rest.
        done, _ = await asyncio.wait({ups, downs}, return_when=asyncio.FIRST_COMPLETED)
        if downs not in done and ups.exception() is None:
            await downs
    except (OSError, TimeoutError):
        pass
    finally:
        for task in (ups, downs):
            task.cancel()
        await asyncio.gather(ups, downs, return_exceptions=True)
