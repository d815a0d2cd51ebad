"""The egress proxy: the only way out of a box.

Each box gets its own listening Unix socket in its channel directory, so which box is asking is
known from where the connection arrived, never from anything the box says. The guest agent
relays every connection a program in the box makes to its HTTP proxy (127.0.0.1:3128 in the box)
to that socket, byte for byte; everything is decided here:

- `CONNECT host:port` (HTTPS and any TLS): the host is checked against the box's rules, resolved
  here (never by the box), every address checked; then the first TLS record the box sends is
  read, and a server name (SNI) other than the CONNECT host ends the connection.
- `GET http://host/...` (plain HTTP): the same checks, and the Host header must name the same
  host; the request goes upstream with `Connection: close`, one request per connection.
- `CONNECT` to a host the box holds a secret for: the TLS is terminated here with a certificate
  of hutch's CA, and the requests inside are relayed by inject.py, which swaps the secret's
  stand-in for its value. No other TLS is ever terminated; plain HTTP never gets a secret.

A refusal is an HTTP 403 with the deciding rule in `X-Hutch-Egress`; every attempt, allowed or
not, goes to the network log with its bytes each way.
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
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from hutch.egress import inject, tls
from hutch.egress.ca import CertificateAuthority
from hutch.egress.inject import Injection, Reveal, Swap
from hutch.egress.rules import IPAddress, NetworkRules, Verdict, normalize_host

log = logging.getLogger("hutch.egress")

MAX_HEAD = 64 * 1024
MAX_HELLO = 64 * 1024  # a ClientHello may span records; this much is read to find its name
MAX_CONNECTIONS_PER_BOX = 256
HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 10.0
RESOLVE_TIMEOUT = 10.0
CLOSE_TIMEOUT = 10.0
CHUNK = 64 * 1024
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "te",
              "trailer", "upgrade"}


@dataclass(frozen=True)
class Policy:
    """Whose box this is and the rules it has now (read at each connection: edits apply at once)."""

    sandbox_id: str
    rules: NetworkRules
    injections: tuple[Injection, ...] = ()  # the box's secrets, with their hosts


@dataclass(frozen=True)
class Interception:
    """What swapping secrets in takes, given by the server."""

    ca: CertificateAuthority  # signs what the box is shown
    upstream: ssl.SSLContext  # checks the real servers
    reveal: Reveal  # a binding's secret's current value, if the binding and the secret still stand
    audit: Callable[[str, str, Swap], None]  # sandbox id, host, a request that got a secret


@dataclass
class LogEntry:
    sandbox_id: str
    at: float
    host: str
    port: int
    ip: str | None
    verdict: str  # "allowed" | "denied" | "failed" (allowed, but it could not be made)
    rule: str
    bytes_out: int = 0  # from the box
    bytes_in: int = 0  # to the box
    error: str | None = None
    secrets: list[str] = field(default_factory=list)  # names of the secrets swapped into its requests


class Resolver:
    """Names to addresses, on the host: a fixed map first (tests, split horizons), then the
    system's resolver unless it is turned off."""

    def __init__(self, hosts: dict[str, list[str]] | None = None, system: bool = True) -> None:
        self.hosts = {name.lower(): [ipaddress.ip_address(a) for a in addrs] for name, addrs in (hosts or {}).items()}
        self.system = system

    async def resolve(self, name: str) -> list[IPAddress]:
        if name in self.hosts:
            return list(self.hosts[name])
        if not self.system:
            raise LookupError(f"{name} is not in the egress hosts map")
        # the trailing dot: the name as given, never completed with the host's search domains
        infos = await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo(name + ".", None, type=socket.SOCK_STREAM),
                                       RESOLVE_TIMEOUT)
        seen: list[IPAddress] = []
        for *_, sockaddr in infos:
            ip = ipaddress.ip_address(sockaddr[0])
            if ip not in seen:
                seen.append(ip)
        if not seen:
            raise LookupError(f"{name} has no address")
        return seen


def load_hosts_file(path: Path) -> dict[str, list[str]]:
    """An /etc/hosts-style file: `ADDRESS NAME [NAME...]`, # comments."""
    hosts: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2:
            ipaddress.ip_address(fields[0])  # a bad address is an error at start, not at use
            for name in fields[1:]:
                hosts.setdefault(name.lower(), []).append(fields[0])
    return hosts


