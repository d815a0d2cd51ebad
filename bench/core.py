"""Core figures: hutch next to raw runsc doing the same work, measured in the same run.

    bench/run   (or .venv/bin/python bench/core.py [-n 20])

Starts its own `hutch serve` on loopback, then for N runs each measures: create-to-first-exec,
`commands.run("true")`, spawning and attaching to a process and a line through its stdin and
back, `get_info` and a small file read, a 10 MB file write and read; and as floors, raw `runsc
run` of `true` (same root, same flags), raw `runsc exec true` in a running box, a `posix_spawn` of
`/bin/true` (and of `sh -c true`) timed inside a box, and 10 MB through `runsc exec cat`; and the
CPU one `commands.run("true")` costs the server, the box and the SDK. Prints min/median/p95 and
writes JSON to bench/results/.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import bench_env, box_seconds, main_for, process_seconds, server_pid, stats, timed, wait_for_pool
from hutch import Process, Sandbox
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR, ServerConfig
from hutch.store import Store

MB10 = os.urandom(10 * 2**20)
MB100 = os.urandom(100 * 2**20)
# The in-box spawn floor: what starting a process costs inside a box, timed there (one line of
# JSON: the seconds of each run, for /bin/true and for `sh -c true`, which commands.run starts).
SPAWN_FLOOR = """import json, os, sys, time
def once(argv):
    t = time.perf_counter()
    os.waitpid(os.posix_spawn(argv[0], argv, {}), 0)
    return time.perf_counter() - t
n = int(sys.argv[1])
print(json.dumps([[once(argv) for _ in range(n)] for argv in (["/bin/true"], ["/bin/sh", "-c", "true"])]))
"""


def socket_floor(data: bytes, n: int) -> list[float]:
    """The same bytes through a local socket pair, from one thread to another: a transfer's floor."""
    def once() -> None:
        a, b = socket.socketpair()

        def send() -> None:
            a.sendall(data)
            a.close()

        sender = threading.Thread(target=send)
        sender.start()
        got = 0
        while chunk := b.recv(1 << 20):
            got += len(chunk)
        sender.join()
        b.close()
        assert got == len(data)
    return timed(once, n)


def process_figures(sb: Sandbox, n: int) -> dict[str, dict[str, float]]:
    """A spawned process: spawn and attach, and a line through `cat` and back (stdin to stdout)."""
    spawned: list[Process] = []
    spawn = timed(lambda: spawned.append(sb.commands.spawn("cat")), n)
    for proc in spawned:
        proc.kill()
    echoed = threading.Event()
    proc = sb.commands.spawn("cat", on_stdout=lambda _t: echoed.set())

    def echo() -> None:
        echoed.clear()
        proc.stdin.write("x\n")
        echoed.wait(30)

    round_trip = timed(echo, n)
    proc.kill()
    return {"spawn_and_attach": stats(spawn), "stdin_to_stdout_round_trip": stats(round_trip)}


