"""What each box uses, sampled from its cgroup every few seconds and kept for an hour (E2B's
sandbox metrics). The files read are the kernel's, not the box's; each read is bounded anyway.

A box's cgroup is `/hutch/<runtime id>` (hutch.node.spec), under each controller's hierarchy on
cgroup v1 and in the one unified hierarchy on v2. Samples are kept by the box's key, which a box
keeps across pauses, so a resumed box's history goes on where it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from hutch.node.api import UsageSample

INTERVAL_SECONDS = 5.0
KEPT = 720  # an hour of samples per box
CGROUP_ROOT = Path("/sys/fs/cgroup")
READ_LIMIT = 64 * 1024  # memory.stat is a few hundred bytes


@dataclass(frozen=True)
class Watched:
    """A box to sample: its key, its runtime id (its cgroup's name) and its own disk, if any."""
    key: str
    runtime_id: str
    disk_dir: Path | None


def _read(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(READ_LIMIT).decode(errors="replace")
    except OSError:
        return None


def _stat_field(text: str | None, name: str) -> int | None:
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if key == name and value.strip().isdigit():
            return int(value)
    return None


def cgroup_v2() -> bool:
    """Whether the host's cgroups are v2 (one unified tree), not v1."""
    return (CGROUP_ROOT / "cgroup.controllers").exists()


def read_cpu_ns(runtime_id: str, unified: bool | None = None) -> int | None:
    """The CPU time in ns of a box's cgroup alone (the freezer's look, many a second: no memory.stat,
    which the kernel builds at every read); None when it has none."""
    unified = cgroup_v2() if unified is None else unified
    rel = Path("hutch") / runtime_id
    if unified:
        usec = _stat_field(_read(CGROUP_ROOT / rel / "cpu.stat"), "usage_usec")
        return usec * 1000 if usec is not None else None
    cpu_text = _read(CGROUP_ROOT / "cpuacct" / rel / "cpuacct.usage")
    return int(cpu_text) if cpu_text and cpu_text.strip().isdigit() else None


def read_cgroup(runtime_id: str, unified: bool | None = None) -> tuple[int, int, int] | None:
    """(CPU time in ns, memory in bytes, of which page cache) of a box's cgroup; None when it has
    none (it ended, or the host gave it none)."""
    unified = cgroup_v2() if unified is None else unified
    rel = Path("hutch") / runtime_id
    cpu_ns = read_cpu_ns(runtime_id, unified)
    if unified:
        base = CGROUP_ROOT / rel
        memory = _read(base / "memory.current")
        cache = _stat_field(_read(base / "memory.stat"), "file")
    else:
        memory = _read(CGROUP_ROOT / "memory" / rel / "memory.usage_in_bytes")
        stat = _read(CGROUP_ROOT / "memory" / rel / "memory.stat")
        cache = _stat_field(stat, "total_cache")
        cache = _stat_field(stat, "cache") if cache is None else cache
    if cpu_ns is None or memory is None or not memory.strip().isdigit():
        return None
    return cpu_ns, int(memory), cache or 0


def cpu_limit(runtime_id: str, unified: bool | None = None) -> float:
    """The CPUs a box's cgroup may use (its quota), or the host's where it has no quota."""
    unified = cgroup_v2() if unified is None else unified
    rel = Path("hutch") / runtime_id
    if unified:
        quota, _, period = (_read(CGROUP_ROOT / rel / "cpu.max") or "max").strip().partition(" ")
    else:
        quota = (_read(CGROUP_ROOT / "cpu" / rel / "cpu.cfs_quota_us") or "-1").strip()
        period = (_read(CGROUP_ROOT / "cpu" / rel / "cpu.cfs_period_us") or "").strip()
    if quota.isdigit() and period.isdigit() and int(period) > 0:
        return int(quota) / int(period)
    return float(os.cpu_count() or 1)


def remove_cgroup(runtime_id: str) -> None:
    """The box's cgroup directories, once the box is gone (runsc leaves them when its sandbox
    was killed from outside). Only an empty cgroup can be removed; a live one stays."""
    rel = Path("hutch") / runtime_id
    dirs = [CGROUP_ROOT / rel] if cgroup_v2() else [d / rel for d in CGROUP_ROOT.iterdir() if not d.is_symlink()]
    for d in dirs:
        with contextlib.suppress(OSError):
            os.rmdir(d)


class Usage:
    """The samples of every box of a node."""

    def __init__(self) -> None:
        self._samples: dict[str, deque[UsageSample]] = {}
        self._last_cpu: dict[str, tuple[float, int]] = {}  # key -> (monotonic time, CPU ns) of the last read

    def sample(self, boxes: Iterable[Watched]) -> None:
        """One round over `boxes` (blocking reads: run it on a thread). A box with no sample for as
        long as samples are kept is forgotten (killed while paused, or resumed on another node)."""
        unified = cgroup_v2()
        stale = time.time() - KEPT * INTERVAL_SECONDS
        for key in [k for k, ring in self._samples.items() if not ring or ring[-1].timestamp < stale]:
            self.forget(key)
        for box in boxes:
            read = read_cgroup(box.runtime_id, unified)
            if read is None:
                continue
            cpu_ns, memory, cache = read
            now, wall = time.monotonic(), time.time()
            last = self._last_cpu.get(box.key)
            self._last_cpu[box.key] = (now, cpu_ns)
            if last is None or cpu_ns < last[1] or now <= last[0]:
                continue  # the first read of a run (a resumed box's counter starts again): no rate yet
            cpus = cpu_limit(box.runtime_id, unified)
            pct = 100.0 * (cpu_ns - last[1]) / ((now - last[0]) * 1e9 * max(cpus, 0.01))
            disk = 0
            if box.disk_dir is not None:
                with contextlib.suppress(OSError):
                    disk = shutil.disk_usage(box.disk_dir).used
            ring = self._samples.setdefault(box.key, deque(maxlen=KEPT))
            ring.append(UsageSample(timestamp=wall, cpu_used_pct=round(min(pct, 100.0), 2),
                                    mem_used=memory, mem_cache=cache, disk_used=disk))

    async def sample_forever(self, boxes: Callable[[], list[Watched]]) -> None:
        """Every INTERVAL_SECONDS, one round over what `boxes()` says runs (on a thread: the
        reads block)."""
        while True:
            await asyncio.sleep(INTERVAL_SECONDS)
            watched = boxes()
            if watched:
                await asyncio.to_thread(self.sample, watched)

    def paused(self, key: str) -> None:
        """A paused box's CPU counter starts again when it resumes; its samples stay."""
        self._last_cpu.pop(key, None)

    def forget(self, key: str) -> None:
        self._samples.pop(key, None)
        self._last_cpu.pop(key, None)

    def of(self, key: str) -> list[UsageSample]:
        return list(self._samples.get(key, ()))
