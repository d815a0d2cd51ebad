"""The preview proxy against a stand-in box on loopback: framing refused and forbidden on private
ports, cookie names and the box kept from hutch's cookies both ways, forwarded headers replaced,
connection caps per box, and the timeouts on heads and idle upgraded connections."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from hutch.http_relay import Upstream
from hutch.preview.access import PreviewKeys
from hutch.preview.proxy import PreviewLimits, PreviewProxy, PreviewSite, Published

KEYS = PreviewKeys(b"k" * 32)
PORTS = {("a", 8000): Published("a", 8000, True, 7, "team-1"), ("a", 8001): Published("a", 8001, False, 1, "team-1"),
         ("b", 8000): Published("b", 8000, True, 3, "team-2"), ("c", 8000): Published("c", 8000, False, 5, "team-1")}

# what the stand-in box answers, by path
BOX_HEADERS: dict[str, list[tuple[str, str]]] = {
    "/xfo-deny": [("X-Frame-Options", "DENY"), ("Content-Security-Policy", "default-src 'self'")],
    "/xfo-allow": [("X-Frame-Options", "ALLOWALL"), ("Content-Security-Policy", "frame-ancestors *")],
    "/cookies": [("Set-Cookie", "theirs=1; Path=/"), ("Set-Cookie", "hutch-preview-8000=x; Path=/"),
                 ("Set-Cookie", "__Host-hutch-preview-8000=x; Secure; Path=/"),
                 ("Set-Cookie", "hutch_preview_8000=x"), ("Set-Cookie", "=__Host-hutch-preview-8000=x"),
                 ("Set-Cookie", " HUTCH-Preview-8001 = x"), ("Set-Cookie", "__secure-hutch-preview-8000=x")],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k == name]

    def seen(self) -> list[tuple[str, str]]:
        """The request's headers as the stand-in box saw them (its /headers echo)."""
        return [(k, v) for k, v in json.loads(self.body)]


async def read_reply(reader: asyncio.StreamReader) -> Reply:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    lines = head.decode("latin-1").split("\r\n")
    headers = [(k.strip().lower(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:] if line)]
    size = next((int(v) for k, v in headers if k == "content-length"), 0)
    return Reply(int(lines[0].split()[1]), headers, await reader.readexactly(size))


@dataclass
class Box:
    """A stand-in for a box's web server: keep-alive HTTP/1.1, a header echo, chosen answer
    headers, an upgrade that then sends nothing, and an answer that never ends."""

    server: asyncio.Server | None = None
    closed: list[float] = field(default_factory=list)  # when each connection's client went away

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split()[1]
                if path == "/upgrade":
                    writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n")
                    await writer.drain()
                    while await reader.read(1024):
                        pass
                    break
                if path == "/flood":  # more than any client reads
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n")
                    while True:
                        writer.write(b"x" * 65536)
                        await writer.drain()
                body = json.dumps([line.split(":", 1) for line in lines[1:] if line]).encode()
                extra = "".join(f"{k}: {v}\r\n" for k, v in BOX_HEADERS.get(path, []))
                writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed.append(time.monotonic())
            writer.close()


@dataclass
class Harness:
    proxy: PreviewProxy
    port: int
    box: Box
    host_port: int

    def host(self, sandbox: str = "a", port: int = 8000) -> str:
        return f"{port}-{sandbox}.localhost:{self.host_port}"

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    async def send(self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], path: str = "/",
                   sandbox: str = "a", port: int = 8000, headers: list[tuple[str, str]] | None = None) -> Reply:
        reader, writer = conn
        lines = "".join(f"{k}: {v}\r\n" for k, v in headers or [])
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host(sandbox, port)}\r\n{lines}\r\n".encode())
        await writer.drain()
        return await read_reply(reader)

    async def get(self, path: str = "/", sandbox: str = "a", port: int = 8000,
                  headers: list[tuple[str, str]] | None = None) -> Reply:
        conn = await self.connect()
        try:
            return await self.send(conn, path, sandbox, port, headers)
        finally:
            conn[1].close()

    async def cookie(self, sandbox: str = "a", port: int = 8000) -> str:
        """The `name=value` of a cookie for that port, from a signed link."""
        link = KEYS.expiring("link", sandbox, port, PORTS[(sandbox, port)].generation, int(time.time()) + 60)
        reply = await self.get(f"/?hutch_preview={link}", sandbox, port)
        assert reply.status == 303
        return reply.all("set-cookie")[0].split(";")[0]


