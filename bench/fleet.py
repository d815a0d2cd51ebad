"""A fleet against one host, measured in the same run: what Ray, PostgreSQL, the API server's
placement and the node's relay add to a create and to a command.

    .venv/bin/python -m bench.fleet [-n 20]

Starts a single-host `hutch serve` (SQLite, the node in its process), measures create-to-first-
command and `commands.run("true")`, stops it; then a fleet on this machine (tests/fleet/cluster.py:
PostgreSQL, a Ray head, two node runtimes in network namespaces, one API server) and measures the
same through its API server. Beside them, the control plane's own cost: the API server's and Ray
head's CPU per create and per command (from /proc), Ray's placement time and the API server's call
to the node (from the server's /metrics). No warm pool on either side: every create boots.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import httpx

from bench.common import bench_env, main_for, stats, timed
from hutch import Sandbox
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR
from tests.fleet.cluster import Fleet
from tests.integration.support import ClientArgs

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: Iterable[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
    return total


def histogram_mean(metrics: str, name: str, labels: str = "") -> float:
    """The mean of a Prometheus histogram in seconds (its _sum over its _count)."""
    def value(kind: str) -> float:
        found = re.search(rf"^{name}_{kind}{re.escape(labels)} ([0-9.e+-]+)$", metrics, re.M)
        return float(found.group(1)) if found else 0.0
    count = value("count")
    return value("sum") / count if count else 0.0


def run_figures(kw: ClientArgs, n: int, watched: dict[str, Callable[[], set[int]]],
                prefix: str) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Create-to-first-command and commands.run, with the CPU each watched group of processes
    (the API server, Ray's head) spent per call meanwhile."""
    made: list[Sandbox] = []
    extra: dict[str, float] = {}

    def create_and_first_command() -> None:
        sb = Sandbox.create(name="bench", **kw)
        sb.commands.run("true")
        made.append(sb)

    def measured(label: str, work: Callable[[], object]) -> list[float]:
        groups = {name: pids() for name, pids in watched.items()}
        before = {name: cpu_seconds(p) for name, p in groups.items()}
        samples = timed(work, n)
        for name, p in groups.items():
            extra[f"{prefix}_{name}_cpu_ms_per_{label}"] = (cpu_seconds(p) - before[name]) / n * 1000
        return samples

    creates = measured("create", create_and_first_command)
    for sb in made:
        sb.kill()
    sb = Sandbox.create(name="bench", **kw)
    sb.commands.run("true")
    runs = measured("command", lambda: sb.commands.run("true"))
    sb.kill()
    return {f"{prefix}_create_to_first_command": stats(creates), f"{prefix}_commands_run": stats(runs)}, extra


def measure(n: int) -> tuple[dict[str, dict[str, float]], list[tuple[str, str]], dict[str, float]]:
    rootfs = base_image.build(DEFAULT_CACHE_DIR)
    figures: dict[str, dict[str, float]] = {}
    extra: dict[str, float] = {}
    with bench_env(rootfs) as (kw, _raw):
        port = int(kw["base_url"].rsplit(":", 1)[1])
        server = _serving_on(port)
        f, e = run_figures(kw, n, {"server": lambda: server}, "single")
        figures.update(f)
        extra.update(e)
    with Fleet(node_names=("a", "b"), apis=1, vcpu=4 * n + 8, memory_mib=1024 * (4 * n + 8)) as fleet:
        api = fleet.api(0)
        assert api.proc is not None
        api_pid = api.proc.pid
        f, e = run_figures(fleet.client_args(0), n, {"api_server": lambda: {api_pid}, "ray_head": fleet.head_pids},
                           "fleet")
        figures.update(f)
        extra.update(e)
        metrics = httpx.get(f"{api.url}/metrics", timeout=10).text
        extra["fleet_placement_ms"] = histogram_mean(metrics, "hutch_fleet_placement_seconds") * 1000
        extra["fleet_boot_call_ms"] = histogram_mean(metrics, "hutch_fleet_node_call_seconds", '{call="boot"}') * 1000
    pairs = [("fleet_create_to_first_command", "single_create_to_first_command"),
             ("fleet_commands_run", "single_commands_run")]
    return figures, pairs, extra


def _serving_on(port: int) -> set[int]:
    """The single host's server: the `hutch serve --port PORT` that bench_env started."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and b"--port" in argv and argv[argv.index(b"--port") + 1:][:1] == [str(port).encode()]:
            found.add(int(pid))
    return found


if __name__ == "__main__":
    main_for("fleet", measure)
