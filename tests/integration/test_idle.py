"""Tiered idleness: a box nothing uses is frozen (its cgroup's freezer), costs no CPU while frozen,
and its next call thaws it with its processes carrying on where they were; a pause or a kill of
a frozen box thaws it first."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from hutch import Sandbox
from hutch.node import metrics
from tests.integration.support import Server, counter, frozen, make_server, retire, runsc_cli, wait_for

AFTER = 2  # seconds idle before a box is frozen, for these tests
# Each tick starts two processes (mv, sleep) at ~20 ms of CPU each under gVisor: ticking every
# second kept the box near the freezer's 10%-of-a-core line on a busy host (it once never froze again).
COUNTER = counter(every=3)


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


def test_a_frozen_box_uses_nothing_and_carries_on_where_it_was(freezing: Server) -> None:
    sb = Sandbox.create(name="freeze", **freezing.client_args())
    try:
        runtime_id = freezing.record(sb.id).runtime_id
        assert runtime_id
        sb.commands.run(COUNTER)
        wait_for(lambda: sb.files.exists("/tmp/count"), what="the counter to start")
        pid = sb.commands.run("pgrep -o sh -u user -f 'while :'").stdout.strip()
        before = int(sb.files.read_text("/tmp/count"))

        wait_for(lambda: frozen(runtime_id), timeout=30, what="the idle box to be frozen")
        held = cpu_ns(runtime_id)
        time.sleep(3)  # time goes by while it is frozen
        assert cpu_ns(runtime_id) == held, "nothing of a frozen box runs: its sentry, stubs and gofer are stopped"
        assert frozen(runtime_id)

        assert sb.commands.run("true").exit_code == 0  # its next call thaws it (what that costs: bench/idle.py)
        assert not frozen(runtime_id)
        after = int(sb.files.read_text("/tmp/count"))
        assert after >= before, "the counter went on from where it was, not from the start"
        assert sb.commands.run("pgrep -o sh -u user -f 'while :'").stdout.strip() == pid, "the same process"
        wait_for(lambda: int(sb.files.read_text("/tmp/count")) > after, timeout=10, what="the counter to go on")
        wait_for(lambda: frozen(runtime_id), timeout=30, what="the box to be frozen again")
        assert sb.commands.run("echo again").stdout == "again\n", "and thawed again"
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
