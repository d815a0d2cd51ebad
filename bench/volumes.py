"""Volume figures, each beside its floor measured in the same run.

    .venv/bin/python -m bench.volumes [-n 20]

- a 100 MB write and read in a box (`dd`, then `cat > /dev/null`, each a `commands.run`) on a
  volume, beside the same on the box's own disk;
- a 100 MB write and read through the volume's files API (no box), beside the same through the
  box's files API on its own disk;
- create to first command with two volumes mounted, beside the same with none (the warm pool off
  for both: a box with volumes never comes from it).

Each round takes one sample of every figure and its floor in turn, so that a shared host's load
falls on both alike.
"""

from __future__ import annotations

import os
import secrets
import time
from collections import defaultdict

from bench.common import bench_env, main_for, stats
from hutch import Sandbox, Volume
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR

MB100 = 100 * 2**20
WRITE = "dd if=/dev/zero of={0} bs=1M count=100 status=none"
READ = "cat {0} > /dev/null"


def _since(t: float) -> float:
    return time.perf_counter() - t


def measure(n: int) -> tuple[dict[str, dict[str, float]], list[tuple[str, str]], dict[str, float]]:
    s: defaultdict[str, list[float]] = defaultdict(list)
    payload = os.urandom(MB100)
    with bench_env(base_image.build(DEFAULT_CACHE_DIR)) as (kw, _raw):
        tag = secrets.token_hex(3)
        a = Volume.create(f"bench-a-{tag}", size_mib=512, **kw)
        b = Volume.create(f"bench-b-{tag}", size_mib=64, **kw)
        sb = Sandbox.create(name="bench-volumes", volumes={"/mnt/a": a}, **kw)
        try:
            for _ in range(n):
                for label, path in (("volume", "/mnt/a/big"), ("own_disk", "/home/user/big")):
                    t = time.perf_counter()
                    sb.commands.run(WRITE.format(path))
                    s[f"box_write_100mb_{label}"].append(_since(t))
                    t = time.perf_counter()
                    sb.commands.run(READ.format(path))
                    s[f"box_read_100mb_{label}"].append(_since(t))
                    sb.commands.run(f"rm -f {path}")
                t = time.perf_counter()
                a.files.write("/api-big", payload)
                s["api_write_100mb_volume"].append(_since(t))
                t = time.perf_counter()
                a.files.read("/api-big")
                s["api_read_100mb_volume"].append(_since(t))
                a.files.remove("/api-big")
                t = time.perf_counter()
                sb.files.write("/home/user/api-big", payload)
                s["api_write_100mb_own_disk"].append(_since(t))
                t = time.perf_counter()
                sb.files.read("/home/user/api-big")
                s["api_read_100mb_own_disk"].append(_since(t))
                sb.files.remove("/home/user/api-big")
                for label, mounts in (("two_volumes", {"/mnt/a": a, "/mnt/b": b}), ("no_volumes", None)):
                    t = time.perf_counter()
                    box = Sandbox.create(name="bench-create", volumes=mounts, **kw)
                    box.commands.run("true")
                    s[f"create_to_first_exec_{label}"].append(_since(t))
                    box.kill()
        finally:
            sb.kill()
            a.delete()
            b.delete()
    figures = {k: stats(v) for k, v in s.items()}
    pairs = [("box_write_100mb_volume", "box_write_100mb_own_disk"), ("box_read_100mb_volume", "box_read_100mb_own_disk"),
             ("api_write_100mb_volume", "api_write_100mb_own_disk"), ("api_read_100mb_volume", "api_read_100mb_own_disk"),
             ("create_to_first_exec_two_volumes", "create_to_first_exec_no_volumes")]
    return figures, pairs, {}


def main() -> None:
    main_for("volumes", measure)


if __name__ == "__main__":
    main()
