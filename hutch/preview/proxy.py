"""The preview proxy: browsers and clients reach a published port of a box, and nothing else.

It listens on its own port. A request's Host names what it wants, `{port}-{sandbox id}.{domain}`;
the port must be published for that sandbox, and a private port wants a credential (access.py).
Only then is the box reached: the node opens a tunnel through the box's agent to 127.0.0.1:port
inside it (resuming a paused box first), and the request goes on through hutch.http_relay, so
bodies stream both ways, server-sent events flow as they come, and a WebSocket upgrade becomes
bytes both ways. Every request on a kept-alive connection is checked again, and must name the
same port of the same box as the first. Rotating or unpublishing a port cuts its open connections.

Hostile: everything the client sends (Host, cookies, the query, headers, bodies) and everything
the box's server answers. hutch's own cookie, link parameter and token header never reach the box,
and the box cannot set hutch's cookie (headers.py). A private port is never framed by a page of
another origin. One box or one client cannot hold the connections every other preview needs
(PreviewLimits).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import resource
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

import h11

from hutch import http_relay
from hutch.http_relay import Answer, Forward, Upstream
from hutch.preview import access, headers
from hutch.preview.access import PreviewKeys

log = logging.getLogger("hutch.preview")

MAX_CONNECTIONS = 1024
MAX_PER_CLIENT = 128  # one client address cannot hold every connection
MAX_PER_BOX = 64  # nor can one sandbox's visitors (a browser opens 6 a host): the rest stay for other boxes
MIN_PER_BOX = 8  # however few descriptors the process has, a box's share is never below this
MAX_PER_TEAM = 256  # nor can one team's boxes together (at most half of what the descriptors allow)
IDLE_SECONDS = 300.0  # no next request, no byte of a body or an upgraded connection, a client not reading
FDS_PER_CONNECTION = 8  # a connection holds 2 descriptors (client, tunnel): at most a quarter of the process'


@dataclass(frozen=True)
class PreviewLimits:
    """How much of the server the preview listener may hold. Past `connections` or `per_client`
    a connection is closed at once; past a box's cap (`per_box`, and a quarter of what the
    descriptors allow at most, so a box that never answers its visitors holds no more than that)
    or its team's (`per_team`, and half of what they allow), its first request is answered 503."""

    connections: int = MAX_CONNECTIONS  # and never more than the descriptors allow (FDS_PER_CONNECTION)
    per_client: int = MAX_PER_CLIENT
    per_box: int = MAX_PER_BOX
    per_team: int = MAX_PER_TEAM
    head_seconds: float = http_relay.HEAD_TIMEOUT  # a whole request head: no slow drip (slowloris)
    idle_seconds: float = IDLE_SECONDS

    def box_cap(self, budget: int) -> int:
        """A box's cap when every box's connections together may be `budget`."""
        return min(self.per_box, max(MIN_PER_BOX, budget // 4))

    def team_cap(self, budget: int) -> int:
        """A team's cap (all its boxes') when every box's connections together may be `budget`."""
        return min(self.per_team, max(MIN_PER_BOX, budget // 2))


@dataclass(frozen=True)
class Published:
    """A published port as the store has it now."""

    sandbox_id: str
    port: int
    private: bool
    generation: int
    team_id: str


@dataclass(frozen=True)
class PreviewSite:
    """How preview URLs look: {scheme}://{port}-{id}.{domain}{:url_port}."""

    domain: str
    url_port: int | None  # None: the scheme's default
    https: bool = False

    def url(self, sandbox_id: str, port: int | str) -> str:
        scheme = "https" if self.https else "http"
        suffix = f":{self.url_port}" if self.url_port else ""
        return f"{scheme}://{port}-{sandbox_id}.{self.domain}{suffix}"

    def parse(self, host: str | None) -> tuple[str, int] | None:
        """(sandbox id, port) from a Host header, or None if it is not a preview host."""
        if not host:
            return None
        name, _, port_text = host.rpartition(":")
        if not (port_text.isascii() and port_text.isdigit()):
            name = host
        if not name.endswith("." + self.domain):
            return None
        label = name[: -len(self.domain) - 1]
        port, _, sandbox_id = label.partition("-")
        if "." in label or not (port.isascii() and port.isdigit() and len(port) <= 5) or not sandbox_id:
            return None
        return sandbox_id, int(port)


OpenTunnel = Callable[[str, int], Awaitable[Upstream]]  # raises Answer when the box cannot be reached


def _descriptor_budget() -> int:
    """The connections the process' open-file limit leaves room for (FDS_PER_CONNECTION each)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return MAX_CONNECTIONS if soft == resource.RLIM_INFINITY else soft // FDS_PER_CONNECTION


class PreviewProxy:
    def __init__(self, site: PreviewSite, lookup: Callable[[str, int], Published | None], keys: PreviewKeys,
                 open_tunnel: OpenTunnel, limits: PreviewLimits = PreviewLimits()) -> None:
        self.site, self.lookup, self.keys, self.open_tunnel, self.limits = site, lookup, keys, open_tunnel, limits
        self.max_connections = limits.connections
        self._server: asyncio.Server | None = None
        self._live: dict[tuple[str, int], set[asyncio.Task[None]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._per_client: dict[str, int] = {}
        self._per_box: Counter[str] = Counter()
        self._per_team: Counter[str] = Counter()

    async def start(self, host: str, port: int) -> None:
        # read at start: the server may have raised its limit by then
        self.max_connections = min(self.limits.connections, _descriptor_budget())
        self._server = await asyncio.start_server(self._accept, host, port, limit=http_relay.MAX_HEAD)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()

    def cut(self, sandbox_id: str, port: int | None = None) -> None:
        """End the open connections to a port (every port: None) of a sandbox."""
        for key in [k for k in self._live if k[0] == sandbox_id and port in (None, k[1])]:
            for task in self._live.pop(key, set()):
                task.cancel()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client = str(peer[0]) if peer else "-"
        if len(self._tasks) >= self.max_connections or self._per_client.get(client, 0) >= self.limits.per_client:
            writer.close()
            return
        self._per_client[client] = self._per_client.get(client, 0) + 1
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer, client))
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            left = self._per_client.pop(client, 1) - 1
            if left:
                self._per_client[client] = left

        task.add_done_callback(done)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: str) -> None:
        bound: Published | None = None
        upstream: Upstream | None = None
        me = asyncio.current_task()
        assert me is not None

        async def prepare(request: h11.Request) -> Forward:
            nonlocal bound
            host = http_relay.host_of(request)
            wanted = self.site.parse(host)
            if wanted is None:
                raise Answer(404, "not a preview URL of this server")
            published = self.lookup(*wanted)
            if published is None:
                raise Answer(404, f"port {wanted[1]} of this sandbox is not published")
            if bound is not None and (bound.sandbox_id, bound.port) != (published.sandbox_id, published.port):
                raise Answer(421, "one connection serves one port of one sandbox")
            to_box = self._admit(request, published, host or "", client)
            if bound is None:
                cap = self.limits.box_cap(self.max_connections)
                if self._per_box[published.sandbox_id] >= cap:
                    raise Answer(503, f"this sandbox has {cap} preview connections open already: "
                                      "close some and try again")
                team_cap = self.limits.team_cap(self.max_connections)
                if self._per_team[published.team_id] >= team_cap:
                    raise Answer(503, f"this sandbox's team has {team_cap} preview connections open already: "
                                      "close some and try again")
                bound = published
                self._per_box[published.sandbox_id] += 1
                self._per_team[published.team_id] += 1
                self._live.setdefault((published.sandbox_id, published.port), set()).add(me)
            return Forward(to_box, answer_headers=functools.partial(headers.from_box, private=published.private))

        async def opened() -> Upstream:
            nonlocal upstream
            assert bound is not None
            upstream = await self.open_tunnel(bound.sandbox_id, bound.port)
            return upstream

        try:
            await http_relay.relay(reader, writer, prepare, opened, idle_timeout=self.limits.idle_seconds,
                                   head_timeout=self.limits.head_seconds, stall_timeout=self.limits.idle_seconds)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:  # never let one connection take the proxy down
            log.exception("preview connection")
        finally:
            if bound is not None:
                self._live.get((bound.sandbox_id, bound.port), set()).discard(me)
                for held, key in ((self._per_box, bound.sandbox_id), (self._per_team, bound.team_id)):
                    held[key] -= 1
                    if held[key] <= 0:
                        del held[key]
            for w in (upstream[1] if upstream else None, writer):
                if w is not None:
                    w.close()

    def _admit(self, request: h11.Request, port: Published, host: str, client: str) -> http_relay.Headers:
        """The headers to send on, once the request may go (a private port's credential checked and
        taken off); or an Answer: a refusal, or the redirect that turns a signed link into a cookie."""
        if port.private and headers.framed_from_elsewhere(request.headers):
            raise Answer(403, "a private preview port is framed only by its own pages")
        path, _, query = request.target.decode("latin-1").partition("?")
        params = parse_qsl(query, keep_blank_values=True)
        link = next((v for k, v in params if k == access.LINK_PARAM), None)
        cookie_name = access.cookie_name(port.port, self.site.https)
        ours = [v for n, _, v in (c.partition("=") for c in headers.cookie_pairs(request.headers)) if n == cookie_name]
        tokens = [v.decode("latin-1") for k, v in request.headers if k == access.TOKEN_HEADER.encode()]
        if link is not None:
            if not self.keys.check_expiring("link", link, port.sandbox_id, port.port, port.generation):
                raise Answer(403, "this preview link has expired or was revoked")
            rest = urlencode([(k, v) for k, v in params if k != access.LINK_PARAM])
            path = "/" + path.lstrip("/\\")  # a path, never "//elsewhere": no open redirect
            cookie = self.keys.expiring("cookie", port.sandbox_id, port.port, port.generation,
                                        int(time.time()) + access.COOKIE_SECONDS)
            flags = "; Secure" if self.site.https else ""
            raise Answer(303, "", [(b"location", (path + (f"?{rest}" if rest else "")).encode("latin-1")),
                                   (b"set-cookie", f"{cookie_name}={cookie}; Path=/; Max-Age={access.COOKIE_SECONDS}; "
                                                   f"HttpOnly; SameSite=Lax{flags}".encode()),
                                   (b"cache-control", b"no-store")])
        if port.private:
            by_token = any(self.keys.check_token(t, port.sandbox_id, port.port, port.generation) for t in tokens)
            by_cookie = any(self.keys.check_expiring("cookie", c, port.sandbox_id, port.port, port.generation)
                            for c in ours)
            if not (by_token or by_cookie):
                raise Answer(401, "this preview port is private: open a signed link, or send X-Hutch-Preview-Token")
            if not by_token and headers.from_another_site(request.headers, request.method):
                raise Answer(403, "a private preview port takes its cookie only from its own pages and links")
        return headers.to_box(request.headers, client, host, self.site.https)
