"""Scale: how many idle active boxes this host holds, a burst of creates at once, and many agents
running commands in parallel.

    .venv/bin/python -m bench.scale [--boxes 200] [--burst 50] [--agents 20] [--commands 50]
                                    [--freeze-idle-after S]

The idle boxes' server freezes them as a default server does (hutch.node.idle; --freeze-idle-after
S sets when, 0 never): how many the host then holds, and what the frozen boxes cost it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from pathlib import Path

import httpx

from bench.common import bench_env, report, stats, wait_for_pool
from hutch import Sandbox, SandboxError
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR, DEFAULT_FREEZE_IDLE_AFTER
from tests.integration.support import ClientArgs

STARTED_SECONDS = 60.0  # a burst's server started this long before it


def used_memory_mib() -> float:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return (int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])) / 1024


def runsc_pss_mib() -> dict[str, float]:
    """Proportional memory of every runsc sandbox and gofer process, by kind (shared pages split)."""
    totals = {"sandbox": 0.0, "gofer": 0.0}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            kind = "sandbox" if args[0].endswith(b"runsc-sandbox") else "gofer" if args[0].endswith(b"runsc-gofer") else ""
            if not kind:
                continue
            for line in (proc / "smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    totals[kind] += int(line.split()[1]) / 1024
        except OSError:
            continue
    return totals


def idle_boxes(kw: ClientArgs, cap: int) -> tuple[dict[str, float], list[Sandbox]]:
    """Create boxes until a create fails, creates get 2x slower than the first ten, or the cap."""
    boxes: list[Sandbox] = []
    latencies: list[float] = []
    before = used_memory_mib()
    reason = "cap"
    while len(boxes) < cap:
        t = time.perf_counter()
        try:
            boxes.append(Sandbox.create(name=f"idle-{len(boxes)}", **kw))
        except SandboxError as e:
            reason = f"create failed: {e.code}"
            break
        latencies.append(time.perf_counter() - t)
        if len(latencies) >= 20 and statistics.median(latencies[-10:]) > 2 * statistics.median(latencies[:10]):
            reason = "creates 2x slower"
            break
    n = len(boxes)
    pss = runsc_pss_mib()
    print(f"idle active boxes: {n} ({reason}); first ten creates {statistics.median(latencies[:10]) * 1000:.0f} ms, "
          f"last ten {statistics.median(latencies[-10:]) * 1000:.0f} ms median")
    return {
        "idle_active_boxes": float(n),
        "host_mib_per_idle_box": (used_memory_mib() - before) / max(1, n),
        "sandbox_pss_mib_per_box": pss["sandbox"] / max(1, n),
        "gofer_pss_mib_per_box": pss["gofer"] / max(1, n),
    }, boxes


def host_cpu_seconds() -> float:
    """CPU time the host spent busy (all cores), from /proc/stat."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def host_cores_busy(seconds: float) -> float:
    """How many of the host's cores were busy, on average, over the next `seconds`."""
    before, started = host_cpu_seconds(), time.perf_counter()
    time.sleep(seconds)
    return (host_cpu_seconds() - before) / (time.perf_counter() - started)


def burst(kw: ClientArgs, size: int) -> list[float]:
    latencies: list[float] = []
    made: list[Sandbox] = []
    lock = threading.Lock()

    def one() -> None:
        t = time.perf_counter()
        sb = Sandbox.create(name="burst", **kw)
        sb.commands.run("true")
        with lock:
            latencies.append(time.perf_counter() - t)
            made.append(sb)

    threads = [threading.Thread(target=one) for _ in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for sb in made:
        sb.kill()
    if len(latencies) != size:
        raise SystemExit(f"burst: only {len(latencies)} of {size} creates succeeded")
    return latencies


def agents(kw: ClientArgs, count: int, commands: int) -> tuple[list[float], float, int]:
    boxes = [Sandbox.create(name=f"agent-{i}", **kw) for i in range(count)]
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()

    def agent(sb: Sandbox) -> None:
        nonlocal errors
        for i in range(commands):
            t = time.perf_counter()
            try:
                ok = sb.commands.run(f"echo {i}").stdout == f"{i}\n"
            except SandboxError:
                ok = False
            with lock:
                latencies.append(time.perf_counter() - t)
                errors += not ok

    started = time.perf_counter()
    threads = [threading.Thread(target=agent, args=(sb,)) for sb in boxes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - started
    for sb in boxes:
        sb.kill()
    return latencies, len(latencies) / took, errors


def bursts(rootfs: Path, size: int) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Rounds of `size` creates at once on a server at its default settings (its pool sized by
    memory): the first a minute after the server started, the next once the pool has refilled; and
    what `size` live idle boxes cost the host meanwhile, the CPU that creates and commands then share."""
    figures: dict[str, dict[str, float]] = {}
    extra: dict[str, float] = {}
    with bench_env(rootfs, warm_pool=None) as (kw, _raw):
        time.sleep(STARTED_SECONDS)  # from its first answer to /health
        extra["pool_a_minute_after_start"] = float(httpx.get(f"{kw['base_url']}/health").json()["warm_pool"])
        figures[f"burst_{size}_creates_to_first_exec_a_minute_after_start"] = stats(burst(kw, size))
        refilled = time.perf_counter()
        wait_for_pool(kw["base_url"], int(extra["pool_a_minute_after_start"]))
        extra["pool_refilled_seconds"] = time.perf_counter() - refilled
        time.sleep(2)
        figures[f"burst_{size}_creates_to_first_exec"] = stats(burst(kw, size))
        live = [Sandbox.create(name=f"live-{i}", **kw) for i in range(size)]
        time.sleep(5)
        extra[f"host_cores_busy_with_{size}_live_idle_boxes"] = host_cores_busy(10)
        for sb in live:
            sb.kill()
    return figures, extra


def measure(boxes: int = 200, burst_size: int = 50, agent_count: int = 20, commands: int = 50,
            freeze_after: float = DEFAULT_FREEZE_IDLE_AFTER
            ) -> tuple[dict[str, dict[str, float]], list[tuple[str, str]], dict[str, float]]:
    rootfs = base_image.build(DEFAULT_CACHE_DIR)
    figures, burst_extra = bursts(rootfs, burst_size)
    with bench_env(rootfs, extra_args=("--freeze-idle-after", str(freeze_after))) as (kw, _raw):
        extra, idle = idle_boxes(kw, boxes)
        extra.update(burst_extra)
        time.sleep(freeze_after + 5)  # frozen by now, if they freeze
        extra["host_cores_busy_with_the_idle_boxes"] = host_cores_busy(10)
        started = time.perf_counter()
        idle[0].commands.run("true")
        extra["first_command_of_an_idle_box_ms"] = (time.perf_counter() - started) * 1000
        for sb in idle:
            sb.kill()
        latencies, throughput, errors = agents(kw, agent_count, commands)
        figures[f"{agent_count}_agents_command_round_trip"] = stats(latencies)
        extra[f"{agent_count}_agents_commands_per_second"] = throughput
        extra[f"{agent_count}_agents_errors"] = float(errors)
    return figures, [], extra


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--boxes", type=int, default=200)
    ap.add_argument("--burst", type=int, default=50)
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--commands", type=int, default=50)
    ap.add_argument("--freeze-idle-after", type=float, default=DEFAULT_FREEZE_IDLE_AFTER, metavar="S")
    a = ap.parse_args()
    figures, pairs, extra = measure(a.boxes, a.burst, a.agents, a.commands, a.freeze_idle_after)
    report("scale", a.commands, figures, pairs, extra)


if __name__ == "__main__":
    main()
