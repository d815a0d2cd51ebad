"""Snapshot and fork figures, beside raw `runsc checkpoint`/`restore` of the same kind of box, same run.

    .venv/bin/python -m bench.snapshots [-n 20]

For an idle box and for one holding 256 MB of incompressible data in a process:
- `snapshot(memory=False)` (files only: the box's own `find` and `tar`), beside `snapshot()`;
- `snapshot()`, beside raw `runsc checkpoint` (what a pause costs), raw checkpoint then restore
  (what a snapshot does today: the source is checkpointed, then restored from its image), and raw
  `checkpoint --leave-running` (the same image, the box never stopped);
- how long the source is away: from the snapshot call to its next `commands.run("true")`
  answered, beside a plain `commands.run("true")` of the same box;
- a fork to its first command (`Sandbox.from_snapshot(snap, 1)`, then `commands.run("true")`),
  beside raw `runsc restore` of one image into a new container then `runsc exec true` (goal: at
  most 1.2x), and beside the bare `runsc restore` (no exec: the stricter floor);
- `sandbox.fork(1)` to its first command (snapshot, boot, and the snapshot's delete in one
  call), beside raw checkpoint, restore, and restore then exec, in a row;
- 10 forks of one snapshot at once to their first commands: the wall time for all, and each
  box's time from the call to its first answer; beside 10 raw restores and execs at once.

Each round takes one sample of every figure, hutch's and raw runsc's in turn, so that a shared
host's load falls on a figure and its floor alike.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import RawRunsc, bench_env, main_for, stats
from bench.pause import HOLD, raw_cycle
from hutch import Sandbox, Snapshot, SnapshotInfo
from hutch.node import base_image
from hutch.node.runsc import RunscConfig
from hutch.services.config import DEFAULT_CACHE_DIR
from tests.integration.support import ClientArgs

FORKS = 10
Samples = defaultdict[str, list[float]]


def holding(sb: Sandbox, mib: int) -> Sandbox:
    """The box, with a process holding `mib` MiB of incompressible data (none for 0)."""
    if mib:
        sb.files.write("/tmp/hold.py", HOLD.format(mib=mib))
        sb.commands.run("nohup python3 /tmp/hold.py >/dev/null 2>&1 &")
        sb.commands.run("until [ -s /tmp/ready ]; do sleep 0.05; done")
    return sb


def since(t: float) -> float:
    return time.perf_counter() - t


def first_commands(boot: Callable[[], list[Sandbox]]) -> list[float]:
    """Each box `boot` makes: its time from the call to its first command answered (all at once).
    The boxes are killed after."""
    t = time.perf_counter()
    boxes = boot()

    def first(sb: Sandbox) -> float:
        sb.commands.run("true")
        return since(t)

    with ThreadPoolExecutor(len(boxes)) as pool:
        out = list(pool.map(first, boxes))
        list(pool.map(lambda sb: sb.kill(), boxes))
    return out


class RawImage:
    """A raw box like `holding`'s and its image: the floors of a snapshot that leaves it running,
    and of boxes restored from one image."""

    def __init__(self, raw: RawRunsc, mib: int) -> None:
        self.raw, self.args = raw, ["/usr/bin/python3", "-c", HOLD.format(mib=mib)]
        self.cid = raw.start_idle(raw.bundle(self.args))
        while b"1" not in raw.exec(self.cid, "/bin/sh", "-c", "cat /tmp/ready 2>/dev/null || true"):
            time.sleep(0.05)
        self.image = raw.work / f"image-{secrets.token_hex(4)}"

    def checkpoint_leave_running(self) -> float:
        shutil.rmtree(self.image, ignore_errors=True)
        self.image.mkdir()
        t = time.perf_counter()
        subprocess.run([*self.raw.cmd, "checkpoint", f"--image-path={self.image}", "--exclude-committed-zero-pages",
                        f"--compression={RunscConfig(self.raw.work).checkpoint_compression}", "--leave-running",
                        self.cid], check=True, timeout=300)
        return since(t)

    def restores(self, count: int) -> list[float]:
        """`count` new containers from the image at once (each with a bundle, so a cgroup, of its
        own), each one's time to its first `exec true` answered. They are removed after."""
        bundles = [self.raw.bundle(self.args) for _ in range(count)]
        t = time.perf_counter()

        def restore(bundle: Path) -> tuple[str, float]:
            cid = "r" + secrets.token_hex(12)
            subprocess.run([*self.raw.cmd, "restore", "--detach", f"--bundle={bundle}", f"--image-path={self.image}",
                            cid], check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=300)
            self.raw.exec(cid, "/bin/true")
            return cid, since(t)

        with ThreadPoolExecutor(count) as pool:
            done = list(pool.map(restore, bundles))
            list(pool.map(self.raw.delete, [cid for cid, _ in done]))
        return [took for _, took in done]

    def close(self) -> None:
        self.raw.delete(self.cid)
        shutil.rmtree(self.image, ignore_errors=True)


def raw_checkpoint_and_restore(raw: RawRunsc, mib: int) -> tuple[float, float, int]:
    """pause.py's raw cycle once (a fresh raw box, checkpointed, then restored); its image goes."""
    before = set(raw.work.glob("image-*"))
    try:
        [checkpoint], [restore], size = raw_cycle(raw, mib, 1)
    finally:
        for image in set(raw.work.glob("image-*")) - before:
            shutil.rmtree(image, ignore_errors=True)
    return checkpoint, restore, size


