"""Failed API keys, limited per source and per key prefix (hutch.server.keyguard), on a clock the
test moves."""

from __future__ import annotations

import pytest

from hutch.errors import ApiError, Code
from hutch.server import keyguard
from hutch.server.keyguard import KeyGuard


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def failures_until_limited(guard: KeyGuard, source: str, key: str, most: int = 100) -> int:
    for n in range(most):
        try:
            guard.failed(source, key)
        except ApiError as e:
            assert e.code == Code.RATE_LIMITED and e.code.status == 429
            return n
    return most


def test_a_source_is_limited_past_its_burst_and_refills_with_time() -> None:
    clock = Clock()
    guard = KeyGuard(burst=5, per_minute=6, clock=clock)
    assert failures_until_limited(guard, "192.0.2.7", "hutch_aaaaaaaaaaaa") == 5
    assert failures_until_limited(guard, "192.0.2.8", "hutch_bbbbbbbbbbbb") == 5  # another source, another prefix
    clock.now += 10  # one failure's worth
    assert failures_until_limited(guard, "192.0.2.7", "hutch_cccccccccccc") == 1


def test_a_key_prefix_is_limited_whatever_the_source() -> None:
    guard = KeyGuard(burst=5, per_minute=6, clock=Clock())
    assert sum(failures_until_limited(guard, f"198.51.100.{i}", "hutch_victimprefix-rest", most=1)
               for i in range(8)) == 5


def test_an_ipv6_source_counts_by_its_64_and_a_mapped_ipv4_as_the_ipv4() -> None:
    guard = KeyGuard(burst=4, per_minute=1, clock=Clock())
    assert sum(failures_until_limited(guard, f"2001:db8:1:2::{i:x}", f"hutch{i}_secret", most=1) for i in range(6)) == 4
    assert failures_until_limited(guard, "2001:db8:1:3::1", "hutch_otherprefix") == 4  # the next /64 is its own
    assert failures_until_limited(guard, "::ffff:192.0.2.9", "hutch_mapped000001") == 4
    assert failures_until_limited(guard, "192.0.2.9", "hutch_mapped000002") == 0  # the same address


def test_memory_is_bounded_by_forgetting_the_oldest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyguard, "MAX_TRACKED", 3)
    guard = KeyGuard(burst=1, per_minute=1, clock=Clock())
    for i in range(10):
        guard.failed(f"192.0.2.{i}", f"hutch{i}_secret")
    assert all(len(b) == 3 for b in guard._buckets.values())