class _Refused(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


class EgressProxy:
    def __init__(self, resolver: Resolver, policy_for: Callable[[str], Policy | None],
                 record: Callable[[LogEntry], None],
                 host_addresses: Callable[[], Awaitable[frozenset[IPAddress]]],
                 interception: Interception | None = None) -> None:
        self.resolver = resolver
        self.interception = interception
        self.policy_for = policy_for  # box key -> its sandbox and rules (None: nobody's box)
        self.record = record
        self.host_addresses = host_addresses
        self._servers: dict[str, asyncio.Server] = {}
        self._connections: dict[str, set[asyncio.Task[None]]] = {}

    async def listen(self, key: str, path: Path) -> None:
        """Take connections from box `key` on `path` (replacing any earlier listener of it)."""
        await self.close(key)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        server = await asyncio.start_unix_server(lambda r, w: self._accept(key, r, w), path=str(path), limit=MAX_HEAD)
        os.chmod(path, 0o600)
        self._servers[key] = server

    async def close(self, key: str) -> None:
        """Stop taking connections from box `key` and cut the ones it has."""
        server = self._servers.pop(key, None)
        if server is not None:
            server.close()
        for task in list(self._connections.pop(key, ())):
            task.cancel()

    async def close_all(self) -> None:
        for key in list(self._servers):
            await self.close(key)

    def _accept(self, key: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks = self._connections.setdefault(key, set())
        if len(tasks) >= MAX_CONNECTIONS_PER_BOX:
            writer.close()  # a box holding this many open is not browsing: no more for now
            return
        task = asyncio.get_running_loop().create_task(self._serve(key, reader, writer))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _serve(self, key: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        entry: LogEntry | None = None
        upstream: asyncio.StreamWriter | None = None
        try:
            method, target, headers = await _read_head(reader)
            policy = self.policy_for(key)
            if policy is None:
                raise _Refused(403, "no_sandbox", "this box belongs to no sandbox")
            if method == "CONNECT":
                host, port = _split_host_port(target, None)
                path = None
            else:
                host, port, path = _absolute_url(target)
            entry = LogEntry(policy.sandbox_id, time.time(), host, port, None, "denied", "")
            named = headers.get("host")
            if path is not None and named is not None and _split_host_port(named, port) != (host, port):
                raise _Refused(403, "host_mismatch", f"the Host header {named!r} is not the request's host {host}")
            ip, verdict = await self._decide(policy.rules, host)
            entry.ip, entry.rule = str(ip) if ip else None, verdict.rule
            if not verdict.allowed:
                raise _Refused(403, verdict.rule, f"{host}:{port} is not allowed ({verdict.rule})")
            entry.verdict = "allowed"
            secrets = [i for i in policy.injections if i.allows(host)] if path is None and self.interception else []
            tls_up = self.interception.upstream if secrets and self.interception else None
            try:
                up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(
                    str(ip), port, ssl=tls_up, server_hostname=host if tls_up else None), CONNECT_TIMEOUT)
            except (OSError, TimeoutError) as e:  # ssl.SSLError too: the host's certificate did not check out
                entry.verdict, entry.error = "failed", str(e)[:200] or type(e).__name__
                raise _Refused(502, "connect_failed", f"could not connect to {host}:{port}: {entry.error}") from None
            upstream = up_writer
            if path is None:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if secrets:
                    await self._swap_secrets(reader, writer, up_reader, upstream, host, port, secrets, entry)
                    return
                if not await _tunnel_allowed(reader, upstream, host, verdict, entry):
                    return
            else:
                request = _origin_request(method, path, headers, host, port)
                upstream.write(request)
                entry.bytes_out += len(request)
            await _pipe(reader, writer, up_reader, upstream, entry)
        except _Refused as e:
            if entry is not None and entry.verdict == "denied" and not entry.rule:
                entry.rule = e.reason
                if e.reason == "resolve_failed":
                    entry.verdict, entry.error = "failed", e.message[:200]
            await _answer(writer, e)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, asyncio.CancelledError):
            pass
        except Exception:  # never let a box's connection take the proxy down
            log.exception("egress connection of box %s", key)
        finally:
            for w in (upstream, writer):
                if w is not None:
                    w.close()
            if entry is not None:
                try:
                    self.record(entry)
                except Exception:
                    log.exception("writing the network log")

    async def _swap_secrets(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            up_reader: asyncio.StreamReader, upstream: asyncio.StreamWriter, host: str, port: int,
                            secrets: list[Injection], entry: LogEntry) -> None:
        """Terminate the box's TLS and relay its requests with their stand-ins swapped."""
        assert self.interception is not None
        hooks = self.interception
        await writer.drain()
        try:
            await writer.start_tls(hooks.ca.server_context(host), ssl_handshake_timeout=HEAD_TIMEOUT)
        except (ssl.SSLError, OSError, TimeoutError) as e:
            entry.error = f"the box's TLS handshake failed: {e}"[:200]
            return

        def swapped(swap: Swap) -> None:
            if swap.injection.secret_name not in entry.secrets:
                entry.secrets.append(swap.injection.secret_name)
            try:
                hooks.audit(entry.sandbox_id, host, swap)
            except Exception:
                log.exception("writing the secret audit log")

        def counted(out: int, into: int) -> None:
            entry.bytes_out += out
            entry.bytes_in += into

        try:
            await inject.relay(reader, writer, (up_reader, upstream), host, port, secrets, hooks.reveal, swapped,
                               counted)
        finally:  # TLS keeps written data until its close: let it go before the caller drops the socket
            writer.close()
            with contextlib.suppress(OSError, TimeoutError, ssl.SSLError):
                await asyncio.wait_for(writer.wait_closed(), CLOSE_TIMEOUT)

    async def _decide(self, rules: NetworkRules, host: str) -> tuple[IPAddress | None, Verdict]:
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
            addresses = await self.resolver.resolve(host)
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


# --- HTTP, as little of it as the proxy needs --------------------------------------------------------

async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]]:
    try:
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
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