def one_round(s: Samples, sb: Sandbox, snap: SnapshotInfo, box: RawImage, raw: RawRunsc, mib: int,
              kw: ClientArgs) -> tuple[int, int]:
    """One sample of each single-box figure; the sizes of hutch's snapshot and of the raw image."""
    t = time.perf_counter()
    sb.commands.run("true")
    s["plain"].append(since(t))
    t = time.perf_counter()
    taken = sb.snapshot()
    s["take"].append(since(t))
    sb.commands.run("true")
    s["away"].append(since(t))
    Snapshot.delete_by_id(taken.id, **kw)
    t = time.perf_counter()
    files = sb.snapshot(memory=False)
    s["files_only"].append(since(t))
    Snapshot.delete_by_id(files.id, **kw)
    checkpoint, restore, raw_size = raw_checkpoint_and_restore(raw, mib)
    s["raw_checkpoint"].append(checkpoint)
    s["raw_restore"].append(restore)
    s["raw_checkpoint_restore"].append(checkpoint + restore)
    s["raw_leave_running"].append(box.checkpoint_leave_running())
    s["one"] += first_commands(lambda: Sandbox.from_snapshot(snap, 1, **kw))
    s["raw_one"] += box.restores(1)
    s["call"] += first_commands(lambda: sb.fork(1))
    s["raw_call"].append(checkpoint + restore + s["raw_one"][-1])
    return taken.size_bytes, raw_size


def many_round(s: Samples, snap: SnapshotInfo, box: RawImage, kw: ClientArgs) -> None:
    times = first_commands(lambda: Sandbox.from_snapshot(snap, FORKS, **kw))
    s["wall"].append(max(times))
    s["each"] += times
    times = box.restores(FORKS)
    s["raw_wall"].append(max(times))
    s["raw_each"] += times


# figure name (with {label} and {k}) -> its samples' key; and each figure's floors
FIGURES = {
    "snapshot_{label}": "take", "snapshot_files_only_{label}": "files_only",
    "snapshot_to_next_exec_{label}": "away", "snap_plain_run_true_{label}": "plain",
    "fork_to_first_exec_{label}": "one", "fork_call_to_first_exec_{label}": "call",
    "forks_{k}_wall_{label}": "wall", "forks_{k}_each_{label}": "each",
    "raw_snap_checkpoint_{label}": "raw_checkpoint", "raw_snap_restore_{label}": "raw_restore",
    "raw_snap_checkpoint_restore_{label}": "raw_checkpoint_restore",
    "raw_snap_leave_running_{label}": "raw_leave_running", "raw_restore_exec_{label}": "raw_one",
    "raw_fork_call_{label}": "raw_call", "raw_restore_exec_{k}_wall_{label}": "raw_wall",
    "raw_restore_exec_{k}_each_{label}": "raw_each",
}
PAIRS = [
    ("snapshot_{label}", "raw_snap_checkpoint_{label}"), ("snapshot_{label}", "raw_snap_checkpoint_restore_{label}"),
    ("snapshot_{label}", "raw_snap_leave_running_{label}"), ("snapshot_files_only_{label}", "snapshot_{label}"),
    ("snapshot_to_next_exec_{label}", "snap_plain_run_true_{label}"),
    ("fork_to_first_exec_{label}", "raw_restore_exec_{label}"), ("fork_to_first_exec_{label}", "raw_snap_restore_{label}"),
    ("fork_call_to_first_exec_{label}", "raw_fork_call_{label}"),
    ("forks_{k}_wall_{label}", "raw_restore_exec_{k}_wall_{label}"),
    ("forks_{k}_each_{label}", "raw_restore_exec_{k}_each_{label}"),
]


def measure(n: int) -> tuple[dict[str, dict[str, float]], list[tuple[str, str]], dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}
    extra: dict[str, float] = {}
    pairs: list[tuple[str, str]] = []
    with bench_env(base_image.build(DEFAULT_CACHE_DIR)) as (kw, raw):
        for label, mib in (("idle", 0), ("256mb", 256)):
            sb = holding(Sandbox.create(name=f"bench-snap-{label}", **kw), mib)
            snap = sb.snapshot()  # the one the forks boot from
            box = RawImage(raw, mib)
            box.checkpoint_leave_running()
            s: Samples = defaultdict(list)
            size = raw_size = 0
            try:
                for _ in range(n):
                    size, raw_size = one_round(s, sb, snap, box, raw, mib, kw)
                for _ in range(max(3, n // 4)):
                    many_round(s, snap, box, kw)
            finally:
                box.close()
                Snapshot.delete_by_id(snap.id, **kw)
                sb.kill()
            figures |= {name.format(label=label, k=FORKS): stats(s[key]) for name, key in FIGURES.items()}
            pairs += [(a.format(label=label, k=FORKS), b.format(label=label, k=FORKS)) for a, b in PAIRS]
            extra[f"snapshot_mib_{label}"] = size / 2**20
            extra[f"raw_image_mib_{label}"] = raw_size / 2**20
    return figures, pairs, extra


def main() -> None:
    main_for("snapshots", measure)


if __name__ == "__main__":
    main()
