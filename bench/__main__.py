"""Every benchmark, one table, one JSON: `bench/run` (or `.venv/bin/python -m bench [-n 20]`).

Each figure is min/median/p95 over N runs, beside the floor it is compared with, measured in the
same run: ratios, not absolute times, are what to compare across machines.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from bench import core, egress, idle, pause, scale, snapshots
from bench.common import Measurement, report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20, help="runs per figure (default %(default)s)")
    ap.add_argument("--boxes", type=int, default=200, help="cap for the idle-active-boxes count")
    n = ap.parse_args().n
    boxes = ap.parse_args().boxes
    figures: dict[str, dict[str, float]] = {}
    pairs: list[tuple[str, str]] = []
    extra: dict[str, float] = {}
    steps: list[Callable[[], Measurement]] = [
        lambda: core.measure(n), lambda: pause.measure(n), lambda: snapshots.measure(n),
        lambda: egress.measure(n), lambda: idle.measure(rounds=n),
        lambda: scale.measure(boxes)]
    for step in steps:
        f, p, e = step()
        figures.update(f)
        pairs += p
        extra.update(e)
    report("all", n, figures, pairs, extra)


if __name__ == "__main__":
    main()
