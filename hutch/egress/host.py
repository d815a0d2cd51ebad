"""The host's own addresses: a box may never connect to them, whatever its rules say (the host's
services listen on them, not only on loopback)."""

from __future__ import annotations

import asyncio
import ipaddress
import time

from pyroute2 import IPRoute

from hutch.egress.rules import IPAddress


class HostAddresses:
    """Every address on this host's interfaces, read again at most every `ttl` seconds (an
    interface may come up or change its address while the server runs)."""

    def __init__(self, ttl: float = 5.0) -> None:
        self.ttl = ttl
        self._read_at = -ttl
        self._addresses: frozenset[IPAddress] = frozenset()
        self._lock = asyncio.Lock()

    async def get(self) -> frozenset[IPAddress]:
        async with self._lock:
            if time.monotonic() - self._read_at >= self.ttl:
                # pyroute2 runs an event loop of its own: on a thread, never inside ours
                self._addresses = await asyncio.to_thread(_read)
                self._read_at = time.monotonic()
        return self._addresses


def _read() -> frozenset[IPAddress]:
    with IPRoute() as ipr:
        found = {a.get_attr(name) for a in ipr.get_addr() for name in ("IFA_ADDRESS", "IFA_LOCAL")}
    return frozenset(ipaddress.ip_address(a.split("%")[0]) for a in found if a)
