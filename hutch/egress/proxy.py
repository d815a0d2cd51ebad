"""The egress proxy: the only way out of a box.

Each box gets its own listening Unix socket in its channel directory, so which box is asking is
known from where the connection arrived, never from anything the box says. The guest agent
relays every connection a program in the box makes to its HTTP proxy (127.0.0.1:3128 in the box)
to that socket, byte for byte; everything is decided here:

- `CONNECT host:port` (HTTPS and any TLS): the host is checked against the box's rules, resolved
  here (never by the box), every address checked; then the first TLS record the box sends is
  read, and a server name (SNI) other than the CONNECT host ends the connection.
- `GET http://host/...` (plain HTTP): the same checks, and the Host header must name the same
  host; one request per connection, enforced here (plain.py).
- `CONNECT` to a host the box holds a secret for: the TLS is terminated here with a certificate
  of hutch's CA, and the requests inside are relayed by inject.py, which swaps the secret's
  stand-in for its value. No other TLS is ever terminated; plain HTTP never gets a secret.

A refusal is an HTTP 403 with the deciding rule in `X-Hutch-Egress` (503 `too_many_connections`
or `proxy_busy` past a cap, 429 `rate_limited` past a box's rate of refusals, limits.py); every
attempt, allowed or not, goes to the network log with its bytes each way (netlog.py: on a thread
of its own, a box's refusals coalesced past a rate). The box's policy and its secrets' values are
read from the store on threads of the proxy's own, fresh for each connection (reads.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from hutch.egress import inject, plain, tls
from hutch.egress.ca import CertificateAuthority
from hutch.egress.inject import Injection, Swap
from hutch.egress.limits import EgressLimits, Idle, TokenBucket, descriptor_budget
from hutch.egress.netlog import LogEntry, NetworkLog
from hutch.egress.policy import Policy
from hutch.egress.reads import StoreReads
from hutch.egress.resolve import RESOLVES_PER_BOX, Resolver
from hutch.egress.rules import IPAddress, NetworkRules, Verdict, normalize_host

log = logging.getLogger("hutch.egress")

MAX_HEAD = 64 * 1024
MAX_HELLO = 64 * 1024  # a ClientHello may span records; this much is read to find its name
CONNECT_TIMEOUT = 10.0
CLOSE_TIMEOUT = 10.0
CHUNK = 64 * 1024

Streams = plain.Streams
# The connection to the checked address: (address, port, TLS to check the host with, its name)
Connect = Callable[[str, int, ssl.SSLContext | None, str | None], Awaitable[Streams]]


async def open_upstream(ip: str, port: int, tls_up: ssl.SSLContext | None, name: str | None) -> Streams:
    return await asyncio.open_connection(ip, port, ssl=tls_up, server_hostname=name)


@dataclass(frozen=True)
class Interception:
    """What swapping secrets in takes, given by the server."""

    ca: CertificateAuthority  # signs what the box is shown
    upstream: ssl.SSLContext  # checks the real servers
    # a binding's secret's current value, if the binding and the secret still stand (on the proxy's store threads)
    reveal: Callable[[Injection], str | None]
    audit: Callable[[str, str, Swap], None]  # sandbox id, host, a request that got a secret (on the log's thread)


@dataclass
class _Box:
    """What the proxy keeps of one box's listener."""

    refusals: TokenBucket
    connections: dict[asyncio.Task[None], None] = field(default_factory=dict)  # oldest first
    cut: set[asyncio.Task[None]] = field(default_factory=set)  # closed to make room for other boxes
    resolving: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(RESOLVES_PER_BOX))
    sandbox_id: str | None = None  # whose box it is, once a policy read has told (for refusals made unread)
    unattributed: list[LogEntry] = field(default_factory=list)  # refusals made before that, for their rows
    unattributed_more: int = 0  # ... past as many as the box's cap: counted, told as the last one
    attributing: asyncio.Task[None] | None = None  # the policy read on its way to tell it


