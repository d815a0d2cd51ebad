"""Names to addresses for the egress proxy, on the host and never in a box: a fixed map first,
then the system's resolver on threads of the proxy's own (a slow lookup never waits behind disk
work, nor holds the event loop), at most a few at once for each box."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hutch.egress.pool import run_held
from hutch.egress.rules import IPAddress

RESOLVE_TIMEOUT = 10.0  # waiting for a slot included
DNS_THREADS = 16
RESOLVES_PER_BOX = 4  # a box's lookups in the pool at once: a box asking names that never answer holds only these


class Resolver:
    """A fixed map first (tests, split horizons), then the system's resolver unless it is turned off."""

    def __init__(self, hosts: dict[str, list[str]] | None = None, system: bool = True) -> None:
        self.hosts = {name.lower(): [ipaddress.ip_address(a) for a in addrs] for name, addrs in (hosts or {}).items()}
        self.system = system
        self._pool = ThreadPoolExecutor(DNS_THREADS, thread_name_prefix="hutch-egress-dns")

    async def resolve(self, name: str, slots: asyncio.Semaphore | None = None) -> list[IPAddress]:
        """The name's addresses. `slots` are the asking box's: one is held until the lookup has
        ended on its thread, even if this call gave up on it."""
        if name in self.hosts:
            return list(self.hosts[name])
        if not self.system:
            raise LookupError(f"{name} is not in the egress hosts map")
        async with asyncio.timeout(RESOLVE_TIMEOUT):
            return await run_held(self._pool, slots, _lookup, name)


def _lookup(name: str) -> list[IPAddress]:
    # the trailing dot: the name as given, never completed with the host's search domains
    infos = socket.getaddrinfo(name + ".", None, type=socket.SOCK_STREAM)
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
