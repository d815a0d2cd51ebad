"""Failed API keys and sign-ins, limited: per source address (an IPv6 source by its /64) and per
key prefix (the first 12 characters, what hutch shows of a key), each a token bucket.

Past a bucket, a wrong key is answered 429 `rate_limited` instead of 401, and said once a window in
the log. A right key is always let in, from anywhere: a key is 256 bits (guessing is hopeless; the
limit keeps a flood cheap and seen), and no one can lock a team out by failing with its key's
prefix or from its address. Memory is bounded: the least recently failing sources and prefixes
are forgotten first.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from hutch.errors import ApiError, Code

log = logging.getLogger("hutch.server.keyguard")

PREFIX_CHARS = 12
MAX_TRACKED = 10_000  # sources and prefixes each


@dataclass
class _Bucket:
    tokens: float
    at: float
    said_at: float = float("-inf")  # when the log last told of it


class KeyGuard:
    """`failed(source, key)` after a key was not valid: raises 429 past the limit, else returns
    (the caller answers its own 401). Thread-safe: the console and E2B's facade check keys on
    worker threads."""

    def __init__(self, burst: int = 30, per_minute: float = 20.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.burst, self.rate, self.clock = burst, per_minute / 60.0, clock
        self._buckets: dict[str, OrderedDict[str, _Bucket]] = {"source": OrderedDict(), "prefix": OrderedDict()}
        self._lock = threading.Lock()

    def failed(self, source: str | None, key: str) -> None:
        now = self.clock()
        with self._lock:
            over = [kind for kind, name in (("source", _source_of(source)), ("prefix", key[:PREFIX_CHARS]))
                    if not self._take(kind, name, now)]
        if over:
            raise ApiError(Code.RATE_LIMITED, "too many failed API keys from here or for this key: wait a minute")

    def _take(self, kind: str, name: str, now: float) -> bool:
        """One failure on the bucket; False if it had none left (and the log told of it, at most
        once a minute a bucket)."""
        buckets = self._buckets[kind]
        b = buckets.pop(name, None) or _Bucket(float(self.burst), now)
        buckets[name] = b  # the most recent last
        while len(buckets) > MAX_TRACKED:
            buckets.popitem(last=False)
        b.tokens, b.at = min(float(self.burst), b.tokens + (now - b.at) * self.rate), now
        if b.tokens >= 1:
            b.tokens -= 1
            return True
        if now - b.said_at >= 60:
            b.said_at = now
            log.warning("failed API keys rate-limited by %s %r", kind, name[:64])
        return False


def _source_of(host: str | None) -> str:
    """A client's address as counted: IPv6 by its /64 (one host holds a whole /64), IPv4 whole."""
    if not host:
        return "-"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host[:64]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)
