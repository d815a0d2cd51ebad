"""A box's use over time as plots the page draws in inline SVG: the node's samples (every 5 s, the
last hour it ran) become polyline points here, so the browser needs no chart library."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hutch.node.api import UsageSample
from hutch.store import SandboxRecord

WIDTH, HEIGHT = 600, 120  # the SVG's own units; the page scales it


@dataclass(frozen=True)
class Plot:
    title: str
    now: str  # the newest value, as a person reads it
    ceiling: str  # what the top of the plot stands for
    points: str  # "x,y x,y ..." in the SVG's units
    span: str  # the time the plot covers
    samples: int
    last: tuple[float, float]  # the newest point, marked (a single sample is a point, not a line)


def _mib(n: float) -> str:
    return f"{n / 2**20:.0f} MiB" if n < 10 * 2**30 else f"{n / 2**30:.1f} GiB"


def _points(samples: Sequence[UsageSample], value: Callable[[UsageSample], float], top: float) -> list[tuple[float, float]]:
    first, last = samples[0].timestamp, samples[-1].timestamp
    width = max(last - first, 1.0)
    return [(round((s.timestamp - first) / width * WIDTH, 1), round(HEIGHT - min(value(s) / top, 1.0) * HEIGHT, 1))
            for s in samples]


def _plot(title: str, now: str, ceiling: str, points: list[tuple[float, float]], span: str) -> Plot:
    return Plot(title, now, ceiling, " ".join(f"{x},{y}" for x, y in points), span, len(points), points[-1])


def plots(rec: SandboxRecord, samples: Sequence[UsageSample]) -> list[Plot]:
    """CPU (of the box's own CPUs), memory (of its limit) and disk (of its own disk, or of what it
    used most when it has none); empty without samples."""
    if not samples:
        return []
    span = samples[-1].timestamp - samples[0].timestamp
    took = f"{span / 60:.0f} min" if span >= 60 else f"{span:.0f} s"
    memory = rec.memory_mib * 2**20
    disk = (rec.disk_mib or 0) * 2**20 or max(max(s.disk_used for s in samples), 1)
    last = samples[-1]
    return [
        _plot("CPU", f"{last.cpu_used_pct:.1f} %", f"100 % of {rec.vcpu} vCPU",
              _points(samples, lambda s: s.cpu_used_pct, 100.0), took),
        _plot("Memory", _mib(last.mem_used), _mib(memory), _points(samples, lambda s: s.mem_used, memory), took),
        _plot("Disk", _mib(last.disk_used), _mib(disk), _points(samples, lambda s: s.disk_used, disk), took),
    ]
