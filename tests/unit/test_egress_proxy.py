"""The egress proxy on its own, against stand-in upstreams on loopback: what it refuses without a
lookup or a connection, one request per plain-HTTP connection, connection caps per box and in
all, the timeouts on heads, hellos and idle tunnels, refusals coalesced in the network log and
rate-limited per box, and the log, lookups and store reads on threads of their own (end to end
with real boxes: tests/integration).

The proxy decides on the addresses a name resolves to (documentation addresses here); its
`connect` seam then takes every connection to the stand-in upstream on loopback instead, so
nothing leaves this machine and an address the rules refuse is never dialled at all.
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import ssl
import stat
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hutch.egress.limits import EgressLimits
from hutch.egress.netlog import LogEntry
from hutch.egress.policy import Policy
from hutch.egress.proxy import EgressProxy
from hutch.egress.resolve import RESOLVES_PER_BOX, Resolver
from hutch.egress.rules import IPAddress, NetworkRules

HOSTS = {"example.test": ["198.51.100.2"], "other.test": ["198.51.100.3"], "big.test": ["198.51.100.4"],
         "metadata.google.internal": ["198.51.100.9"]}  # a public-looking address: refused by name alone
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 30))


@dataclass
class Upstream:
    """Stand-in hosts: HTTP on port 80 that keeps every connection open whatever `Connection:
    close` says (and tells what it got), a sink on 443, an echo on 7."""

    requests: list[tuple[str, str, bytes]] = field(default_factory=list)  # request line, Host, body
    port: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        service = (await reader.readexactly(2)).decode()  # what the connect seam says it dialled
        try:
            if service == "07":
                while data := await reader.read(65536):
                    writer.write(data)
            elif service == "43":
                while await reader.read(65536):
                    pass
            else:
                await self._http(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:  # keep-alive, whatever the request asked
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            line, *rest = head[:-4].split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in rest)}
            body = b""
            if headers.get("transfer-encoding") == "chunked":
                while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                    body += await reader.readexactly(size)
                    await reader.readexactly(2)
                await reader.readuntil(b"\r\n")
            else:
                body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.requests.append((line, headers.get("host", ""), body))
            method, path, _ = line.split(" ")
            if path == "/close-delimited":
                writer.write(b"HTTP/1.0 200 OK\r\n\r\nall of it, then the end")
                await writer.drain()
                return
            if path == "/chunked":
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n there\r\n0\r\n\r\n")
                continue
            if path.startswith("/big/"):
                size = int(path.split("/")[2])
                writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode())
                for _ in range(size // 65536):
                    writer.write(b"x" * 65536)
                    await writer.drain()
                writer.write(b"x" * (size % 65536))
                continue
            answer = f"{method} {path} {len(body)}".encode()
            writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(answer)}\r\n\r\n".encode()
                         + (b"" if method == "HEAD" else answer))
            await writer.drain()


class CountingResolver(Resolver):
    def __init__(self) -> None:
        super().__init__(HOSTS, system=False)
        self.asked: list[str] = []

    async def resolve(self, name: str, slots: asyncio.Semaphore | None = None) -> list[IPAddress]:
        self.asked.append(name)
        return await super().resolve(name, slots)


@dataclass
class Harness:
    proxy: EgressProxy
    upstream: Upstream
    resolver: CountingResolver
    dir: Path
    rows: list[LogEntry]
    dialled: list[tuple[str, int]]
    log_threads: set[str]
    policies: dict[str, Policy]  # what the store holds: an edit here is a live rule edit
    reads: list[tuple[str, str]]  # each policy read: the box, the thread it ran on

    async def connect(self, box: str = "a") -> Streams:
        return await asyncio.open_unix_connection(str(self.dir / f"{box}.sock"))

    async def ask(self, head: str, box: str = "a") -> tuple[bytes, Streams]:
        """Send a request head; the answer's head back (and the connection)."""
        conn = await self.connect(box)
        conn[1].write(head.encode())
        return await asyncio.wait_for(conn[0].readuntil(b"\r\n\r\n"), 5), conn

    async def refused(self, head: str, box: str = "a") -> str:
        """The X-Hutch-Egress of an answer that must be a refusal."""
        answer, conn = await self.ask(head, box)
        conn[1].close()
        assert answer.split(b" ")[1] in (b"400", b"403", b"429", b"502", b"503"), answer
        return next(line.split(":", 1)[1].strip() for line in answer.decode().split("\r\n")
                    if line.lower().startswith("x-hutch-egress:"))

    async def settled(self) -> None:
        """Until the rows stop coming: each connection's row is written when it ends."""
        count = -1
        for _ in range(50):
            if len(self.rows) == count:
                return
            count = len(self.rows)
            await asyncio.sleep(0.15)


