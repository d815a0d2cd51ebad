"""A desktop box's costs (issue 41): create (from the `desktop` template, desktop running) to the
first screenshot, a screenshot's latency through hutch's API, one input action's, and an idle
desktop's memory and CPU (its cgroup: sentry, gofer and every process of the desktop). Needs the
desktop root (`hutch build-base --desktop`). `python -m bench.desktop [N]`."""

from __future__ import annotations

import os
import sys
import time

from bench.common import stats, timed
from hutch import Sandbox
from hutch.node import metrics
from hutch.services.config import DEFAULT_CACHE_DIR
from tests.integration.support import make_server


def main(n: int = 10) -> None:
    server = make_server("--warm-pool", "0")
    server.start()
    try:
        os.environ["HUTCH_API_KEY"] = server.admin_key()
        os.environ["HUTCH_BASE_URL"] = f"http://127.0.0.1:{server.port}"
        firsts = []
        for _ in range(3):
            started = time.perf_counter()
            box = Sandbox.create(name="bench-desktop", from_template="desktop")
            box.desktop.screenshot()
            firsts.append(time.perf_counter() - started)
            box.kill()
        box = Sandbox.create(name="bench-desktop", from_template="desktop")
        shot = stats(timed(box.desktop.screenshot, n))
        move = stats(timed(lambda: box.desktop.move(100, 100), n))
        time.sleep(20)  # settled
        rec = server.store().get_sandbox(box.id)
        runtime = rec.runtime_id if rec else None
        assert runtime
        cpu0 = metrics.read_cpu_ns(runtime) or 0
        time.sleep(30)
        cpu1 = metrics.read_cpu_ns(runtime) or 0
        used = metrics.read_cgroup(runtime)
        print(f"desktop ({DEFAULT_CACHE_DIR}), N={n}")
        print(f"create to first screenshot, s: {', '.join(f'{f:.1f}' for f in firsts)}")
        print(f"screenshot, ms: {shot}")
        print(f"move (one xdotool call), ms: {move}")
        print(f"idle CPU: {(cpu1 - cpu0) / 30e9 * 100:.1f}% of a core; cgroup (cpu ns, memory bytes, ...): {used}")
        box.kill()
    finally:
        server.stop()
        server.remove()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
