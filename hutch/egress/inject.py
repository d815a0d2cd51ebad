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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import h11

from hutch import http_relay
from hutch.egress.rules import domain_matches


@dataclass(frozen=True)
class Injection:
    """One secret bound to one box: where its stand-in may be swapped for its value. With `set`
    (a box's header rule, E2B's network rules), the header is set on every request to its hosts,
    whatever the box sent in it: `standin` is then what stands for the value where an answer
    echoes it, and a rule without a secret (`secret_name` "") sets `format` as it is."""

    secret_id: str
    secret_name: str
    team_id: str  # the secret's owner, for its audit log
    env: str
    standin: str
    header: str  # lower case
    format: str  # holds "{value}" once (a rule without a secret: not at all)
    hosts: tuple[str, ...]  # "api.example.com" or "*.example.com"
    set: bool = False

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


# A binding's stand-in -> its secret's current value; None once the binding or the secret is gone
# (asked at each request, so a detach, a rebind or a delete applies to open connections too). A
# store read: the proxy makes it off the event loop, and only for a request holding a stand-in.
Reveal = Callable[[Injection], Awaitable["str | None"]]


async def swap_headers(headers: list[tuple[bytes, bytes]], injections: list[Injection],
                       reveal: Reveal) -> tuple[list[tuple[bytes, bytes]], list[Injection], list[tuple[bytes, bytes]]]:
    """The headers with every stand-in in its scheme's place replaced, the injections used, and
    (real, stand-in) pairs to take back out of the response's headers."""
    out = list(headers)
    used: list[Injection] = []
    pairs: list[tuple[bytes, bytes]] = []
    for inj in injections:
        if inj.set:
            real = await reveal(inj)
            if real is None:
                continue  # the secret is gone: the header is left as the box sent it
            out = [(name, value) for name, value in out if name != inj.header.encode()]
            out.append((inj.header.encode(), inj.render(real)))
            if inj.secret_name:
                used.append(inj)
                pairs.append((real.encode("latin-1"), inj.standin.encode()))
            continue
        wanted = inj.render(inj.standin).lower()
        for i, (name, value) in enumerate(out):
            if name == inj.header.encode() and value.strip().lower() == wanted:
                real = await reveal(inj)
                if real is None:
                    continue  # detached or deleted since: the stand-in goes on as it is
                out[i] = (name, inj.render(real))
                used.append(inj)
                pairs.append((real.encode("latin-1"), inj.standin.encode()))
    return out, used, pairs


async def relay(box_reader: asyncio.StreamReader, box_writer: asyncio.StreamWriter,
                upstream: http_relay.Upstream, host: str, port: int, injections: list[Injection], reveal: Reveal,
                swapped: Callable[[Swap], None], counted: http_relay.Counted,
                idle_timeout: float = http_relay.IDLE_TIMEOUT) -> None:
    """Relay the box's requests to the host until either side closes, swapping stand-ins in."""

    async def prepare(request: h11.Request) -> http_relay.Forward:
        counted(0, 0)  # a request is a sign of life, with a body or without
        if http_relay.host_of(request) not in (host, f"{host}:{port}"):
            raise http_relay.Answer(403, f"the Host header must name the tunnel's host {host}",
                                    [(b"x-hutch-egress", b"host_mismatch")])
        if request.method in (b"TRACE", b"CONNECT"):  # TRACE echoes the request, secret and all, in its body
            raise http_relay.Answer(405, "TRACE and CONNECT are not relayed to a host secrets are sent to",
                                    [(b"x-hutch-egress", b"method_refused")])
        upgrade = [v.lower() for k, v in request.headers if k == b"upgrade"]
        if upgrade and upgrade != [b"websocket"]:  # after an h2c switch the answer would go back unscrubbed
            raise http_relay.Answer(400, "only a WebSocket upgrade is relayed here",
                                    [(b"x-hutch-egress", b"upgrade_refused")])
        headers, used, pairs = await swap_headers(list(request.headers), injections, reveal)
        method, path = request.method.decode("latin-1"), request.target.decode("latin-1").split("?", 1)[0][:300]

        def answered(status: int | None) -> None:
            for inj in used:
                swapped(Swap(inj, method, path, status))

        return http_relay.Forward(headers, scrub=pairs, answered=answered)

    async def opened() -> http_relay.Upstream:
        return upstream

    await http_relay.relay(box_reader, box_writer, prepare, opened, counted, idle_timeout)