@asynccontextmanager
async def harness(tmp_path: Path, rules: NetworkRules | None = None, limits: EgressLimits | None = None,
                  reading: Callable[[str], None] = lambda _key: None) -> AsyncIterator[Harness]:
    """`reading(box)` is called in each policy read, on its thread, after the store has answered."""
    upstream = Upstream()
    server = await asyncio.start_server(upstream.serve, "127.0.0.1", 0)
    upstream.port = server.sockets[0].getsockname()[1]
    rows: list[LogEntry] = []
    dialled: list[tuple[str, int]] = []
    log_threads: set[str] = set()

    def record(entry: LogEntry) -> None:
        log_threads.add(threading.current_thread().name)
        rows.append(entry)

    async def connect(ip: str, port: int, tls: ssl.SSLContext | None, name: str | None) -> Streams:
        dialled.append((ip, port))
        reader, writer = await asyncio.open_connection("127.0.0.1", upstream.port)
        writer.write(f"{port:02d}"[-2:].encode())
        return reader, writer

    async def no_host_addresses() -> frozenset[IPAddress]:
        return frozenset()

    policies = {"a": Policy("sb-a", rules or NetworkRules()), "b": Policy("sb-b", NetworkRules())}
    reads: list[tuple[str, str]] = []

    def policy_for(key: str) -> Policy | None:
        reads.append((key, threading.current_thread().name))
        found = policies.get(key)  # what the store holds when the read is made
        reading(key)
        return found

    resolver = CountingResolver()
    proxy = EgressProxy(resolver, policy_for, record, no_host_addresses, limits=limits or EgressLimits(),
                        connect=connect)
    for key in policies:
        await proxy.listen(key, tmp_path / f"{key}.sock")
    try:
        yield Harness(proxy, upstream, resolver, tmp_path, rows, dialled, log_threads, policies, reads)
    finally:
        await proxy.close_all()
        server.close()


async def read_all(reader: asyncio.StreamReader, timeout: float = 5) -> bytes:
    """All the proxy sent before it closed. A close with our bytes unread is a reset (a client
    still dripping its head when the deadline cut it): it sent nothing, as a plain close."""
    try:
        return await asyncio.wait_for(reader.read(-1), timeout)
    except ConnectionResetError:
        return b""


# --- what is refused without a lookup or a connection (item: always-denied addresses) ----------------

@pytest.mark.parametrize("host", ["[::ffff:0:7f00:1]", "[::ffff:0:a9fe:a9fe]", "[64:ff9b::7f00:1]", "[2002:a00:1::1]",
                                  "[fd00:ec2::254]", "168.63.129.16", "[::ffff:168.63.129.16]", "100.100.100.200",
                                  "192.0.0.192", "metadata.google.internal", "instance-data.ec2.internal"])
def test_metadata_and_ipv4_carrying_destinations_are_refused_by_rule(tmp_path: Path, host: str) -> None:
    async def test() -> None:
        allow = NetworkRules.parse(["0.0.0.0/0", "::/0", "metadata.google.internal", "*.internal"])
        async with harness(tmp_path, allow) as h:
            for head in (f"CONNECT {host}:80 HTTP/1.1\r\n\r\n", f"GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\n\r\n"):
                assert (await h.refused(head)).startswith("always_denied:"), head
            await h.settled()
            assert h.dialled == [] and h.resolver.asked == [], "decided without a lookup or a connection"
            assert [(r.verdict, r.rule.startswith("always_denied:")) for r in h.rows] == [("denied", True)] * 2
    run(test)


