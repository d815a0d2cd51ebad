"""How many paused boxes one host holds: create and pause N boxes (200 by default), then report the
disk their images take, the host memory used before and after, and that the first and the last
still resume with their state.

    .venv/bin/python -m bench.paused_many [-n 200]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.common import bench_env
from hutch import Sandbox
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR


def used_memory_mib() -> float:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())

    def kib(k: str) -> int:
        return int(info[k].split()[0])

    return (kib("MemTotal") - kib("MemAvailable")) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200)
    n = ap.parse_args().n
    with bench_env(base_image.build(DEFAULT_CACHE_DIR)) as (kw, raw):
        data_dir = raw.work.parent / "data"
        before = used_memory_mib()
        started = time.perf_counter()
        ids = []
        for i in range(n):
            sb = Sandbox.create(name=f"many-{i}", **kw)
            sb.files.write("/home/user/me.txt", str(i))
            sb.pause()
            ids.append(sb.id)
            sb.close()
        took = time.perf_counter() - started
        after = used_memory_mib()
        images = sum(f.stat().st_size for f in (data_dir / "checkpoints").rglob("*") if f.is_file())
        statuses = {i.status for i in Sandbox.list(**kw)}
        for index in (0, n - 1):
            back = Sandbox.connect(ids[index], **kw)
            assert back.files.read_text("/home/user/me.txt") == str(index)
            back.kill()
        for sandbox_id in ids[1:-1]:
            Sandbox.kill_by_id(sandbox_id, **kw)
    print(f"{n} boxes created and paused in {took:.0f} s; statuses listed: {sorted(statuses)}")
    print(f"host memory used: {before:.0f} MiB before, {after:.0f} MiB with {n} paused boxes "
          f"({(after - before) / n:.2f} MiB per box)")
    print(f"checkpoint images on disk: {images / 2**20:.0f} MiB ({images / n / 2**20:.1f} MiB per box)")


if __name__ == "__main__":
    main()
