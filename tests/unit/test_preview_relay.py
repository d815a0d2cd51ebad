"""hutch.http_relay as its other caller (the egress proxy's secret swap) drives it: with the
defaults, nothing new is cut (an upgraded connection may stay quiet), and the answer's headers
are scrubbed, then rewritten by `answer_headers` where a caller gives it."""

from __future__ import annotations

import asyncio

import h11

from hutch import http_relay
from hutch.http_relay import Forward, Upstream


async def _upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    if b"upgrade" in head.lower():
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
        while data := await reader.read(1024):
            writer.write(b"echo " + data)
    else:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Secret: s3cret\r\nX-Box: yes\r\n\r\n")
    await writer.drain()
    writer.close()


async def _relayed(forward: Forward, request: bytes, then: bytes = b"", quiet: float = 0.0,
                   **limits: float | None) -> bytes:
    up = await asyncio.start_server(_upstream, "127.0.0.1", 0)
    port = up.sockets[0].getsockname()[1]

    async def prepare(_request: h11.Request) -> Forward:
        return forward

    async def opened() -> Upstream:
        return await asyncio.open_connection("127.0.0.1", port)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await http_relay.relay(reader, writer, prepare, opened, **limits)  # type: ignore[arg-type]
        writer.close()

    front = await asyncio.start_server(serve, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", front.sockets[0].getsockname()[1])
    writer.write(request)
    got = await reader.readuntil(b"\r\n\r\n")
    if then:
        await asyncio.sleep(quiet)
        writer.write(then)
        got += await asyncio.wait_for(reader.read(1024), 5)
    writer.close()
    front.close()
    up.close()
    return got


def test_scrub_then_answer_headers() -> None:
    forward = Forward([(b"host", b"x")], scrub=[(b"s3cret", b"stand-in")],
                      answer_headers=lambda hs: [(k, v) for k, v in hs if k != b"x-box"])
    got = asyncio.run(_relayed(forward, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
    assert b"x-secret: stand-in" in got.lower() and b"x-box" not in got.lower()
    plain = asyncio.run(_relayed(Forward([(b"host", b"x")]), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
    assert b"x-box: yes" in plain.lower(), "without answer_headers, the answer's headers as they came"


def test_by_default_a_quiet_upgraded_connection_stays() -> None:
    upgrade = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n"
    forward = Forward([(b"host", b"x"), (b"upgrade", b"x"), (b"connection", b"Upgrade")])
    got = asyncio.run(_relayed(forward, upgrade, b"hello", quiet=1.0, idle_timeout=0.5))
    assert got.endswith(b"echo hello"), "idle_timeout bounds reads of heads and bodies, not a spliced connection"
    cut = asyncio.run(_relayed(forward, upgrade, b"hello", quiet=1.0, stall_timeout=0.5))
    assert cut.endswith(b"\r\n\r\n"), "with a stall timeout, a quiet spliced connection is cut"