# --- one request per plain-HTTP connection -----------------------------------------------------------

def test_a_second_request_on_a_plain_connection_never_goes_anywhere(tmp_path: Path) -> None:
    async def test() -> None:
        async with harness(tmp_path, NetworkRules.parse(["example.test"], ["0.0.0.0/0"])) as h:
            reader, writer = await h.connect()
            writer.write(b"GET http://example.test/first HTTP/1.1\r\nHost: example.test\r\n\r\n"
                         b"GET http://other.test/second HTTP/1.1\r\nHost: other.test\r\n\r\n"
                         b"GET /third HTTP/1.1\r\nHost: example.test\r\n\r\n")
            answer = await read_all(reader)
            assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"GET /first 0"), answer
            assert answer.count(b"HTTP/1.1") == 1, "one answer, then the connection closes"
            await h.settled()
            assert [line for line, _, _ in h.upstream.requests] == ["GET /first HTTP/1.1"]
            assert [(r.host, r.verdict) for r in h.rows] == [("example.test", "allowed")]
    run(test)


def test_a_request_body_goes_whole_and_nothing_after_it(tmp_path: Path) -> None:
    async def test() -> None:
        async with harness(tmp_path) as h:
            for framing, body in ((b"Content-Length: 11\r\n\r\n", b"hello there"),
                                  (b"Transfer-Encoding: chunked\r\n\r\n", b"6;ext=1\r\nhello \r\n5\r\nthere\r\n0\r\n\r\n")):
                reader, writer = await h.connect()
                writer.write(b"POST http://example.test/up HTTP/1.1\r\nHost: example.test\r\n" + framing + body
                             + b"POST /smuggled HTTP/1.1\r\nHost: example.test\r\nContent-Length: 0\r\n\r\n")
                assert (await read_all(reader)).endswith(b"POST /up 11")
            await h.settled()
            assert [(line, got) for line, _, got in h.upstream.requests] == [("POST /up HTTP/1.1", b"hello there")] * 2
    run(test)


def test_a_request_with_two_framings_is_refused(tmp_path: Path) -> None:
    async def test() -> None:
        async with harness(tmp_path) as h:
            head = ("POST http://example.test/ HTTP/1.1\r\nHost: example.test\r\nContent-Length: 5\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n")
            assert await h.refused(head) == "bad_request"
            await h.settled()
            assert h.dialled == []
    run(test)


def test_answers_end_where_their_framing_says(tmp_path: Path) -> None:
    async def test() -> None:
        async with harness(tmp_path) as h:
            reader, writer = await h.connect()  # an answer to HEAD has a length and no body
            writer.write(b"HEAD http://example.test/h HTTP/1.1\r\nHost: example.test\r\n\r\n")
            answer = await read_all(reader)
            assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"\r\n\r\n")
            reader, writer = await h.connect()  # no length: it ends when the upstream closes
            writer.write(b"GET http://example.test/close-delimited HTTP/1.1\r\nHost: example.test\r\n\r\n")
            assert (await read_all(reader)).endswith(b"all of it, then the end")
            reader, writer = await h.connect()  # chunked: it ends at its last chunk
            writer.write(b"GET http://example.test/chunked HTTP/1.1\r\nHost: example.test\r\n\r\n")
            assert (await read_all(reader)).endswith(b"0\r\n\r\n")
            reader, writer = await h.connect()
            writer.write(b"GET http://big.test/big/5000000 HTTP/1.1\r\nHost: big.test\r\n\r\n")
            answer = await read_all(reader, 20)
            assert answer.endswith(b"x" * 1000) and len(answer.split(b"\r\n\r\n", 1)[1]) == 5000000
            await h.settled()
            big = next(r for r in h.rows if r.host == "big.test")
            assert big.bytes_in == len(answer) and big.bytes_out > 0
    run(test)


# --- what boxes share: connection caps, timeouts, the log, lookups -------------------------------

