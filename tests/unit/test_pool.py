"""How far the warm pool grows: the largest recent burst of creates, within its memory budget."""

from __future__ import annotations

from hutch.node.pool import BURST_SECONDS, MOST_BOXES, RECENT_SECONDS, Demand, default_most


def test_a_burst_is_the_creates_within_its_window_of_each_other() -> None:
    d = Demand()
    for i in range(30):
        d.add(100.0 + i * 0.1)  # 30 creates in 3 s
    assert d.peak(103.0) == 30
    for i in range(5):
        d.add(200.0 + i * (BURST_SECONDS + 1))  # then creates far apart: bursts of one
    assert d.peak(260.0) == 30, "the larger burst is remembered"


def test_a_burst_is_forgotten_after_recent_seconds_and_a_smaller_later_one_then_counts() -> None:
    d = Demand()
    for i in range(20):
        d.add(0.0 + i * 0.01)
    for i in range(4):
        d.add(100.0 + i * 0.01)
    assert d.peak(100.5) == 20
    assert d.next_change(100.5) == RECENT_SECONDS + 0.19 - 100.5
    assert d.peak(RECENT_SECONDS + 1.0) == 4, "past its time, the big burst no longer holds the pool up"
    assert d.peak(100.1 + RECENT_SECONDS) == 0


def test_no_creates_no_peak() -> None:
    d = Demand()
    assert d.peak(5.0) == 0 and d.next_change(5.0) == RECENT_SECONDS


def test_the_budget_is_a_sixth_of_the_memory_at_most_a_hundred_never_under_the_size() -> None:
    gib = 2**30
    assert default_most(2, 24 * gib) == 64  # 4 GiB at 64 MiB a box
    assert default_most(2, 1 * gib) == 2
    assert default_most(10, 1 * gib) == 10
    assert default_most(2, 512 * gib) == MOST_BOXES
