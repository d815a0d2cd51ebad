"""One HTTP request to a port inside a box, its answer streamed back: what E2B's port forwarder
(hutch.e2b.ports) and hutch's code-interpreter routes (hutch.server.routes.code) both send.

The box is reached through the same tunnel as a preview URL (the agent's, a paused box resumed
first). One request per tunnel: it goes in framed anew by h11 (`Connection: close`), and the
answer streams back in the chunks it comes in (never parsed or buffered whole), its head bounded
in size and, with the request's sending, in time (HEAD_SECONDS in all: no drip holds it), a stall
of IDLE_SECONDS ending it. A box has at most MAX_PER_BOX exchanges under way, a team
MAX_PER_TEAM (429 past them): a port that never answers holds no more of the server than that.
An answer the box cuts short raises CutShort from the body, and only once the store
says whether the box is going (a kill): a client that then asks hears "killed". Nothing here
filters headers: each caller says what goes to the box and what comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections import Counter
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import h11

from hutch.errors import ApiError, Code
from hutch.http_relay import Upstream
from hutch.node.api import AgentUnreachable, ChannelError
from hutch.store import SandboxRecord, SandboxStatus

if TYPE_CHECKING:
    from hutch.node.api import NodeRuntime
    from hutch.services.sandboxes import Sandboxes
    from hutch.store import Store


class State(Protocol):
    """What a request to a box's port needs of the server's state."""

    @property
    def sandboxes(self) -> Sandboxes: ...
    @property
    def store(self) -> Store: ...
    @property
    def node(self) -> NodeRuntime: ...

MAX_HEAD = 64 * 1024
READ = 64 * 1024
HEAD_SECONDS = 300.0  # a context's kernel starts before its answer's head comes
IDLE_SECONDS = 300.0  # the code interpreter writes a keep-alive line every 10 s of a long cell
SETTLE_SECONDS = 5.0  # a cut tunnel: how long a kill in progress may take to be recorded
NOT_OPEN = "The sandbox is running but port is not open"  # E2B's proxy's words, which its SDK reads
MAX_PER_BOX = 64  # exchanges under way with one box's ports (each a client connection and a tunnel)
MAX_PER_TEAM = 256
_under_way: Counter[str] = Counter()  # by box id and by team id (distinct: a box id is a UUID, a team's is not)


class PortUnavailable(Exception):
    """Nothing answered on the port (or the box was paused meanwhile); each API says it its own way."""


class CutShort(Exception):
    """The box ended its answer before its end: the client's response must break, not end."""


@dataclass
class Answer:
    """The box's answer: its head, and its body as it comes (raising CutShort if cut short).
    Iterate `body` to its end or close it: it holds the tunnel."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: AsyncGenerator[bytes, None]


async def exchange(st: State, rec: SandboxRecord, port: int, method: str, target: bytes,
                   headers: list[tuple[bytes, bytes]], body: bytes, *, anyone: bool = False) -> Answer:
    """Send one request to `port` in the box and wait for its answer's head. `headers` go as they
    are, after hutch's own host, connection and content-length. `anyone`: a caller without the
    box's token (a public box's visitor), counted apart from the team's own calls."""
    head = h11.Request(method=method, target=target,
                       headers=[(b"host", f"127.0.0.1:{port}".encode()), (b"connection", b"close"),
                                (b"content-length", str(len(body)).encode()), *headers])
    hold = _Hold(rec, anyone)
    try:
        upstream = await _open(st, rec, port)
    except BaseException:
        hold.release()
        raise
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    reader, writer = upstream
    try:
        async with asyncio.timeout(HEAD_SECONDS):  # the request sent and the answer's head, in all
            for event in (head, h11.Data(data=body), h11.EndOfMessage()) if body else (head, h11.EndOfMessage()):
                writer.write(conn.send(event) or b"")
            await writer.drain()
            answer = await _next(conn, reader)
        if not isinstance(answer, h11.Response):
            raise PortUnavailable("The sandbox's server on the port did not answer")
    except (OSError, TimeoutError, h11.ProtocolError, asyncio.IncompleteReadError):
        writer.close()
        hold.release()
        raise PortUnavailable(NOT_OPEN) from None
    except BaseException:
        writer.close()
        hold.release()
        raise
    stream = _body(conn, upstream, st, rec, hold)
    weakref.finalize(stream, hold.release)  # a body never started never runs its own end
    return Answer(answer.status_code, [(bytes(k), bytes(v)) for k, v in answer.headers], stream)