def test_connections_past_a_boxs_cap_or_the_proxys_are_refused_and_others_go_on(tmp_path: Path) -> None:
    async def test() -> None:
        async with harness(tmp_path, limits=EgressLimits(connections=5, per_box=3)) as h:
            held = [await h.connect("a") for _ in range(3)]
            await asyncio.sleep(0.1)
            assert await h.refused("CONNECT example.test:7 HTTP/1.1\r\n\r\n", "a") == "too_many_connections"
            answer, conn = await h.ask("GET http://example.test/b HTTP/1.1\r\nHost: example.test\r\n\r\n", "b")
            assert answer.startswith(b"HTTP/1.1 200"), "another box's connections go on"
            conn[1].close()
            await h.settled()  # its slot is held until its row is written
            held += [await h.connect("b") for _ in range(2)]
            await asyncio.sleep(0.1)
            assert await h.refused("CONNECT example.test:7 HTTP/1.1\r\n\r\n", "b") == "proxy_busy"
            held.pop(0)[1].close()
            await asyncio.sleep(0.1)
            answer, conn = await h.ask("CONNECT example.test:7 HTTP/1.1\r\n\r\n", "a")
            assert answer.startswith(b"HTTP/1.1 200"), "a slot comes back when a connection ends"
            for _, writer in [*held, conn]:
                writer.close()
            await h.settled()
            refusals = [(r.sandbox_id, r.verdict, r.rule) for r in h.rows if r.verdict != "allowed"]
            assert refusals == [("sb-a", "denied", "too_many_connections"), ("sb-b", "denied", "proxy_busy")]
    run(test)


def test_a_box_under_its_share_takes_the_oldest_connection_of_the_box_holding_the_most(tmp_path: Path) -> None:
    async def test() -> None:
        async with harness(tmp_path, limits=EgressLimits(connections=6, per_box=6)) as h:
            held = [(await h.ask("CONNECT example.test:7 HTTP/1.1\r\n\r\n", "a"))[1] for _ in range(6)]
            answer, conn = await h.ask("CONNECT example.test:7 HTTP/1.1\r\n\r\n", "b")
            assert answer.startswith(b"HTTP/1.1 200"), "every slot was a's: b takes a's oldest"
            assert await asyncio.wait_for(held[0][0].read(), 5) == b"", "a's oldest connection is closed"
            assert await h.refused("CONNECT example.test:7 HTTP/1.1\r\n\r\n", "a") == "proxy_busy", \
                "a, over its share, takes nothing back"
            for _, writer in [*held, conn]:
                writer.close()
            await h.settled()
            cut = [r for r in h.rows if r.sandbox_id == "sb-a" and r.verdict == "allowed" and r.error]
            assert len(cut) == 1 and "make room for other boxes" in (cut[0].error or ""), h.rows
    run(test)


def test_a_boxs_cap_is_a_quarter_of_the_budget_at_most(tmp_path: Path) -> None:
    assert EgressLimits(per_box=256).box_cap(256) == 64  # nofile 1024: four boxes leave room
    assert EgressLimits(per_box=256).box_cap(16384) == 256
    assert EgressLimits(per_box=256).box_cap(8) == 16  # never below a floor a browser needs


