"""Idle boxes: the host CPU one idle box costs, beside a raw runsc box that only sleeps (the floor
of the sentry's own wake-ups), and the server's own CPU per idle box, measured in the same run.

    .venv/bin/python -m bench.idle [--boxes 10] [--seconds 30] [-n 10]

With freezing (the default; a second server, which freezes after 2 s), the same boxes once frozen,
woken every 2 s for their timers (hutch.node.idle), and the first command after a thaw beside a
command to the same box awake.

Each box's CPU is its cgroup's (the sentry, its stub processes and its gofer); a raw box's is its
processes' (it has no cgroup of hutch's). Each figure is the median over three windows of a third
of the time each, after the boxes settle.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import RawRunsc, bench_env, box_seconds, process_seconds, report, server_pid, stats, timed
from hutch import Sandbox
from hutch.node import base_image, idle
from hutch.services.config import DEFAULT_CACHE_DIR, ServerConfig
from hutch.store import Store

FREEZE_AFTER = 2.0  # seconds idle before a box is frozen, in the frozen half
SETTLE_SECONDS = 10.0  # a box's first seconds still page in and run the warm-up command
WINDOWS = 3


def descendants(pid: int) -> set[int]:
    found = {pid}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            found |= descendants(int(child))
    return found


def runsc_processes(container_id: str) -> set[int]:
    """A raw box's sandbox and gofer, with their children (systrap's stubs)."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if argv.startswith((b"runsc-sandbox", b"runsc-gofer")) and container_id.encode() in argv:
            found |= descendants(int(entry.name))
    return found


def cpu_percent(readers: list[Callable[[], float]], seconds: float) -> list[float]:
    """Per reader (CPU seconds so far), the share of one core it used over each window; the
    median window of each."""
    per_window: list[list[float]] = []
    for _ in range(WINDOWS):
        before, started = [r() for r in readers], time.monotonic()
        time.sleep(seconds / WINDOWS)
        after, took = [r() for r in readers], time.monotonic() - started
        per_window.append([100 * (b - a) / took for a, b in zip(before, after, strict=True)])
    return [statistics.median(w[i] for w in per_window) for i in range(len(readers))]


def processes_seconds(pids: set[int]) -> Callable[[], float]:
    """A reader of the CPU seconds a set of processes used so far (as cpu_percent takes them)."""
    return lambda: sum(process_seconds(x) for x in pids)


def measure(boxes: int = 10, seconds: float = 30.0,
            rounds: int = 10) -> tuple[dict[str, dict[str, float]], list[tuple[str, str]], dict[str, float]]:
    """Idle boxes awake (--freeze-idle-after 0) and frozen (the default, sooner here)."""
    extra: dict[str, float] = {}
    rootfs = base_image.build(DEFAULT_CACHE_DIR)
    with bench_env(rootfs, extra_args=("--freeze-idle-after", "0")) as (kw, raw):
        data_dir = raw.work.parent / "data"
        store = Store(ServerConfig(data_dir=data_dir).db_url)
        made = [Sandbox.create(name=f"idle-{i}", **kw) for i in range(boxes)]
        for sb in made:
            sb.commands.run("true")
        runtime_ids = [rec.runtime_id for sb in made if (rec := store.get_sandbox(sb.id)) and rec.runtime_id]
        pid = server_pid(data_dir)
        time.sleep(SETTLE_SECONDS)
        shares = cpu_percent([*(box_seconds(r) for r in runtime_ids), lambda: process_seconds(pid)], seconds)
        extra["host_cpu_pct_per_idle_box"] = statistics.median(shares[:-1])
        extra[f"server_cpu_pct_with_{len(runtime_ids)}_idle_boxes"] = shares[-1]
        for sb in made:
            sb.kill()
        extra["raw_runsc_idle_box_cpu_pct"] = raw_idle(raw, seconds)
    figures = frozen_boxes(rootfs, boxes, seconds, rounds, extra)
    return figures, [("first_command_after_thaw", "commands_run_true_awake")], extra


def frozen_boxes(rootfs: Path, boxes: int, seconds: float, rounds: int,
                 extra: dict[str, float]) -> dict[str, dict[str, float]]:
    """With freezing: what a frozen idle box costs, its wakes included, and its first command after a thaw."""
    with bench_env(rootfs, extra_args=("--freeze-idle-after", str(FREEZE_AFTER))) as (kw, raw):
        store = Store(ServerConfig(data_dir=raw.work.parent / "data").db_url)
        made = [Sandbox.create(name=f"frozen-{i}", **kw) for i in range(boxes)]
        runtime_ids = [rec.runtime_id for sb in made if (rec := store.get_sandbox(sb.id)) and rec.runtime_id]
        wait_frozen(runtime_ids)
        pid = server_pid(raw.work.parent / "data")
        shares = cpu_percent([*(box_seconds(r) for r in runtime_ids), lambda: process_seconds(pid)], seconds / 2)
        extra["host_cpu_pct_per_frozen_box"] = statistics.median(shares[:-1])
        extra[f"server_cpu_pct_with_{len(runtime_ids)}_frozen_boxes"] = shares[-1]
        sb, runtime_id = made[0], runtime_ids[0]
        extra["frozen_box_timer_late_s"] = timer_late(sb)
        awake = timed(lambda: sb.commands.run("true"), rounds)
        thawed = []
        for _ in range(rounds):
            wait_frozen([runtime_id])
            thawed += timed(lambda: sb.commands.run("true"), 1)
        for box in made:
            box.kill()
    return {"first_command_after_thaw": stats(thawed), "commands_run_true_awake": stats(awake)}


def timer_late(sb: Sandbox, sleep: float = 10.0, count: int = 3) -> float:
    """How late a `sleep` ends in a box left alone meanwhile (frozen, woken for its timers): the
    most of `count` sleeps started together, a second apart."""
    started = float(sb.commands.run("date +%s.%N").stdout)
    for i in range(count):
        sb.commands.run(f"nohup sh -c 'sleep {sleep + i}; date +%s.%N > /tmp/late{i}' >/dev/null 2>&1 &")
    time.sleep(sleep + count + 4)  # left alone: any call would thaw it
    ends = [float(sb.files.read_text(f"/tmp/late{i}")) - started - (sleep + i) for i in range(count)]
    return max(ends)


def wait_frozen(runtime_ids: list[str], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    for runtime_id in runtime_ids:
        path, word, _ = idle.freezer_file(runtime_id)
        while path.read_text().strip() != word:
            if time.monotonic() > deadline:
                raise RuntimeError(f"box {runtime_id} was not frozen within {timeout:.0f} s")
            time.sleep(0.05)


def raw_idle(raw: RawRunsc, seconds: float, count: int = 3) -> float:
    """The floor: raw runsc boxes with hutch's flags whose only process sleeps."""
    bundle = raw.bundle(["/bin/sleep", "infinity"])
    ids = [raw.start_idle(bundle) for _ in range(count)]
    try:
        time.sleep(SETTLE_SECONDS / 2)
        processes = [runsc_processes(cid) for cid in ids]
        shares = cpu_percent([processes_seconds(p) for p in processes], seconds)
        return statistics.median(shares)
    finally:
        for cid in ids:
            raw.delete(cid)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--boxes", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("-n", type=int, default=10, help="thaws timed (default %(default)s)")
    a = ap.parse_args()
    report("idle", a.n, *measure(a.boxes, a.seconds, a.n))


if __name__ == "__main__":
    main()