@contextlib.asynccontextmanager
async def tunnel(st: State, rec: SandboxRecord, port: int, *, anyone: bool = False) -> AsyncGenerator[Upstream, None]:
    """A raw connection to `port` in the box (a WebSocket's, once upgraded), counted against the box
    and its team as an exchange is while it is open. PortUnavailable if nothing listens there."""
    hold = _Hold(rec, anyone)
    try:
        reader, writer = await _open(st, rec, port)
    except BaseException:
        hold.release()
        raise
    try:
        yield reader, writer
    finally:
        hold.release()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


class _Hold:
    """An exchange counted against its box and its team (refused, 429, past either's cap) until
    released: once, by its body's end or, for a body never read, its collection. A public box's
    visitors (`anyone`) count apart, against the box's own share for them: strangers never take
    the team's places."""

    def __init__(self, rec: SandboxRecord, anyone: bool) -> None:
        if anyone:
            key = f"{rec.id}/anyone"
            if _under_way[key] >= MAX_PER_BOX:
                raise ApiError(Code.RATE_LIMITED, f"sandbox {rec.id} has {MAX_PER_BOX} requests from visitors to its "
                                                  "ports under way, the most it takes; send more once some end")
            self.keys: tuple[str, ...] = (key,)
            _under_way[key] += 1
            return
        if _under_way[rec.id] >= MAX_PER_BOX:
            raise ApiError(Code.RATE_LIMITED, f"sandbox {rec.id} has {MAX_PER_BOX} requests to its ports under "
                                              "way, the most it may; send more once some end")
        if _under_way[rec.team_id] >= MAX_PER_TEAM:
            raise ApiError(Code.RATE_LIMITED, f"this team has {MAX_PER_TEAM} requests to its sandboxes' ports "
                                              "under way, the most it may; send more once some end")
        self.keys = (rec.id, rec.team_id)
        for key in self.keys:
            _under_way[key] += 1

    def release(self) -> None:
        keys, self.keys = self.keys, ()
        for key in keys:
            _under_way[key] -= 1
            if _under_way[key] <= 0:
                del _under_way[key]


async def read_bounded(answer: Answer, limit: int) -> bytes:
    """A short answer's whole body, at most `limit` bytes (the rest is dropped with the tunnel)."""
    out = bytearray()
    try:
        async for chunk in answer.body:
            out += chunk[:limit - len(out)]
            if len(out) >= limit:
                break
    finally:
        await answer.body.aclose()
    return bytes(out)


async def _open(st: State, rec: SandboxRecord, port: int) -> Upstream:
    """A tunnel to the port inside the box, resumed first if it is paused."""
    for _ in range(2):  # a pause may take the channel between finding the box and using it
        try:
            agent = await st.sandboxes.running_box(rec)
            return await agent.open_tunnel(port)
        except ChannelError:
            continue
        except AgentUnreachable:
            raise await st.sandboxes.box_unreachable(rec) from None
        except ApiError as e:
            if e.status >= 500 or e.status == 404:  # the agent's refusal: nothing listens there
                raise PortUnavailable(NOT_OPEN) from None
            raise
    raise PortUnavailable("The sandbox was paused while the request ran; call again")


async def _next(conn: h11.Connection, reader: asyncio.StreamReader, idle: float | None = None) -> object:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        data = await asyncio.wait_for(reader.read(READ), idle)
        conn.receive_data(data)  # b"": the box closed its end (h11 then ends or errs the message)


async def _settle(st: State, rec: SandboxRecord) -> None:
    """A tunnel cut short: if the box is going (a kill, say), wait until the store says so, so a
    client that then asks whether it runs (E2B's SDK does) hears "killed". A box that stays alive
    (its server closed the connection) is told at once; the wait is bounded either way."""
    alive = 0
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline and alive < 3:
        current = st.store.get_sandbox(rec.id, include_deleted=True)
        if current is None or current.status != SandboxStatus.ACTIVE:
            return
        alive = alive + 1 if current.runtime_id and await st.node.is_alive(current.runtime_id) else 0
        await asyncio.sleep(0.1)


async def _body(conn: h11.Connection, upstream: Upstream, st: State, rec: SandboxRecord,
                hold: _Hold) -> AsyncGenerator[bytes, None]:
    reader, writer = upstream
    try:
        while True:
            try:
                event = await _next(conn, reader, IDLE_SECONDS)
            except (OSError, TimeoutError, h11.ProtocolError) as e:
                await _settle(st, rec)
                raise CutShort(str(e)) from None
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return
            elif isinstance(event, h11.ConnectionClosed):
                await _settle(st, rec)
                raise CutShort("the box closed the connection")
    finally:
        hold.release()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
