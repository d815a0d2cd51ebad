"""A WebSocket to a box's other port at its E2B host name (`<port>-<id>.<domain>`), as E2B's proxy
carries one: what a page served from the box opens back to it (noVNC's to websockify, the stream
of e2b-desktop), and any client's.

The client's WebSocket ends here (uvicorn); a second one, to 127.0.0.1:port in the box over the
agent's tunnel (hutch.services.boxport.tunnel), is opened with the client's path, query and
subprotocols, and messages go across both ways as they come. Who may open it is the port
forwarder's rule (ports.opened): anyone for a box made public, else the box's token. Hostile: the
client's frames and the box's; each message is bounded (MAX_MESSAGE) and a close on either side
closes the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.requests import HTTPConnection
from starlette.types import Receive, Scope, Send
from websockets.client import ClientProtocol
from websockets.exceptions import WebSocketException
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from hutch.e2b import ports
from hutch.e2b.common import StateGetter
from hutch.errors import ApiError
from hutch.services import boxport
from hutch.store import SandboxStatus

log = logging.getLogger("hutch.e2b")

MAX_MESSAGE = 16 * 1024 * 1024  # a VNC frame update of a large screen, with room
HANDSHAKE_SECONDS = 30.0
DRAIN_SECONDS = 30.0  # a side that reads nothing of what is sent to it this long is closed
READ = 64 * 1024
CLOSE_ERROR = 1011  # the box's server could not be reached or refused the upgrade


async def forward(get_state: StateGetter, scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI WebSocket app for a box's other port."""
    conn = HTTPConnection(scope)
    port = ports.port_of(scope) or 0
    try:
        st, rec, anyone = ports.opened(get_state, conn, port)
        if not port or rec.status == SandboxStatus.FAILED:
            raise boxport.PortUnavailable(boxport.NOT_OPEN)
        async with boxport.tunnel(st, rec, port, anyone=anyone) as (reader, writer):
            box = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}{_target(scope)}"),
                                 subprotocols=list(scope.get("subprotocols") or []) or None,
                                 max_size=MAX_MESSAGE)
            box.send_request(box.connect())
            await _flush(box, writer)
            answer = await asyncio.wait_for(_handshake(box, reader), HANDSHAKE_SECONDS)
            if answer is None:
                await send({"type": "websocket.close", "code": CLOSE_ERROR})
                return
            await send({"type": "websocket.accept", "subprotocol": answer.headers.get("Sec-WebSocket-Protocol")})
            await _pump(box, reader, writer, receive, send)
    except (ApiError, boxport.PortUnavailable, OSError, TimeoutError, WebSocketException) as e:
        log.info("a WebSocket to a box's port was refused: %s", e)
        with contextlib.suppress(Exception):
            await send({"type": "websocket.close", "code": CLOSE_ERROR})


def _target(scope: Scope) -> str:
    return ports.target(scope).decode("latin-1")


async def _receive(box: ClientProtocol, reader: asyncio.StreamReader) -> bool:
    """What the box sent next, fed to its protocol; False once it closed its side."""
    data = await reader.read(READ)
    if data:
        box.receive_data(data)
    else:
        box.receive_eof()
    return bool(data)


async def _flush(box: ClientProtocol, writer: asyncio.StreamWriter) -> None:
    """What the protocol has for the box, sent: within DRAIN_SECONDS (a box that reads nothing,
    pinging, must not grow the host's buffer)."""
    pending = box.data_to_send()
    if pending:
        writer.write(b"".join(pending))
        await asyncio.wait_for(writer.drain(), DRAIN_SECONDS)


async def _handshake(box: ClientProtocol, reader: asyncio.StreamReader) -> Response | None:
    """The box's answer to the upgrade, or None if it refused it or closed."""
    while True:
        data = await _receive(box, reader)
        for event in box.events_received():
            if isinstance(event, Response):
                return event if box.handshake_exc is None else None
        if not data:
            return None


async def _pump(box: ClientProtocol, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                receive: Receive, send: Send) -> None:
    """Messages both ways until either side closes."""

    async def to_box() -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                box.send_close()
                await _flush(box, writer)
                return
            if message.get("bytes") is not None:
                box.send_binary(message["bytes"])
            elif message.get("text") is not None:
                box.send_text(message["text"].encode())
            await _flush(box, writer)

    async def to_client() -> None:
        parts: list[bytes] = []
        kind = Opcode.BINARY
        while True:
            data = await _receive(box, reader)
            for event in box.events_received():
                if not isinstance(event, Frame):
                    continue
                if event.opcode in (Opcode.TEXT, Opcode.BINARY):
                    kind, parts = event.opcode, [bytes(event.data)]
                elif event.opcode == Opcode.CONT:
                    parts.append(bytes(event.data))
                elif event.opcode == Opcode.CLOSE:
                    await send({"type": "websocket.close", "code": 1000})
                    return
                else:  # ping, pong: answered by the protocol itself
                    continue
                if event.fin:
                    whole = b"".join(parts)
                    await send({"type": "websocket.send", **({"text": whole.decode("utf-8", "replace")}
                                                             if kind == Opcode.TEXT else {"bytes": whole})})
            await _flush(box, writer)  # pongs, a close
            if not data:
                await send({"type": "websocket.close", "code": 1000})
                return

    tasks = [asyncio.ensure_future(to_box()), asyncio.ensure_future(to_client())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