class _Refused(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


class EgressProxy:
    """`record` writes a network log row; it is called on the proxy's log thread, never the event
    loop (as is `interception.audit`). `policy_for` and `interception.reveal` read the store; they
    are called on the proxy's store threads (reads.py), never the event loop."""

    def __init__(self, resolver: Resolver, policy_for: Callable[[str], Policy | None],
                 record: Callable[[LogEntry], None],
                 host_addresses: Callable[[], Awaitable[frozenset[IPAddress]]],
                 interception: Interception | None = None, *, limits: EgressLimits | None = None,
                 connect: Connect = open_upstream) -> None:
        self.resolver = resolver
        self.interception = interception
        self.host_addresses = host_addresses
        self.limits = limits or EgressLimits()
        self.connect = connect
        self.netlog = NetworkLog(record, self.limits.refusals_logged_per_second)
        # box key -> its sandbox and rules (None: nobody's box), read off the loop
        self.reads = StoreReads(policy_for, interception.reveal if interception else None)
        self._servers: dict[str, asyncio.Server] = {}
        self._boxes: dict[str, _Box] = {}
        self._open = 0  # every box's connections

    @property
    def max_connections(self) -> int:
        """The cap on every box's connections together, within what the descriptors allow."""
        return min(self.limits.connections, descriptor_budget())

    async def listen(self, key: str, path: Path) -> None:
        """Take connections from box `key` on `path` (replacing any earlier listener of it)."""
        await self.close(key)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a link planted there goes, and is not followed
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # the mode the socket's file is made with: a chmod by path after the bind would follow
            # a link the box put there in between
            os.fchmod(sock.fileno(), 0o600)
            sock.bind(str(path))
            server = await asyncio.start_unix_server(lambda r, w: self._accept(key, r, w), sock=sock, limit=MAX_HEAD)
        except BaseException:
            sock.close()
            raise
        self._servers[key] = server

    async def close(self, key: str) -> None:
        """Stop taking connections from box `key` and cut the ones it has."""
        server = self._servers.pop(key, None)
        if server is not None:
            server.close()
        box = self._boxes.pop(key, None)
        for task in [*(box.connections if box else ()), *([box.attributing] if box and box.attributing else [])]:
            task.cancel()
        self.netlog.forget(key)
        self.reads.forget(key)

    async def close_all(self) -> None:
        for key in list(self._servers):
            await self.close(key)

    def open_connections(self, key: str) -> int:
        box = self._boxes.get(key)
        return len(box.connections) if box else 0

    def _accept(self, key: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        box = self._boxes.get(key)
        now = asyncio.get_running_loop().time()
        if box is None:
            box = self._boxes[key] = _Box(TokenBucket(self.limits.refusals_per_second, self.limits.refusal_burst, now))
        budget = self.max_connections
        cap = self.limits.box_cap(budget)
        if len(box.connections) >= cap:  # a box holding this many open is not browsing
            self._shed(key, box, writer, 503, "too_many_connections", f"a box holds at most {cap} connections")
            return
        if not box.refusals.has(now):  # each refusal cost a store read: past the box's rate, none is made
            self._shed(key, box, writer, 429, "rate_limited", self._rate_message)
            return  # (and before making room: a box shed anyway never takes another's connection)
        if self._open >= budget and not self._make_room(box, budget):
            self._shed(key, box, writer, 503, "proxy_busy", "the proxy holds all the connections it takes: try again later")
            return
        task = asyncio.get_running_loop().create_task(self._serve(key, box, reader, writer))
        box.connections[task] = None
        self._open += 1
        task.add_done_callback(lambda t: self._ended(box, t))

    def _ended(self, box: _Box, task: asyncio.Task[None]) -> None:
        box.connections.pop(task, None)
        box.cut.discard(task)
        self._open -= 1

    def _make_room(self, box: _Box, budget: int) -> bool:
        """Every slot is taken: if `box` holds less than an even share of them, close the oldest
        connection of the box holding the most, when that one holds more than its share."""
        holders = sum(1 for b in self._boxes.values() if b.connections) + (0 if box.connections else 1)
        share = max(1, budget // holders)
        if len(box.connections) >= share:
            return False
        most = max(self._boxes.values(), key=lambda b: len(b.connections) - len(b.cut))
        oldest = next((t for t in most.connections if t not in most.cut), None)
        if len(most.connections) - len(most.cut) <= share or oldest is None:
            return False
        most.cut.add(oldest)
        oldest.cancel()
        return True

    @property
    def _rate_message(self) -> str:
        return f"this box was refused more than {self.limits.refusals_per_second:g} connections a second: try again later"

    def _shed(self, key: str, box: _Box, writer: asyncio.StreamWriter, status: int, reason: str, message: str) -> None:
        """Refuse a connection past a cap or a rate at once, without reading from it nor the store."""
        with contextlib.suppress(ConnectionError, OSError):
            writer.write(_refusal(_Refused(status, reason, message)))
        writer.close()
        self._log_unread(key, box, reason, message)

    def _log_unread(self, key: str, box: _Box, reason: str, message: str) -> None:
        """The row of a refusal made without the store's say."""
        entry = LogEntry(box.sandbox_id or "", time.time(), "", 0, None, "denied", reason, error=message)
        if box.sandbox_id is not None:
            self.netlog.add(key, entry)
            return
        # whose box it is is not known yet (no connection of it has sent a head): one read tells,
        # for all the refusals made meanwhile (a list as long as the box's cap, then its last)
        if len(box.unattributed) < self.limits.per_box:
            box.unattributed.append(entry)
        else:
            box.unattributed[-1] = entry
            box.unattributed_more += 1
        if box.attributing is None:
            box.attributing = asyncio.get_running_loop().create_task(self._attribute(key, box))

    async def _attribute(self, key: str, box: _Box) -> None:
        try:
            policy = await self.reads.policy(key)
        except Exception:
            log.exception("reading the policy of box %s", key)
            policy = None
        finally:
            box.attributing = None
        held, more = box.unattributed, box.unattributed_more
        box.unattributed, box.unattributed_more = [], 0
        if policy is None:
            return  # nobody's box: its refusals are nobody's rows
        box.sandbox_id = policy.sandbox_id
        for entry in [*held, *[held[-1]] * more]:  # the log coalesces them as it does any box's refusals
            self.netlog.add(key, replace(entry, sandbox_id=policy.sandbox_id))

    async def _serve(self, key: str, box: _Box, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        entry: LogEntry | None = None
        upstream: asyncio.StreamWriter | None = None
        idle = Idle(self.limits.idle_seconds)
        token = read = False

        def refund() -> None:  # allowed, or the read failed: the token goes back
            nonlocal token
            if token:
                token = False
                box.refusals.give(asyncio.get_running_loop().time())

        try:
            async with asyncio.timeout(self.limits.head_seconds):
                method, target, headers = await _read_head(reader)
            if not box.refusals.take(asyncio.get_running_loop().time()):
                self._log_unread(key, box, "rate_limited", self._rate_message)
                raise _Refused(429, "rate_limited", self._rate_message)
            token = True
            policy = await self.reads.policy(key)
            read = True
            if policy is None:
                raise _Refused(403, "no_sandbox", "this box belongs to no sandbox")
            box.sandbox_id = policy.sandbox_id
            if method == "CONNECT":
                host, port = _split_host_port(target, None)
                path = None
            else:
                host, port, path = _absolute_url(target)
            entry = LogEntry(policy.sandbox_id, time.time(), host, port, None, "denied", "")
            named = headers.get("host")
            if path is not None and named is not None and _split_host_port(named, port) != (host, port):
                raise _Refused(403, "host_mismatch", f"the Host header {named!r} is not the request's host {host}")
            try:
                request = plain.request(method, path, headers, host, port) if path is not None else None
            except ValueError as e:
                raise _Refused(400, "bad_request", str(e)[:200]) from None
            ip, verdict = await self._decide(policy.rules, host, box)
            entry.ip, entry.rule = str(ip) if ip else None, verdict.rule
            if not verdict.allowed:
                raise _Refused(403, verdict.rule, f"{host}:{port} is not allowed ({verdict.rule})")
            entry.verdict = "allowed"
            refund()
            secrets = [i for i in policy.injections if i.allows(host)] if path is None and self.interception else []
            tls_up = self.interception.upstream if secrets and self.interception else None
            try:
                up_reader, up_writer = await asyncio.wait_for(
                    self.connect(str(ip), port, tls_up, host if tls_up else None), CONNECT_TIMEOUT)
            except (OSError, TimeoutError) as e:  # ssl.SSLError too: the host's certificate did not check out
                entry.verdict, entry.error = "failed", str(e)[:200] or type(e).__name__
                raise _Refused(502, "connect_failed", f"could not connect to {host}:{port}: {entry.error}") from None
            upstream = up_writer
            idle.start()
            if request is not None:
                await plain.exchange((reader, writer), (up_reader, upstream), request, _counter(entry, idle))
                return
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if secrets:
                await self._swap_secrets(key, reader, writer, up_reader, upstream, host, port, secrets, entry, idle)
                return
            async with asyncio.timeout(self.limits.head_seconds):
                allowed = await _tunnel_allowed(reader, upstream, host, verdict, entry)
            if allowed:
                await _pipe(reader, writer, up_reader, upstream, _counter(entry, idle))
        except _Refused as e:
            if entry is not None and entry.verdict == "denied" and not entry.rule:
                entry.rule = e.reason
                if e.reason == "resolve_failed":
                    entry.verdict, entry.error = "failed", e.message[:200]
            with contextlib.suppress(ConnectionError, OSError):
                writer.write(_refusal(e))
                await writer.drain()
        except TimeoutError:  # the head, or a tunnel's first bytes, did not come in time
            if entry is not None:
                entry.error = f"the box's first bytes in the tunnel did not come within {self.limits.head_seconds:g} s"
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            if idle.expired and entry is not None:
                entry.error = f"closed after {self.limits.idle_seconds:g} s idle (no byte either way)"
            elif asyncio.current_task() in box.cut and entry is not None:
                entry.error = "closed to make room for other boxes' connections (this box held more than its share)"
        except Exception:  # never let a box's connection take the proxy down
            log.exception("egress connection of box %s", key)
        finally:
            idle.stop()
            for w in (upstream, writer):
                if w is not None:
                    w.close()
            if not read:
                refund()
            if entry is not None and (behind := self.netlog.add(key, entry)) is not None:
                await asyncio.shield(behind)  # the log is behind: this connection's slot waits for its row

    async def _swap_secrets(self, key: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            up_reader: asyncio.StreamReader, upstream: asyncio.StreamWriter, host: str, port: int,
                            secrets: list[Injection], entry: LogEntry, idle: Idle) -> None:
        """Terminate the box's TLS and relay its requests with their stand-ins swapped."""
        assert self.interception is not None
        hooks = self.interception
        await writer.drain()
        try:
            await writer.start_tls(hooks.ca.server_context(host), ssl_handshake_timeout=self.limits.head_seconds)
        except (ssl.SSLError, OSError, TimeoutError) as e:
            entry.error = f"the box's TLS handshake failed: {e}"[:200]
            return

        def swapped(swap: Swap) -> None:
            if swap.injection.secret_name not in entry.secrets:
                entry.secrets.append(swap.injection.secret_name)
            self.netlog.call(hooks.audit, entry.sandbox_id, host, swap)

        try:
            await inject.relay(reader, writer, (up_reader, upstream), host, port, secrets,
                               lambda inj: self.reads.reveal(key, inj), swapped, _counter(entry, idle),
                               self.limits.idle_seconds)
        finally:  # TLS keeps written data until its close: let it go before the caller drops the socket
            writer.close()
            with contextlib.suppress(OSError, TimeoutError, ssl.SSLError):
                await asyncio.wait_for(writer.wait_closed(), CLOSE_TIMEOUT)

    async def _decide(self, rules: NetworkRules, host: str, box: _Box) -> tuple[IPAddress | None, Verdict]:
        """The address to connect to and the verdict: each address the name resolves to is
        checked, the first allowed one is used (the proxy connects to exactly that address)."""
        try:
            literal: IPAddress | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        own = await self.host_addresses()
        if literal is not None:
            return literal, rules.decide(None, literal, own)
        refused = rules.refuses_unresolved(host)
        if refused is not None:
            return None, refused
        try:
            addresses = await self.resolver.resolve(host, box.resolving)
        except (LookupError, OSError, TimeoutError) as e:
            raise _Refused(502, "resolve_failed", f"could not resolve {host}: {e}") from None
        first: tuple[IPAddress | None, Verdict] | None = None
        for ip in addresses:
            verdict = rules.decide(host, ip, own)
            if verdict.allowed:
                return ip, verdict
            first = first or (ip, verdict)
        assert first is not None
        return first


def _counter(entry: LogEntry, idle: Idle) -> Callable[[int, int], None]:
    """Counts the bytes each way into the entry; each count is a sign of life."""

    def moved(out: int, into: int) -> None:
        entry.bytes_out += out
        entry.bytes_in += into
        idle.touch()

    return moved


# --- HTTP, as little of it as the proxy needs --------------------------------------------------------

async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]]:
    """The request head (the caller gives it its deadline)."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise _Refused(431, "head_too_large", f"request heads are limited to {MAX_HEAD} bytes") from None
    try:
        text = raw.decode("latin-1")
        request_line, *lines = text[:-4].split("\r\n")
        method, target, version = request_line.split(" ")
        if version not in ("HTTP/1.0", "HTTP/1.1") or not method.isascii() or not method.isalpha() \
                or any(ord(c) < 0x21 or ord(c) == 0x7f for c in target):
            raise ValueError
        headers: dict[str, str] = {}
        for line in lines:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip() or "\r" in line or "\n" in line:
                raise ValueError
            headers.setdefault(name.lower(), value.strip())
    except ValueError:
        raise _Refused(400, "bad_request", "not an HTTP proxy request") from None
    return method.upper(), target, headers


def _split_host_port(text: str, default_port: int | None) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or (with a default) a bare host; the host normalized."""
    host, port_text = text, ""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    if port_text:
        if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5 and 0 < int(port_text) < 65536):
            raise _Refused(400, "bad_request", f"bad port in {text[:100]!r}")
        port = int(port_text)
    elif default_port is not None:
        port = default_port
    else:
        raise _Refused(400, "bad_request", f"CONNECT needs host:port, not {text!r}")
    if "%" in host:
        raise _Refused(400, "bad_request", "addresses with a zone are not taken")
    try:
        return str(ipaddress.ip_address(host)), port
    except ValueError:
        pass
    name = normalize_host(host)
    if name is None:
        raise _Refused(400, "bad_request", f"{host!r} is not a host name")
    return name, port


def _absolute_url(target: str) -> tuple[str, int, str]:
    try:
        parts = urlsplit(target)
    except ValueError:
        raise _Refused(400, "bad_request", "not a URL") from None
    if parts.scheme != "http" or not parts.netloc or "@" in parts.netloc:
        raise _Refused(400, "bad_request", "a proxy request names an absolute http:// URL (use CONNECT for https)")
    host, port = _split_host_port(parts.netloc, 80)
    return host, port, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _same_host(a: str, b: str) -> bool:
    return normalize_host(a) == normalize_host(b)


async def _pipe(box_reader: asyncio.StreamReader, box_writer: asyncio.StreamWriter,
                up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter,
                moved: Callable[[int, int], None]) -> None:
    """Copy both ways until both ends are done, counting what is written."""

    async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter, outward: bool) -> None:
        try:
            while data := await src.read(CHUNK):
                dst.write(data)
                moved(len(data), 0) if outward else moved(0, len(data))
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()
        except (ConnectionError, OSError):
            dst.close()

    await asyncio.gather(copy(box_reader, up_writer, True), copy(up_reader, box_writer, False))