def test_the_cap_in_all_stays_within_the_processs_descriptors(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
    try:
        async def test() -> None:
            async with harness(tmp_path) as h:
                assert h.proxy.max_connections == 512 // 4
        run(test)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert EgressProxy(Resolver(), lambda _k: None, lambda _e: None, NoHost()).max_connections == min(4096, soft // 4)


class NoHost:
    async def __call__(self) -> frozenset[IPAddress]:
        return frozenset()


def test_a_silent_or_dripping_head_is_cut_at_its_deadline(tmp_path: Path) -> None:
    async def test() -> None:
        async with harness(tmp_path, limits=EgressLimits(head_seconds=0.3)) as h:
            reader, writer = await h.connect()
            start = time.monotonic()
            assert await read_all(reader) == b""
            assert time.monotonic() - start < 1.5
            reader, writer = await h.connect()
            head = b"GET http://example.test/ HTTP/1.1\r\nHost: example.test\r\n"
            sent = 0
            for byte in head:  # a byte every 0.1 s: each read is quick, the whole head is not
                # closed: seen as the end of what it reads, or (a write that met the close first)
                # as this side's transport closing
                if reader.at_eof() or writer.is_closing():
                    break
                writer.write(bytes([byte]))
                sent += 1
                await asyncio.sleep(0.1)
            assert await read_all(reader) == b""
            assert sent < len(head) // 2, "one deadline for the whole head, not one per read"
            await h.settled()
            assert h.dialled == []
    run(test)


def test_a_dripping_tls_hello_is_cut_at_the_same_deadline(tmp_path: Path) -> None:
    async def test() -> None:
        async with harness(tmp_path, limits=EgressLimits(head_seconds=0.5)) as h:
            answer, (reader, writer) = await h.ask("CONNECT example.test:443 HTTP/1.1\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200")
            start = time.monotonic()
            with pytest.raises((ConnectionError, OSError)):  # a hello in one-byte records, never done
                for _ in range(100):
                    writer.write(b"\x16\x03\x01\x00\x01\x01")
                    await writer.drain()
                    await asyncio.sleep(0.05)
                    if reader.at_eof():
                        raise ConnectionResetError
            assert time.monotonic() - start < 2
    run(test)


def test_an_idle_tunnel_is_closed_and_a_busy_one_is_not(tmp_path: Path) -> None:
    async def test() -> None:
        async with harness(tmp_path, limits=EgressLimits(idle_seconds=0.4)) as h:
            answer, (reader, writer) = await h.ask("CONNECT example.test:7 HTTP/1.1\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200")
            for n in range(12):  # 1.2 s, a byte every 0.1 s: busy
                writer.write(b"%d" % (n % 10))
                assert await asyncio.wait_for(reader.readexactly(1), 2) == b"%d" % (n % 10)
                last = time.monotonic()  # the tunnel's last byte
                await asyncio.sleep(0.1)
            assert await read_all(reader) == b""
            # closed once idle for its 0.4 s, counted from its last byte (the proxy saw it a little earlier)
            assert 0.3 < time.monotonic() - last < 1.5
            await h.settled()
            row = h.rows[-1]
            assert (row.verdict, row.bytes_out, row.bytes_in) == ("allowed", 12, 12) and "idle" in (row.error or "")
    run(test)


def test_a_flood_of_refusals_is_coalesced_in_the_log(tmp_path: Path) -> None:
    async def test() -> None:
        async with harness(tmp_path, NetworkRules.parse([], ["0.0.0.0/0"]),
                           EgressLimits(refusals_logged_per_second=5)) as h:
            for n in range(60):
                assert await h.refused(f"CONNECT flood{n}.test:443 HTTP/1.1\r\n\r\n") == "deny_out:0.0.0.0/0"
            await asyncio.sleep(1.2)
            assert len(h.rows) == 6, [r.host for r in h.rows]
            assert [r.host for r in h.rows[:5]] == [f"flood{n}.test" for n in range(5)]
            summary = h.rows[5]
            assert (summary.sandbox_id, summary.verdict, summary.rule) == ("sb-a", "denied", "coalesced")
            assert summary.host == "flood59.test" and "55 more" in (summary.error or "")
            assert await h.refused("CONNECT later.test:443 HTTP/1.1\r\n\r\n") == "deny_out:0.0.0.0/0"
            await h.settled()
            assert h.rows[-1].host == "later.test", "the next second has its own rows"
    run(test)


def test_the_log_and_lookups_run_on_threads_of_their_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lookups: list[str] = []

    def getaddrinfo(name: str, *_args: object, **_kwargs: object) -> list[tuple[object, ...]]:
        lookups.append(threading.current_thread().name)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("198.51.100.7", 0))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)

    async def test() -> None:
        async with harness(tmp_path) as h:
            h.proxy.resolver = Resolver({}, system=True)
            answer, conn = await h.ask("GET http://dns.test/ HTTP/1.1\r\nHost: dns.test\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200")
            conn[1].close()
            await h.settled()
            assert h.dialled == [("198.51.100.7", 80)]
            assert lookups and all(name.startswith("hutch-egress-dns") for name in lookups)
            assert h.log_threads and all(name.startswith("hutch-egress-log") for name in h.log_threads)
    run(test)


