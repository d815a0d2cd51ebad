"""The token bucket that rate-limits a box's refusals at the egress proxy, on a clock the test
moves (the proxy gives it the event loop's)."""

from __future__ import annotations

from hutch.egress.limits import TokenBucket


def test_a_bucket_starts_full_and_lets_a_burst_through() -> None:
    bucket = TokenBucket(rate=2, burst=3, now=100.0)
    assert [bucket.take(100.0) for _ in range(4)] == [True, True, True, False], "the burst, then nothing"


def test_it_fills_again_at_its_rate_and_never_past_its_burst() -> None:
    bucket = TokenBucket(rate=2, burst=3, now=0.0)
    for _ in range(3):
        assert bucket.take(0.0)
    assert not bucket.take(0.4), "0.8 of a token"
    assert bucket.take(0.5), "one token after half a second at 2 a second"
    assert not bucket.take(0.5)
    assert [bucket.take(1000.0) for _ in range(4)] == [True, True, True, False], "a long quiet time is worth the burst"


def test_a_token_given_back_is_there_at_once_and_never_past_the_burst() -> None:
    bucket = TokenBucket(rate=1, burst=2, now=0.0)
    assert bucket.take(0.0) and bucket.take(0.0) and not bucket.take(0.0)
    bucket.give(0.0)  # an allowed connection: what it held returns
    assert bucket.take(0.0) and not bucket.take(0.0)
    for _ in range(5):
        bucket.give(0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [True, True, False]


def test_a_clock_that_goes_back_adds_nothing() -> None:
    bucket = TokenBucket(rate=10, burst=1, now=5.0)
    assert bucket.take(5.0)
    assert not bucket.take(4.0) and not bucket.take(5.0)


def test_looking_takes_nothing() -> None:
    bucket = TokenBucket(rate=1, burst=1, now=0.0)
    assert bucket.has(0.0) and bucket.has(0.0), "a look, then another: the token is still there"
    assert bucket.take(0.0) and not bucket.has(0.0)
