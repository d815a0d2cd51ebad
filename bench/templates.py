"""Template builds: the base template's root, and a template of two run steps, cold and cached.

    .venv/bin/python -m bench.templates [-n 5]

- base root, cold: `hutch build-base` into an empty cache directory (mmdebstrap; once, it is ~30 s).
- base root, cached: the same once it is built (what every start of the server does).
- template on the base, no steps: a template that only names the base (no layer, no copy).
- two steps, cold: two run steps built from nothing (`no_cache`): two build boxes, two layers, and
  the flattened root.
- two steps, cached: a rebuild of the same spec: every step and the root from the cache.
- one changed last step: the first step from the cache, the second built, a new root.
- create from the template: a sandbox booted from the built template to its first command (no
  warm pool for it).
Each build is timed from the create (or rebuild) call to the end of `wait_until_ready`.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import bench_env, main_for, stats, timed
from hutch import RunStep, Sandbox, Template
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR

TWO_STEPS = [RunStep(run="mkdir -p /app && echo one > /app/one"), RunStep(run="echo two > /app/two")]


def measure(n: int) -> tuple[dict[str, dict[str, float]], list[tuple[str, str]], dict[str, float]]:
    rootfs = base_image.build(DEFAULT_CACHE_DIR)
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="hutch-bb", dir="/var/tmp") as cache:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "hutch.cli", "build-base", "--cache-dir", cache], check=True,
                       capture_output=True, timeout=900)
        figures["base_root_cold"] = stats([time.perf_counter() - t])
        figures["base_root_cached"] = stats(timed(lambda: base_image.build(Path(cache), progress=lambda _: None), n))
    with bench_env(rootfs) as (kw, _raw):
        seq = iter(range(10**6))

        def create(steps: list[RunStep] | None = None) -> Template:
            t = Template.create(f"bench-{next(seq)}", steps=steps, **kw)  # steps=None: the default, no steps
            t.wait_until_ready()
            return t

        figures["template_base_no_steps"] = stats(timed(lambda: create(), n))
        two = create(steps=TWO_STEPS)

        def rebuild(no_cache: bool) -> None:
            two.rebuild(no_cache=no_cache)
            two.wait_until_ready()

        figures["template_two_steps_cold"] = stats(timed(lambda: rebuild(True), n))
        figures["template_two_steps_cached"] = stats(timed(lambda: rebuild(False), n))
        figures["template_last_step_changed"] = stats(timed(
            lambda: create(steps=[TWO_STEPS[0], RunStep(run=f"echo {time.time_ns()} > /app/two")]), n))

        made: list[Sandbox] = []

        def boot() -> None:
            sb = Sandbox.create("bench", from_template=two.name, **kw)
            sb.commands.run("true")
            made.append(sb)

        figures["create_from_template_to_first_exec"] = stats(timed(boot, n))
        for sb in made:
            sb.kill()
    pairs = [("template_two_steps_cached", "template_two_steps_cold"),
             ("template_last_step_changed", "template_two_steps_cold")]
    return figures, pairs, {}


def main() -> None:
    main_for("templates", measure)


if __name__ == "__main__":
    main()
