"""E2B's host-based addressing, so `E2B_DOMAIN` alone points every e2b SDK at hutch (1.x, 2.x, the
code interpreter's, Python and JS): a TLS listener of its own where

- `api.<domain>` is E2B's control plane (what /e2b serves);
- `49983-<id>.<domain>` is that box's envd (what /e2b/envd serves, the box named by the host);
- `<port>-<id>.<domain>` is the box's other port, as E2B's proxy answers it (ports.py): a box made
  with `allowPublicTraffic` (E2B's default) answers anyone, any other only with its traffic token;
  a WebSocket to it too (wsports.py: noVNC's, of e2b-desktop's stream), and to nothing else.

Each request is rewritten onto the path form and handed to hutch's own app, so the two forms are one
implementation: the same body guard, auth, audit and errors. The host names the box: an
`E2b-Sandbox-Id` or `E2b-Sandbox-Port` the client sends is replaced, never believed.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from hutch import e2b
from hutch.e2b import rest, wsports
from hutch.e2b.envd import ENVD_PORT, HOST_FORM
from hutch.errors import Code

log = logging.getLogger("hutch.e2b")

API_PREFIX = e2b.API_PREFIX.encode()  # where hutch's app serves E2B's control plane
ENVD_PREFIX = e2b.ENVD_PREFIX.encode()  # and envd
_REPLACED = frozenset({b"e2b-sandbox-id", b"e2b-sandbox-port"})


@dataclass(frozen=True)
class Target:
    prefix: bytes
    sandbox_id: str | None = None
    port: str | None = None


def target_of(host: str | None, domain: str) -> Target | None:
    """Where a Host header points under `domain`, or None when it names nothing hutch serves."""
    if not host:
        return None
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    name = name.rstrip(".").lower()
    if not name.endswith("." + domain):
        return None
    label = name[: -len(domain) - 1]
    if label == "api":
        return Target(API_PREFIX)
    port, dash, sandbox_id = label.partition("-")
    if "." in label or not dash or not sandbox_id or not (port.isascii() and port.isdigit() and len(port) <= 5):
        return None
    if not (0 < int(port) < 65536):
        return None
    return Target(ENVD_PREFIX, sandbox_id, None if port == ENVD_PORT else str(int(port)))


class HostRouter:
    """The ASGI app of the listener: a request to one of E2B's hosts, onto hutch's path form."""

    def __init__(self, app: ASGIApp, domain: str) -> None:
        self.app, self.domain = app, domain.lower()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
        target = target_of(host, self.domain)
        if scope["type"] == "websocket" and (target is None or target.port is None):  # a box's other port's only
            return await send({"type": "websocket.close", "code": 1008})
        if target is None:
            return await _not_here(send, self.domain)
        headers = [(k, v) for k, v in scope["headers"] if k not in _REPLACED]
        if target.sandbox_id is not None:
            headers.append((b"e2b-sandbox-id", target.sandbox_id.encode()))
        if target.port is not None:
            headers.append((b"e2b-sandbox-port", target.port.encode()))
        raw = scope.get("raw_path") or scope["path"].encode("latin-1")
        child = dict(scope, headers=headers, path=target.prefix.decode() + scope["path"],
                     raw_path=target.prefix + raw)
        child[HOST_FORM] = True
        await self.app(child, receive, send)


async def _not_here(send: Send, domain: str) -> None:
    status = Code.NOT_FOUND.status
    body = json.dumps(rest.error_body(status, f"not a host this server serves: api.{domain} or "
                                              f"<port>-<sandbox id>.{domain}")).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class HostListener:
    """The TLS listener, a second uvicorn server on the app's own event loop (the app's lifespan
    starts and stops it; its state is the app's)."""

    def __init__(self, app: ASGIApp, domain: str, certfile: str, keyfile: str) -> None:
        self.config = uvicorn.Config(HostRouter(app, domain), lifespan="off", log_level="warning", access_log=False,
                                     loop="asyncio", ssl_certfile=certfile, ssl_keyfile=keyfile,
                                     timeout_graceful_shutdown=5, ws="websockets",
                                     # a message is held whole before the app sees it (wsports): small queues
                                     ws_max_size=wsports.MAX_MESSAGE + 4096, ws_max_queue=2)
        self.server = uvicorn.Server(self.config)
        self._sockets: list[socket.socket] = []
        self._ticks: asyncio.Task[None] | None = None

    async def start(self, hosts: list[str], port: int) -> None:
        """Listen on `port` of each address (a name that resolves to loopback is served on 127.0.0.1
        and ::1 both, so a client that tries either first is answered)."""
        self.config.load()
        self.server.lifespan = self.config.lifespan_class(self.config)
        for host in hosts:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError as e:  # no IPv6 in this kernel
                if host == "::1" and e.errno == errno.EAFNOSUPPORT:
                    continue
                raise
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # accepted sockets inherit it: without it, an answer's head and body (two TLS records)
            # met Nagle and the client's delayed ACK, 40 ms a call (measured: 49 ms against 8 for a 404)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if host == "::1":  # beside 127.0.0.1's own socket; "::" stays dual-stack
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((host, port))
            except OSError as e:
                sock.close()
                # a host without IPv6 on loopback: 127.0.0.1 serves. Anything else (the port taken)
                # fails the start: a client trying ::1 first would reach another program
                if host == "::1" and e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    log.info("E2B's host form: not on [::1]:%d (%s)", port, e)
                    continue
                for made in self._sockets:
                    made.close()
                raise
            self._sockets.append(sock)
        await self.server.startup(sockets=self._sockets)
        self._ticks = asyncio.get_running_loop().create_task(self.server.main_loop())

    async def close(self) -> None:
        if self._ticks is None:
            return
        self.server.should_exit = True
        await self._ticks
        await self.server.shutdown(sockets=self._sockets)