def test_a_box_flooding_slow_lookups_holds_only_its_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    running: list[str] = []

    def getaddrinfo(name: str, *_args: object, **_kwargs: object) -> list[tuple[object, ...]]:
        running.append(name)
        if name.startswith("slow"):
            release.wait(10)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("198.51.100.7", 0))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)

    async def test() -> None:
        async with harness(tmp_path) as h:
            h.proxy.resolver = Resolver({}, system=True)
            slow = [await h.connect("a") for _ in range(20)]
            for n, (_, writer) in enumerate(slow):
                writer.write(f"CONNECT slow{n}.test:7 HTTP/1.1\r\n\r\n".encode())
            await asyncio.sleep(0.3)
            assert len(running) == RESOLVES_PER_BOX, "a box's lookups wait for its own slots"
            answer, conn = await h.ask("CONNECT quick.test:7 HTTP/1.1\r\n\r\n", "b")
            assert answer.startswith(b"HTTP/1.1 200"), "another box's lookup does not wait behind them"
            release.set()
            for reader, writer in slow:
                assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 200")
                writer.close()
            conn[1].close()
    run(test)


def test_listening_never_changes_a_mode_by_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def chmod(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a chmod by path would follow a link the box planted")

    async def test() -> None:
        monkeypatch.setattr(os, "chmod", chmod)
        async with harness(tmp_path) as h:
            mode = (h.dir / "a.sock").lstat().st_mode
            assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    run(test)


# --- store reads off the event loop, refusals rate-limited per box -------------------------------------

async def until(predicate: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


def test_policy_reads_run_on_threads_of_their_own_and_a_slow_one_stalls_nobody(tmp_path: Path) -> None:
    release = threading.Event()

    def reading(key: str) -> None:
        if key == "a":
            release.wait(10)  # a store that hangs on box a's rows

    async def test() -> None:
        async with harness(tmp_path, reading=reading) as h:
            waiting = [await h.connect("a") for _ in range(20)]
            for _, writer in waiting:
                writer.write(b"CONNECT example.test:7 HTTP/1.1\r\n\r\n")
            await until(lambda: len(h.reads) == 1, "box a's read began")
            answer, conn = await h.ask("GET http://example.test/b HTTP/1.1\r\nHost: example.test\r\n\r\n", "b")
            assert answer.startswith(b"HTTP/1.1 200"), "the loop, and another box's read, go on meanwhile"
            conn[1].close()
            assert [key for key, _ in h.reads].count("a") == 1, "box a's other connections wait, not in the pool"
            release.set()
            for reader, writer in waiting:
                assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 200")
                writer.close()
            assert [key for key, _ in h.reads].count("a") <= 2, "20 connections, one read and one shared after it"
            assert all(name.startswith("hutch-egress-store") for _, name in h.reads), h.reads
    run(test)


def test_a_rule_edit_applies_to_the_next_connection_even_while_a_read_is_under_way(tmp_path: Path) -> None:
    release = threading.Event()

    def reading(key: str) -> None:
        release.wait(10)  # the first read holds until the edit is made; none after it waits

    async def test() -> None:
        async with harness(tmp_path, reading=reading) as h:
            first = await h.connect("a")
            first[1].write(b"CONNECT example.test:7 HTTP/1.1\r\n\r\n")
            await until(lambda: len(h.reads) == 1, "the first connection's read began")
            h.policies["a"] = Policy("sb-a", NetworkRules.parse([], ["0.0.0.0/0"]))  # the edit, committed
            second = await h.connect("a")
            second[1].write(b"CONNECT example.test:7 HTTP/1.1\r\n\r\n")
            await asyncio.sleep(0.1)  # the second connection's head is in: it must not share the read begun before it
            release.set()
            assert (await asyncio.wait_for(first[0].readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 200")
            answer = await asyncio.wait_for(second[0].readuntil(b"\r\n\r\n"), 5)
            assert answer.startswith(b"HTTP/1.1 403") and b"deny_out:0.0.0.0/0" in answer, answer
            for _, writer in (first, second):
                writer.close()
    run(test)


def test_a_box_refused_past_its_rate_is_refused_unread_and_another_box_goes_on(tmp_path: Path) -> None:
    async def test() -> None:
        limits = EgressLimits(refusals_per_second=2, refusal_burst=5)
        async with harness(tmp_path, NetworkRules.parse([], ["0.0.0.0/0"]), limits) as h:
            loop = asyncio.get_running_loop()
            start = loop.time()
            tags = [await h.refused(f"CONNECT flood{n}.test:443 HTTP/1.1\r\n\r\n") for n in range(40)]
            elapsed = loop.time() - start
            denied = tags.count("deny_out:0.0.0.0/0")
            assert tags.count("rate_limited") == 40 - denied, tags
            assert 5 <= denied <= 5 + int(elapsed * 2) + 1, f"{denied} refusals read in {elapsed:.2f} s"
            assert tags[:5] == ["deny_out:0.0.0.0/0"] * 5 and tags[-1] == "rate_limited", tags
            assert [key for key, _ in h.reads].count("a") == denied, "a connection refused past the rate reads nothing"
            answer, conn = await h.ask("GET http://example.test/b HTTP/1.1\r\nHost: example.test\r\n\r\n", "b")
            assert answer.startswith(b"HTTP/1.1 200"), "another box's bucket is its own"
            conn[1].close()

            def told() -> int:
                return sum(int((r.error or "").split(" more")[0]) if r.rule == "coalesced" else 1
                           for r in h.rows if r.sandbox_id == "sb-a")

            await until(lambda: told() >= 40, "every refusal told in the log")  # the coalesced row ends its second
            mine = [r for r in h.rows if r.sandbox_id == "sb-a"]
            assert told() == 40 and "coalesced" in {r.rule for r in mine}, [(r.rule, r.error) for r in mine]
            assert any(r.rule == "rate_limited" for r in mine)
            later = ""
            for _ in range(20):  # the bucket fills again at its rate
                await asyncio.sleep(0.1)
                if (later := await h.refused("CONNECT later.test:443 HTTP/1.1\r\n\r\n")) != "rate_limited":
                    break
            assert later == "deny_out:0.0.0.0/0"
    run(test)


def test_allowed_connections_give_their_token_back_and_only_refusals_spend_them(tmp_path: Path) -> None:
    async def test() -> None:
        limits = EgressLimits(refusals_per_second=0.001, refusal_burst=3)  # no token comes back by time here
        async with harness(tmp_path, NetworkRules.parse(["example.test"], ["0.0.0.0/0"]), limits) as h:
            held = []
            for _ in range(10):  # more open tunnels than the burst: each held its token only until allowed
                answer, conn = await h.ask("CONNECT example.test:7 HTTP/1.1\r\n\r\n")
                assert answer.startswith(b"HTTP/1.1 200"), answer
                held.append(conn)
            tags = [await h.refused(f"CONNECT denied{n}.test:443 HTTP/1.1\r\n\r\n") for n in range(4)]
            assert tags == ["deny_out:0.0.0.0/0"] * 3 + ["rate_limited"], tags
            answer = (await h.ask("CONNECT example.test:7 HTTP/1.1\r\n\r\n"))[0]
            assert answer.startswith(b"HTTP/1.1 429"), "an empty bucket refuses before any read, allowed or not"
            for _, writer in held:
                writer.close()
    run(test)


def test_connections_that_have_not_sent_a_head_hold_no_token(tmp_path: Path) -> None:
    async def test() -> None:
        limits = EgressLimits(refusals_per_second=0.001, refusal_burst=2, per_box=8)
        async with harness(tmp_path, NetworkRules.parse([], ["0.0.0.0/0"]), limits) as h:
            silent = [await h.connect("a") for _ in range(8)]  # as many as the cap, more than the burst
            await asyncio.sleep(0.1)
            assert await h.refused("CONNECT x.test:443 HTTP/1.1\r\n\r\n") == "too_many_connections"
            silent.pop()[1].close()
            await asyncio.sleep(0.1)
            assert await h.refused("CONNECT x.test:443 HTTP/1.1\r\n\r\n") == "deny_out:0.0.0.0/0"
            for _, writer in silent:
                writer.close()
    run(test)