@asynccontextmanager
async def harness(https: bool = False, limits: PreviewLimits | None = None) -> AsyncIterator[Harness]:
    box = Box()
    box.server = await asyncio.start_server(box.serve, "127.0.0.1", 0)
    box_port = box.server.sockets[0].getsockname()[1]

    async def open_tunnel(_sandbox: str, _port: int) -> Upstream:
        return await asyncio.open_connection("127.0.0.1", box_port)

    port = free_port()
    site = PreviewSite("localhost", port, https)
    proxy = PreviewProxy(site, lambda s, p: PORTS.get((s, p)), KEYS, open_tunnel,
                         **({"limits": limits} if limits else {}))
    await proxy.start("127.0.0.1", port)
    try:
        yield Harness(proxy, port, box, port)
    finally:
        await proxy.close()
        box.server.close()


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 30))


# --- framing (item: a sibling origin framed a private port with its cookie) ----------------------

FRAMED_BY_SIBLING = [("Sec-Fetch-Site", "same-site"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Dest", "iframe")]


@pytest.mark.parametrize("fetch", [
    FRAMED_BY_SIBLING,
    [("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Dest", "iframe")],
    [("Sec-Fetch-Site", "same-site"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Dest", "frame")],
    [("Sec-Fetch-Site", "same-site"), ("Sec-Fetch-Mode", "no-cors"), ("Sec-Fetch-Dest", "embed")],
    [("Sec-Fetch-Site", "same-site"), ("Sec-Fetch-Mode", "no-cors"), ("Sec-Fetch-Dest", "object")],
    [("Sec-Fetch-Site", "same-site"), ("Sec-Fetch-Mode", "nested-navigate")],  # Chrome 76-80: no Dest
])
def test_a_private_port_refuses_frames_of_other_origins(fetch: list[tuple[str, str]]) -> None:
    async def test() -> None:
        async with harness() as h:
            cookie = [("Cookie", await h.cookie())]
            assert (await h.get(headers=cookie + fetch)).status == 403
            assert (await h.get(headers=[("X-Hutch-Preview-Token", KEYS.token("a", 8000, 7)), *fetch])).status == 403
            link = KEYS.expiring("link", "a", 8000, 7, int(time.time()) + 60)
            assert (await h.get(f"/?hutch_preview={link}", headers=fetch)).status == 403, "no cookie set in a frame"
    run(test)


def test_frames_of_its_own_origin_top_level_links_and_public_ports_still_work() -> None:
    async def test() -> None:
        async with harness() as h:
            cookie = [("Cookie", await h.cookie())]
            own = [("Sec-Fetch-Site", "same-origin"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Dest", "iframe")]
            assert (await h.get(headers=cookie + own)).status == 200
            link_followed = [("Sec-Fetch-Site", "same-site"), ("Sec-Fetch-Mode", "navigate"),
                             ("Sec-Fetch-Dest", "document")]
            assert (await h.get(headers=cookie + link_followed)).status == 200
            public = await h.get(port=8001, headers=FRAMED_BY_SIBLING)
            assert public.status == 200, "public ports stay embeddable"
            assert not public.all("x-frame-options") and not public.all("content-security-policy")
    run(test)


def test_private_answers_forbid_framing_by_other_origins_without_weakening_the_boxs_own() -> None:
    async def test() -> None:
        async with harness() as h:
            cookie = [("Cookie", await h.cookie())]
            plain = await h.get(headers=cookie)
            assert plain.all("x-frame-options") == ["SAMEORIGIN"]
            assert plain.all("content-security-policy") == ["frame-ancestors 'self'"]
            deny = await h.get("/xfo-deny", headers=cookie)
            assert deny.all("x-frame-options") == ["DENY"], "a stricter choice of the box stays"
            assert set(deny.all("content-security-policy")) == {"default-src 'self'", "frame-ancestors 'self'"}
            allow = await h.get("/xfo-allow", headers=cookie)
            assert allow.all("x-frame-options") == ["SAMEORIGIN"]
            # both policies are enforced, so the box's "*" cannot widen hutch's "'self'"
            assert set(allow.all("content-security-policy")) == {"frame-ancestors *", "frame-ancestors 'self'"}
    run(test)


# --- cookies --------------------------------------------------------------------------------------

def test_cookie_names_and_attributes_on_http_and_https() -> None:
    async def test() -> None:
        async with harness() as h:
            link = KEYS.expiring("link", "a", 8000, 7, int(time.time()) + 60)
            attrs = (await h.get(f"/?hutch_preview={link}")).all("set-cookie")[0].split("; ")
            assert attrs[0].startswith("hutch-preview-8000=") and "Path=/" in attrs and "HttpOnly" in attrs
            assert "Secure" not in attrs and not any(a.lower().startswith("domain") for a in attrs)
        async with harness(https=True) as h:
            attrs = (await h.get(f"/?hutch_preview={link}")).all("set-cookie")[0].split("; ")
            assert attrs[0].startswith("__Host-hutch-preview-8000=")
            assert {"Secure", "Path=/", "HttpOnly"} <= set(attrs) and not any(a.lower().startswith("domain")
                                                                              for a in attrs)
    run(test)


@pytest.mark.parametrize("https", [False, True])
def test_only_the_current_name_authenticates(https: bool) -> None:
    async def test() -> None:
        async with harness(https) as h:
            name, _, value = (await h.cookie()).partition("=")
            assert name != "hutch_preview_8000", "the old name is gone"
            assert (await h.get(headers=[("Cookie", f"{name}={value}")])).status == 200
            others = {"hutch_preview_8000", "hutch-preview-8000", "__Host-hutch-preview-8000",
                      "__Secure-hutch-preview-8000", "HUTCH-PREVIEW-8000"} - {name}
            for old in others:
                assert (await h.get(headers=[("Cookie", f"{old}={value}")])).status == 401, old
    run(test)


def test_the_box_neither_sets_nor_sees_hutchs_cookies() -> None:
    async def test() -> None:
        async with harness() as h:
            cookie = await h.cookie()
            answer = await h.get("/cookies", headers=[("Cookie", cookie)])
            assert answer.status == 200 and answer.all("set-cookie") == ["theirs=1; Path=/"]
            sent = f"theirs=1; {cookie}; hutch_preview_8000=old; hutch-preview-8001=x; __Host-hutch-preview-8000=y"
            seen = (await h.get("/headers", headers=[("Cookie", sent)])).seen()
            assert [v.strip() for k, v in seen if k.lower() == "cookie"] == ["theirs=1"]
            public = await h.get("/cookies", port=8001)
            assert public.all("set-cookie") == ["theirs=1; Path=/"], "nor on a public port"
    run(test)


# --- forwarded headers ----------------------------------------------------------------------------

def test_forwarded_headers_are_the_proxys_own() -> None:
    async def test() -> None:
        async with harness() as h:
            lies = [("X-Forwarded-For", "203.0.113.9"), ("X-Forwarded-Host", "evil.example"),
                    ("X-Forwarded-Proto", "https"), ("X-Forwarded-Port", "443"), ("Forwarded", "for=203.0.113.9"),
                    ("X-Real-IP", "203.0.113.9"), ("X_Forwarded_For", "203.0.113.9"), ("x-forwarded-host", "x")]
            seen = (await h.get("/headers", port=8001, headers=lies)).seen()
            got: dict[str, list[str]] = {}
            for k, v in seen:
                got.setdefault(k.lower().replace("_", "-"), []).append(v.strip())
            assert got["x-forwarded-for"] == ["127.0.0.1"] and got["x-real-ip"] == ["127.0.0.1"]
            assert got["x-forwarded-host"] == [h.host("a", 8001)] and got["x-forwarded-proto"] == ["http"]
            assert got["forwarded"] == [f'for="127.0.0.1";host="{h.host("a", 8001)}";proto=http']
            assert "x-forwarded-port" not in got
            assert "203.0.113.9" not in json.dumps(seen) and "evil" not in json.dumps(seen)
    run(test)


# --- connections ----------------------------------------------------------------------------------

def test_past_the_per_box_cap_a_box_is_refused_while_another_answers() -> None:
    async def test() -> None:
        async with harness(limits=PreviewLimits(per_box=3)) as h:
            held = [await h.connect() for _ in range(3)]
            for n, conn in enumerate(held):  # one box over two of its ports
                assert (await h.send(conn, port=8001 if n else 8000,
                                     headers=[("X-Hutch-Preview-Token", KEYS.token("a", 8000, 7))])).status == 200
            assert (await h.get(port=8001)).status == 503
            assert (await h.get(sandbox="b", headers=[("X-Hutch-Preview-Token", KEYS.token("b", 8000, 3))])).status \
                == 200
            held.pop()[1].close()
            await asyncio.sleep(0.2)
            assert (await h.get(port=8001)).status == 200, "a slot comes back when a connection ends"
            for _, writer in held:
                writer.close()
    run(test)


def test_past_the_per_team_cap_a_teams_other_box_is_refused_while_another_team_answers() -> None:
    async def test() -> None:
        async with harness(limits=PreviewLimits(per_box=3, per_team=4)) as h:
            held = [await h.connect() for _ in range(4)]
            for n, conn in enumerate(held):  # three to box a, the fourth to box c: both team-1's
                assert (await h.send(conn, sandbox="c" if n == 3 else "a", port=8000 if n == 3 else 8001)).status == 200
            refused = await h.get(sandbox="c")
            assert refused.status == 503 and b"team" in refused.body
            assert (await h.get(sandbox="b", headers=[("X-Hutch-Preview-Token", KEYS.token("b", 8000, 3))])).status \
                == 200
            held.pop()[1].close()
            await asyncio.sleep(0.2)
            assert (await h.get(sandbox="c")).status == 200, "a slot comes back when a connection ends"
            for _, writer in held:
                writer.close()
    run(test)


def test_the_global_cap_is_kept_within_the_processs_descriptors() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        async def test() -> None:
            async with harness() as h:
                assert h.proxy.max_connections == 256 // 8
        run(test)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_at_few_descriptors_a_box_holds_a_quarter_of_the_previews_and_another_box_answers() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))  # 64 preview connections in all
    try:
        async def test() -> None:
            async with harness() as h:
                token = [("X-Hutch-Preview-Token", KEYS.token("a", 8000, 7))]
                held = [await h.connect() for _ in range(16)]
                for conn in held:
                    assert (await h.send(conn, headers=token)).status == 200
                assert (await h.get(headers=token)).status == 503, "a box's cap: a quarter of the 64"
                assert (await h.get(sandbox="b", headers=[("X-Hutch-Preview-Token", KEYS.token("b", 8000, 3))])).status \
                    == 200
                for _, writer in held:
                    writer.close()
        run(test)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def drip(writer: asyncio.StreamWriter, data: bytes) -> None:
    """A byte every 50 ms (slowloris), until the other end closes."""
    try:
        for byte in data:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.05)
    except ConnectionError:
        pass


async def closed(reader: asyncio.StreamReader) -> bool:
    """Whether the other end closes (within 5 s), sending nothing more."""
    try:
        return await asyncio.wait_for(reader.read(), 5) == b""
    except ConnectionError:
        return True


def test_a_head_that_drips_is_cut_first_and_later_on_a_kept_connection() -> None:
    async def test() -> None:
        async with harness(limits=PreviewLimits(head_seconds=0.5, idle_seconds=5)) as h:
            reader, writer = await h.connect()
            start = time.monotonic()
            await drip(writer, b"GET / HTTP/1.1\r\nHost: x\r\n")
            assert await closed(reader) and time.monotonic() - start < 2

            conn = await h.connect()
            assert (await h.send(conn, port=8001)).status == 200
            await asyncio.sleep(0.8)  # idle between requests is allowed, up to idle_seconds
            start = time.monotonic()
            await drip(conn[1], b"GET / HTTP/1.1\r\nHost: x\r\n")
            assert await closed(conn[0]) and time.monotonic() - start < 2
    run(test)


def test_an_idle_upgraded_connection_is_cut() -> None:
    async def test() -> None:
        async with harness(limits=PreviewLimits(idle_seconds=0.5)) as h:
            reader, writer = await h.connect()
            writer.write(f"GET /upgrade HTTP/1.1\r\nHost: {h.host('a', 8001)}\r\nUpgrade: test\r\n"
                         "Connection: Upgrade\r\n\r\n".encode())
            await writer.drain()
            assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 101")
            start = time.monotonic()
            assert await closed(reader) and time.monotonic() - start < 3
            await asyncio.sleep(0.2)
            assert h.box.closed, "and the box's end of it"
    run(test)


def test_a_client_that_stops_reading_is_cut() -> None:
    async def test() -> None:
        async with harness(limits=PreviewLimits(idle_seconds=0.5)) as h:
            reader, writer = await h.connect()
            writer.write(f"GET /flood HTTP/1.1\r\nHost: {h.host('a', 8001)}\r\n\r\n".encode())
            await writer.drain()
            assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 200")
            start = time.monotonic()  # and read no more: the proxy's writes to us stall
            while not h.box.closed and time.monotonic() - start < 10:
                await asyncio.sleep(0.1)
            assert h.box.closed and time.monotonic() - start < 5
            writer.close()
    run(test)
