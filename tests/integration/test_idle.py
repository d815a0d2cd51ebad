"""Tiered idleness: a box nothing uses is frozen (its cgroup's freezer), costs ~no CPU while frozen,
wakes every WAKE_SECONDS so its timers fire, and its next call thaws it with its processes
carrying on where they were; a pause or a kill of a frozen box thaws it first."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from hutch import Sandbox
from hutch.node import metrics
from hutch.node.idle import WAKE_SECONDS
from tests.integration.support import Server, counter, frozen, make_server, retire, runsc_cli, wait_for

AFTER = 2  # seconds idle before a box is frozen, for these tests
# Each tick starts two processes (mv, sleep) at ~20 ms of CPU each under gVisor: ticking every
# second kept the box near the freezer's 10%-of-a-core line on a busy host (it once never froze again).
COUNT_EVERY = 3
COUNTER = counter(every=COUNT_EVERY)


@pytest.fixture(scope="module")
def freezing() -> Iterator[Server]:
    server = make_server("--warm-pool", "0", "--freeze-idle-after", str(AFTER))
    server.start()
    try:
        yield server
    finally:
        retire(server)


def cpu_ns(runtime_id: str) -> int:
    read = metrics.read_cgroup(runtime_id)
    assert read is not None
    return read[0]


def watch_left_alone(runtime_id: str, seconds: float) -> tuple[int, float]:
    """Leave the box alone for `seconds` (any call would thaw it), looking at it only from the host:
    the CPU its cgroup used meanwhile, and the share of the time its freezer said frozen."""
    cpu, looks, frozen_looks = cpu_ns(runtime_id), 0, 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        looks += 1
        frozen_looks += frozen(runtime_id)
        time.sleep(0.1)
    return cpu_ns(runtime_id) - cpu, frozen_looks / looks


def test_a_frozen_box_uses_almost_nothing_and_carries_on_where_it_was(freezing: Server) -> None:
    sb = Sandbox.create(name="freeze", **freezing.client_args())
    try:
        runtime_id = freezing.record(sb.id).runtime_id
        assert runtime_id
        wait_for(lambda: frozen(runtime_id), timeout=30, what="the idle box to be frozen")
        seconds = 4 * WAKE_SECONDS
        used, share = watch_left_alone(runtime_id, seconds)
        # its sentry, stubs and gofer are stopped but for its wakes (~1.3 ms each, every WAKE_SECONDS);
        # awake it would use ~2.5% of a core. On a loaded host a wake may run late, or find the box
        # busy catching up and leave it awake for a while: the bounds allow for one such wake.
        assert used < 0.01 * seconds * 1e9, f"a frozen box used {used / 1e6:.1f} ms of CPU in {seconds:.0f} s"
        assert share > 0.6, f"and it stayed frozen between its wakes ({share:.0%} of the time)"

        sb.commands.run(COUNTER)  # its next call thaws it (what that costs: bench/idle.py)
        wait_for(lambda: sb.files.exists("/tmp/count"), what="the counter to start")
        pid = sb.commands.run("pgrep -o sh -u user -f 'while :'").stdout.strip()
        before = int(sb.files.read_text("/tmp/count"))
        wait_for(lambda: frozen(runtime_id), timeout=30, what="the idle box to be frozen")
        watch_left_alone(runtime_id, 3 * COUNT_EVERY + WAKE_SECONDS)  # its timers fire at its wakes
        after = int(sb.files.read_text("/tmp/count"))
        assert after >= before + 2, f"the counter went on while nothing called the box ({before} -> {after})"
        assert sb.commands.run("pgrep -o sh -u user -f 'while :'").stdout.strip() == pid, "the same process"
        assert sb.commands.run("echo again").stdout == "again\n", "and it answers"
    finally:
        sb.kill()


def test_a_timer_in_a_box_left_alone_fires_on_time(freezing: Server) -> None:
    """`sleep 20; write` in a box nothing calls: the box is frozen meanwhile, and its wakes let
    the sleep end at most WAKE_SECONDS (plus the freezer's look) late."""
    sb = Sandbox.create(name="timer", **freezing.client_args())
    try:
        runtime_id = freezing.record(sb.id).runtime_id
        assert runtime_id
        started = float(sb.commands.run("date +%s.%N").stdout)
        sb.commands.run("nohup sh -c 'sleep 20; date +%s.%N > /tmp/done' >/dev/null 2>&1 &")
        _, share = watch_left_alone(runtime_id, 20 + WAKE_SECONDS + 2)
        assert share > 0.5, "the box was frozen for most of its sleep"
        late = float(sb.files.read_text("/tmp/done")) - started - 20
        assert late < WAKE_SECONDS + 2, f"the timer fired {late:.2f} s late"
    finally:
        sb.kill()


def test_a_streaming_call_keeps_its_box_awake(freezing: Server) -> None:
    """A command that runs longer than the idle time, silent and without CPU, is never frozen under it."""
    sb = Sandbox.create(name="awake", **freezing.client_args())
    try:
        runtime_id = freezing.record(sb.id).runtime_id
        assert runtime_id
        result = sb.commands.run(f"sleep {AFTER * 3}; echo done")
        assert result.stdout == "done\n"
        # and once it is idle, it is frozen after all
        wait_for(lambda: frozen(runtime_id), timeout=30, what="the idle box to be frozen")
    finally:
        sb.kill()


def test_a_pause_and_a_kill_of_a_frozen_box_thaw_it_first(freezing: Server) -> None:
    sb = Sandbox.create(name="freeze-pause", **freezing.client_args())
    try:
        booted = freezing.record(sb.id).runtime_id
        assert booted
        runtime_id = booted
        sb.files.write("/tmp/kept", "yes")
        wait_for(lambda: frozen(booted), timeout=30, what="the idle box to be frozen")
        sb.pause()
        sb.resume()
        assert sb.files.read_text("/tmp/kept") == "yes"
        resumed = freezing.record(sb.id).runtime_id
        assert resumed
        runtime_id = resumed
        wait_for(lambda: frozen(resumed), timeout=30, what="the resumed box to be frozen")
    finally:
        started = time.monotonic()
        sb.kill()
    assert time.monotonic() - started < 15, "a frozen box's kill does not wait on it"
    wait_for(lambda: runtime_id not in runsc_cli(freezing, "list", "--quiet").split(), what="the box to be gone")
