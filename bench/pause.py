"""Pause and resume figures, beside raw `runsc checkpoint`/`restore` of the same box, same run.

    bench/run   (or .venv/bin/python bench/pause.py [-n 20])

For an idle box and for one holding 256 MB of incompressible data in a process: `pause()`, and
`resume()` through to the first command answered; as floors, `runsc checkpoint` and
`runsc restore` of a raw box with the same root, flags and process. Also the size on disk of one
paused box, and from it how many paused boxes fit on this disk.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
from pathlib import Path

from bench.common import RawRunsc, bench_env, main_for, stats
from hutch import Sandbox
from hutch.node import base_image
from hutch.node.runsc import RunscConfig
from hutch.services.config import DEFAULT_CACHE_DIR

HOLD = "import os, time\nx = bytearray(os.urandom(2**20)) * {mib}\nopen('/tmp/ready', 'w').write('1')\ntime.sleep(1e9)\n"


def box_cycle(sb: Sandbox, n: int) -> tuple[list[float], list[float]]:
    pauses, resumes = [], []
    for _ in range(n):
        t = time.perf_counter()
        sb.pause()
        pauses.append(time.perf_counter() - t)
        t = time.perf_counter()
        sb.resume()
        sb.commands.run("true")
        resumes.append(time.perf_counter() - t)
    return pauses, resumes


def raw_cycle(raw: RawRunsc, mib: int, n: int) -> tuple[list[float], list[float], int]:
    bundle = raw.bundle(["/usr/bin/python3", "-c", HOLD.format(mib=mib)])
    cid = raw.start_idle(bundle)
    while b"1" not in raw.exec(cid, "/bin/sh", "-c", "cat /tmp/ready 2>/dev/null || true"):
        time.sleep(0.05)
    image = raw.work / f"image-{secrets.token_hex(4)}"
    checkpoints, restores, size = [], [], 0
    for _ in range(n):
        shutil.rmtree(image, ignore_errors=True)
        image.mkdir()
        t = time.perf_counter()
        subprocess.run([*raw.cmd, "checkpoint", f"--image-path={image}", "--exclude-committed-zero-pages",
                        f"--compression={RunscConfig(raw.work).checkpoint_compression}", cid],
                       check=True, timeout=300)
        checkpoints.append(time.perf_counter() - t)
        size = sum(f.stat().st_size for f in image.rglob("*") if f.is_file())
        raw.delete(cid)
        cid = "r" + secrets.token_hex(12)
        t = time.perf_counter()
        subprocess.run([*raw.cmd, "restore", "--detach", f"--bundle={bundle}", f"--image-path={image}", cid],
                       check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=300)
        restores.append(time.perf_counter() - t)
    raw.delete(cid)
    return checkpoints, restores, size


def measure(n: int) -> tuple[dict[str, dict[str, float]], list[tuple[str, str]], dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}
    extra: dict[str, float] = {}
    with bench_env(base_image.build(DEFAULT_CACHE_DIR)) as (kw, raw):
        for label, mib in (("idle", 0), ("256mb", 256)):
            sb = Sandbox.create(name=f"bench-{label}", **kw)
            if mib:
                sb.files.write("/tmp/hold.py", HOLD.format(mib=mib))
                sb.commands.run("nohup python3 /tmp/hold.py >/dev/null 2>&1 &")
                sb.commands.run("until [ -s /tmp/ready ]; do sleep 0.05; done")
            pauses, resumes = box_cycle(sb, n)
            figures[f"pause_{label}"] = stats(pauses)
            figures[f"resume_to_first_exec_{label}"] = stats(resumes)
            sb.kill()
            checkpoints, restores, size = raw_cycle(raw, mib, n)
            figures[f"raw_runsc_checkpoint_{label}"] = stats(checkpoints)
            figures[f"raw_runsc_restore_{label}"] = stats(restores)
            extra[f"image_mib_{label}"] = size / 2**20
    free = shutil.disk_usage("/var/lib" if Path("/var/lib").exists() else "/").free
    extra["paused_idle_boxes_that_fit_on_disk"] = free / max(1.0, extra["image_mib_idle"] * 2**20)
    return figures, [("pause_idle", "raw_runsc_checkpoint_idle"), ("resume_to_first_exec_idle", "raw_runsc_restore_idle"),
                     ("pause_256mb", "raw_runsc_checkpoint_256mb"),
                     ("resume_to_first_exec_256mb", "raw_runsc_restore_256mb")], extra


def main() -> None:
    main_for("pause", measure)


if __name__ == "__main__":
    main()
