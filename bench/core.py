"""Core figures: hutch next to raw runsc doing the same work, measured in the same run.

    .venv/bin/python bench/core.py [-n 20]

Starts its own `hutch serve` on loopback (a temporary data dir), then for N runs each measures:
create-to-first-exec, `commands.run("true")`, a 10 MB file write and read; and as floors, raw
`runsc run` of `true` (same root, same flags), raw `runsc exec true` in a running box, and 10 MB
through `runsc exec cat`. Prints min/median/p95 and writes JSON beside this file in results/.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from hutch import Sandbox
from hutch.node import base_image
from hutch.node.runsc import RunscConfig, find_runsc
from hutch.node.spec import AgentRuntime, Limits, box_spec
from hutch.server.config import DEFAULT_CACHE_DIR, ServerConfig

MB10 = os.urandom(10 * 2**20)


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"min": ordered[0] * 1000, "median": statistics.median(ordered) * 1000, "p95": p95 * 1000}


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


class RawRunsc:
    """runsc by hand, with the flags and root hutch uses, for the floors."""

    def __init__(self, work: Path, rootfs: Path) -> None:
        self.work, self.rootfs = work, rootfs
        binary = find_runsc() or "runsc"
        self.cmd = [binary, *RunscConfig(work / "state").global_flags()]
        (work / "chan").mkdir(parents=True)

    def bundle(self, args: list[str]) -> Path:
        b = self.work / f"bundle-{secrets.token_hex(4)}"
        b.mkdir()
        spec = box_spec(rootfs=self.rootfs, channel_dir=self.work / "chan", agent_dir=self.work / "chan",
                        runtime=AgentRuntime.find(self.rootfs), hostname="raw", limits=Limits())
        spec["process"]["args"] = args
        (b / "config.json").write_text(json.dumps(spec))
        return b

    def run_true(self, bundle: Path) -> None:
        cid = "r" + secrets.token_hex(12)
        subprocess.run([*self.cmd, "run", f"--bundle={bundle}", cid], check=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, timeout=60)
        subprocess.run([*self.cmd, "delete", "--force", cid], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start_idle(self, bundle: Path) -> str:
        cid = "r" + secrets.token_hex(12)
        subprocess.run([*self.cmd, "run", "--detach", f"--bundle={bundle}", cid], check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=60)
        return cid

    def exec(self, cid: str, *args: str, data: bytes | None = None) -> bytes:
        out = subprocess.run([*self.cmd, "exec", cid, *args], input=data, capture_output=True, check=True, timeout=60)
        return out.stdout

    def delete(self, cid: str) -> None:
        subprocess.run([*self.cmd, "delete", "--force", cid], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_server(root: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = root / "data"
    proc = subprocess.Popen([sys.executable, "-m", "hutch.cli", "--data-dir", str(data), "serve", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.1)
    key = next(line.split("=", 1)[1] for line in (data / "client.env").read_text().splitlines()
               if line.startswith("HUTCH_API_KEY="))
    return proc, url, key


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20)
    n = ap.parse_args().n
    rootfs = base_image.build(DEFAULT_CACHE_DIR)
    root = Path(tempfile.mkdtemp(prefix="hutch-b", dir="/tmp"))
    proc, url, key = start_server(root)
    figures: dict[str, dict[str, float]] = {}
    raw = RawRunsc(root / "raw", rootfs)
    try:
        kw = {"api_key": key, "base_url": url}

        def create_and_first_exec() -> None:
            sb = Sandbox.create(name="bench", **kw)
            sb.commands.run("true")
            create_samples_boxes.append(sb)

        create_samples_boxes: list[Sandbox] = []
        figures["create_to_first_exec"] = stats(timed(create_and_first_exec, n))
        for sb in create_samples_boxes:
            sb.kill()
        true_bundle = raw.bundle(["/bin/sh", "-c", "true"])
        figures["raw_runsc_run_true"] = stats(timed(lambda: raw.run_true(true_bundle), n))

        sb = Sandbox.create(name="bench", **kw)
        sb.commands.run("true")
        figures["commands_run_true"] = stats(timed(lambda: sb.commands.run("true"), n))
        idle = raw.start_idle(raw.bundle(["/bin/sleep", "infinity"]))
        figures["raw_runsc_exec_true"] = stats(timed(lambda: raw.exec(idle, "/bin/true"), n))
        host = stats(timed(lambda: subprocess.run(["/bin/sh", "-c", "true"], check=True), n))
        figures["host_subprocess_true"] = host

        figures["file_write_10mb"] = stats(timed(lambda: sb.files.write("/tmp/f.bin", MB10), n))
        figures["file_read_10mb"] = stats(timed(lambda: sb.files.read("/tmp/f.bin"), n))
        figures["raw_runsc_exec_cat_in_10mb"] = stats(timed(
            lambda: raw.exec(idle, "/bin/sh", "-c", "cat > /tmp/f.bin", data=MB10), n))
        figures["raw_runsc_exec_cat_out_10mb"] = stats(timed(lambda: raw.exec(idle, "/bin/cat", "/tmp/f.bin"), n))
        raw.delete(idle)
        sb.kill()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        for line in subprocess.run([*raw.cmd, "list", "--quiet"], capture_output=True, text=True).stdout.split():
            raw.delete(line)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(ServerConfig(data_dir=root / "data").run_dir, ignore_errors=True)

    pairs = [("create_to_first_exec", "raw_runsc_run_true"), ("commands_run_true", "raw_runsc_exec_true"),
             ("file_write_10mb", "raw_runsc_exec_cat_in_10mb"), ("file_read_10mb", "raw_runsc_exec_cat_out_10mb")]
    version = subprocess.run([raw.cmd[0], "--version"], capture_output=True, text=True).stdout.split()[2]
    print(f"hutch core benchmark, N={n}, runsc {version}")
    print(f"{'figure (ms)':<32}{'min':>9}{'median':>9}{'p95':>9}   ratio to floor (median)")
    for name, floor in pairs:
        for label in (name, floor):
            f = figures[label]
            ratio = f"{figures[name]['median'] / figures[floor]['median']:.2f}x" if label == name else "floor"
            print(f"{label:<32}{f['min']:>9.1f}{f['median']:>9.1f}{f['p95']:>9.1f}   {ratio}")
    f = figures["host_subprocess_true"]
    print(f"{'host_subprocess_true':<32}{f['min']:>9.1f}{f['median']:>9.1f}{f['p95']:>9.1f}   (no sandbox)")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    path = out / f"core-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"n": n, "figures_ms": figures}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
