"""The host's own addresses: a box may never connect to them, whatever its rules say (the host's
services listen on them, not only on loopback)."""

from __future__ import annotations

import asyncio
import ipaddress
import time
from concurrent.futures import ThreadPoolExecutor

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
        # a thread of its own: every egress connection waits for this read, never behind disk work
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="hutch-egress-host")

    async def get(self) -> frozenset[IPAddress]:
        async with self._lock:
            if time.monotonic() - self._read_at >= self.ttl:
                # pyroute2 runs an event loop of its own: on a thread, never inside ours
                self._addresses = await asyncio.get_running_loop().run_in_executor(self._pool, _read)
                self._read_at = time.monotonic()
        return self._addresses


def _read() -> frozenset[IPAddress]:
    with IPRoute() as ipr:
        found = {a.get_attr(name) for a in ipr.get_addr() for name in ("IFA_ADDRESS", "IFA_LOCAL")}
    return frozenset(ipaddress.ip_address(a.split("%")[0]) for a in found if a)