def measure(n: int) -> tuple[dict[str, dict[str, float]], list[tuple[str, str]], dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}
    extra: dict[str, float] = {}
    rootfs = base_image.build(DEFAULT_CACHE_DIR)
    with bench_env(rootfs, warm_pool=2) as (kw, _raw):
        warm: list[float] = []
        for _ in range(n):
            wait_for_pool(kw["base_url"], 2)  # each create finds the pool full, as after any pause in traffic
            t = time.perf_counter()
            sb = Sandbox.create(name="bench", **kw)
            sb.commands.run("true")
            warm.append(time.perf_counter() - t)
            sb.kill()
        figures["create_to_first_exec_warm_pool"] = stats(warm)
    with bench_env(rootfs) as (kw, raw):
        made: list[Sandbox] = []

        def create_and_first_exec() -> None:
            sb = Sandbox.create(name="bench", **kw)
            sb.commands.run("true")
            made.append(sb)

        figures["create_to_first_exec"] = stats(timed(create_and_first_exec, n))
        for sb in made:
            sb.kill()
        true_bundle = raw.bundle(["/bin/sh", "-c", "true"])
        figures["raw_runsc_run_true"] = stats(timed(lambda: raw.run_true(true_bundle), n))

        sb = Sandbox.create(name="bench", **kw)
        sb.commands.run("true")
        figures["commands_run_true"] = stats(timed(lambda: sb.commands.run("true"), n))
        extra.update(cpu_per_command(sb, raw.work.parent / "data", max(n, 50)))
        sb.files.write("/tmp/spawn_floor.py", SPAWN_FLOOR)
        spawn_true, spawn_sh = json.loads(sb.commands.run(f"python3 /tmp/spawn_floor.py {n}").stdout)
        figures["in_box_posix_spawn_true"], figures["in_box_sh_c_true"] = stats(spawn_true), stats(spawn_sh)
        idle = raw.start_idle(raw.bundle(["/bin/sleep", "infinity"]))
        figures["raw_runsc_exec_true"] = stats(timed(lambda: raw.exec(idle, "/bin/true"), n))
        figures["host_subprocess_true"] = stats(timed(lambda: subprocess.run(["/bin/sh", "-c", "true"], check=True), n))
        figures["get_info"] = stats(timed(sb.get_info, n))
        sb.files.write("/home/user/small.txt", b"small file " * 10)
        figures["file_read_small"] = stats(timed(lambda: sb.files.read("/home/user/small.txt"), n))
        figures.update(process_figures(sb, n))

        figures["file_write_10mb"] = stats(timed(lambda: sb.files.write("/tmp/f.bin", MB10), n))
        figures["file_read_10mb"] = stats(timed(lambda: sb.files.read("/tmp/f.bin"), n))
        figures["raw_runsc_exec_cat_in_10mb"] = stats(timed(
            lambda: raw.exec(idle, "/bin/sh", "-c", "cat > /tmp/f.bin", data=MB10), n))
        figures["raw_runsc_exec_cat_out_10mb"] = stats(timed(lambda: raw.exec(idle, "/bin/cat", "/tmp/f.bin"), n))
        raw.delete(idle)
        big_n = max(3, n // 4)  # 100 MB moves take a second each
        figures["file_write_100mb"] = stats(timed(lambda: sb.files.write("/tmp/g.bin", MB100), big_n))
        figures["file_read_100mb"] = stats(timed(lambda: sb.files.read("/tmp/g.bin"), big_n))
        sb.kill()
    figures["local_socket_10mb"] = stats(socket_floor(MB10, n))
    figures["local_socket_100mb"] = stats(socket_floor(MB100, max(3, n // 4)))
    pairs = [("create_to_first_exec", "raw_runsc_run_true"), ("create_to_first_exec_warm_pool", "raw_runsc_run_true"),
             ("commands_run_true", "raw_runsc_exec_true"), ("commands_run_true", "host_subprocess_true"),
             ("commands_run_true", "in_box_posix_spawn_true"), ("commands_run_true", "in_box_sh_c_true"),
             ("file_write_10mb", "raw_runsc_exec_cat_in_10mb"), ("file_write_10mb", "local_socket_10mb"),
             ("file_read_10mb", "raw_runsc_exec_cat_out_10mb"), ("file_read_10mb", "local_socket_10mb"),
             ("file_write_100mb", "local_socket_100mb"), ("file_read_100mb", "local_socket_100mb")]
    return figures, pairs, extra


def cpu_per_command(sb: Sandbox, data_dir: Path, n: int) -> dict[str, float]:
    """The CPU one `commands.run("true")` costs, in ms: the server's process, the box's cgroup
    (its sentry, stubs and gofer), and this process (the SDK), over `n` calls in a row."""
    server = server_pid(data_dir)
    rec = Store(ServerConfig(data_dir=data_dir).db_url).get_sandbox(sb.id)
    assert rec is not None and rec.runtime_id, "the box runs"
    readers: dict[str, Callable[[], float]] = {"server": lambda: process_seconds(server),
                                               "box": box_seconds(rec.runtime_id),
                                               "sdk": lambda: process_seconds(os.getpid())}
    before = {k: r() for k, r in readers.items()}
    for _ in range(n):
        sb.commands.run("true")
    return {f"{k}_cpu_ms_per_commands_run": (r() - before[k]) / n * 1000 for k, r in readers.items()}


def main() -> None:
    main_for("core", measure)


if __name__ == "__main__":
    main()