def _origin_request(method: str, path: str, headers: dict[str, str], host: str, port: int) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {headers.get('host') or (host if port == 80 else f'{host}:{port}')}"]
    lines += [f"{name}: {value}" for name, value in headers.items() if name not in HOP_BY_HOP and name != "host"]
    lines.append("Connection: close")  # one request per connection: a second one could name another host
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _pipe(box_reader: asyncio.StreamReader, box_writer: asyncio.StreamWriter,
                up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter, entry: LogEntry) -> None:
    """Copy both ways until both ends are done, counting what is written."""

    async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter, outward: bool) -> None:
        try:
            while data := await src.read(CHUNK):
                dst.write(data)
                if outward:
                    entry.bytes_out += len(data)
                else:
                    entry.bytes_in += len(data)
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()
        except (ConnectionError, OSError):
            dst.close()

    await asyncio.gather(copy(box_reader, up_writer, True), copy(up_reader, box_writer, False))


async def _read_hello(reader: asyncio.StreamReader, first: bytes) -> tuple[bytes, bytes | None]:
    """After a first byte that opens a TLS handshake record: every byte read (to forward), and
    the ClientHello message put together from as many records as it spans (None if the bytes are
    not one, or it is larger than MAX_HELLO)."""
    raw = bytearray(first) + await asyncio.wait_for(reader.readexactly(tls.RECORD_HEADER - 1), HEAD_TIMEOUT)
    handshake = bytearray()
    while True:
        kind, length = raw[-5], int.from_bytes(raw[-2:], "big")
        if kind != tls.HANDSHAKE or length == 0 or len(raw) + length > MAX_HELLO:
            return bytes(raw), None
        body = await asyncio.wait_for(reader.readexactly(length), HEAD_TIMEOUT)
        raw += body
        handshake += body
        if len(handshake) >= 4 and len(handshake) >= 4 + int.from_bytes(handshake[1:4], "big"):
            return bytes(raw), bytes(handshake)
        raw += await asyncio.wait_for(reader.readexactly(tls.RECORD_HEADER), HEAD_TIMEOUT)


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


async def _answer(writer: asyncio.StreamWriter, refused: _Refused) -> None:
    body = f"hutch egress: {refused.message}\n".encode()
    phrase = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large",
              502: "Bad Gateway"}.get(refused.status, "Error")
    head = (f"HTTP/1.1 {refused.status} {phrase}\r\nX-Hutch-Egress: {refused.reason}\r\n"
            f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    with contextlib.suppress(ConnectionError, OSError):
        writer.write(head.encode("latin-1", "replace") + body)
        await writer.drain()
