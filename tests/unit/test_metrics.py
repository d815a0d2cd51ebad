"""A box's usage samples read from its cgroup's files, on both cgroup layouts (a directory laid
out as the kernel lays out /sys/fs/cgroup)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hutch.node import metrics

BOX = "h0123456789abcdef01234567"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def v1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(metrics, "CGROUP_ROOT", tmp_path)
    write(tmp_path / "cpuacct" / "hutch" / BOX / "cpuacct.usage", "1000000000\n")
    write(tmp_path / "memory" / "hutch" / BOX / "memory.usage_in_bytes", "104857600\n")
    write(tmp_path / "memory" / "hutch" / BOX / "memory.stat", "cache 1\nrss 2\ntotal_cache 83886080\n")
    write(tmp_path / "cpu" / "hutch" / BOX / "cpu.cfs_quota_us", "200000\n")
    write(tmp_path / "cpu" / "hutch" / BOX / "cpu.cfs_period_us", "100000\n")
    return tmp_path


@pytest.fixture
def v2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(metrics, "CGROUP_ROOT", tmp_path)
    write(tmp_path / "cgroup.controllers", "cpu memory pids\n")
    write(tmp_path / "hutch" / BOX / "cpu.stat", "usage_usec 1000000\nuser_usec 900000\n")
    write(tmp_path / "hutch" / BOX / "memory.current", "104857600\n")
    write(tmp_path / "hutch" / BOX / "memory.stat", "anon 1\nfile 83886080\n")
    write(tmp_path / "hutch" / BOX / "cpu.max", "max 100000\n")
    return tmp_path


def test_cgroup_v1_and_v2_read_alike(v1: Path) -> None:
    assert metrics.read_cgroup(BOX) == (10**9, 100 << 20, 80 << 20)
    assert metrics.cpu_limit(BOX) == 2.0
    assert metrics.read_cgroup("h" + "f" * 24) is None  # no cgroup: no sample
    assert metrics.read_cpu_ns(BOX) == 10**9 and metrics.read_cpu_ns("h" + "f" * 24) is None


def test_cgroup_v2(v2: Path) -> None:
    assert metrics.read_cgroup(BOX) == (10**9, 100 << 20, 80 << 20)
    assert metrics.read_cpu_ns(BOX) == 10**9
    assert metrics.cpu_limit(BOX) == float(os.cpu_count() or 1)  # "max": the host's CPUs
    (v2 / "hutch" / BOX / "cpu.max").write_text("50000 100000\n")
    assert metrics.cpu_limit(BOX) == 0.5


def test_samples_are_rates_kept_per_box_and_restart_after_a_pause(v1: Path) -> None:
    usage = metrics.Usage()
    box = metrics.Watched("key-1", BOX, None)
    usage.sample([box])
    assert usage.of("key-1") == []  # the first read gives no rate
    cpu = v1 / "cpuacct" / "hutch" / BOX / "cpuacct.usage"
    cpu.write_text(str(10**9 + 10**12))  # far more than two CPUs could do in the interval: capped
    usage.sample([box])
    [first] = usage.of("key-1")
    assert first.cpu_used_pct == 100.0 and first.mem_used == 100 << 20 and first.mem_cache == 80 << 20
    usage.paused("key-1")
    cpu.write_text("5")  # a resumed box's new cgroup counts from zero
    usage.sample([box])
    assert len(usage.of("key-1")) == 1  # kept across the pause, no rate from the restart
    usage.forget("key-1")
    assert usage.of("key-1") == []


def test_an_empty_cgroup_is_removed_and_a_live_one_kept(v1: Path) -> None:
    empty = v1 / "pids" / "hutch" / BOX
    empty.mkdir(parents=True)
    metrics.remove_cgroup(BOX)
    assert not empty.exists()
    assert (v1 / "memory" / "hutch" / BOX).exists()  # holds files: as a cgroup with processes, not removable


def test_a_box_unsampled_for_an_hour_is_forgotten(v1: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    usage = metrics.Usage()
    box = metrics.Watched("key-1", BOX, None)
    usage.sample([box])
    (v1 / "cpuacct" / "hutch" / BOX / "cpuacct.usage").write_text(str(2 * 10**9))
    usage.sample([box])
    assert len(usage.of("key-1")) == 1
    later = time.time() + metrics.KEPT * metrics.INTERVAL_SECONDS + 1
    monkeypatch.setattr(time, "time", lambda: later)
    usage.sample([])  # killed while paused: the node never stopped it
    assert usage.of("key-1") == []