async def _read_hello(reader: asyncio.StreamReader, first: bytes) -> tuple[bytes, bytes | None]:
    """After a first byte that opens a TLS handshake record: every byte read (to forward), and
    the ClientHello message put together from as many records as it spans (None if the bytes are
    not one, or it is larger than MAX_HELLO). The caller gives the whole of it one deadline."""
    raw = bytearray(first) + await reader.readexactly(tls.RECORD_HEADER - 1)
    handshake = bytearray()
    while True:
        kind, length = raw[-5], int.from_bytes(raw[-2:], "big")
        if kind != tls.HANDSHAKE or length == 0 or len(raw) + length > MAX_HELLO:
            return bytes(raw), None
        body = await reader.readexactly(length)
        raw += body
        handshake += body
        if len(handshake) >= 4 and len(handshake) >= 4 + int.from_bytes(handshake[1:4], "big"):
            return bytes(raw), bytes(handshake)
        raw += await reader.readexactly(tls.RECORD_HEADER)


async def _tunnel_allowed(reader: asyncio.StreamReader, upstream: asyncio.StreamWriter, host: str,
                          verdict: Verdict, entry: LogEntry) -> bool:
    """Look at what the box sends first in a tunnel before any of it goes on. TLS to a host named
    by a domain must name that host (SNI); where a domain rule is what allowed it, the name must
    be there and readable. Other protocols go on as they are: the address is the checked one."""
    first = await reader.read(1)
    is_tls = first == bytes([tls.HANDSHAKE])
    raw, hello = (await _read_hello(reader, first)) if is_tls else (first, None)
    if is_tls and normalize_host(host) == host:
        name = tls.server_name(hello) if hello is not None else None
        if name is not None and not _same_host(name, host):
            entry.verdict, entry.rule, entry.error = "denied", "sni_mismatch", f"TLS asked for {name[:100]!r}"
            return False
        if name is None and verdict.by_domain:
            entry.verdict, entry.rule, entry.error = "denied", "sni_missing", "TLS without a readable server name"
            return False
    upstream.write(raw)
    entry.bytes_out += len(raw)
    return True


def _refusal(refused: _Refused) -> bytes:
    body = f"hutch egress: {refused.message}\n".encode()
    phrase = {400: "Bad Request", 403: "Forbidden", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
              502: "Bad Gateway", 503: "Service Unavailable"}.get(refused.status, "Error")
    head = (f"HTTP/1.1 {refused.status} {phrase}\r\nX-Hutch-Egress: {refused.reason}\r\n"
            f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode("latin-1", "replace") + body
