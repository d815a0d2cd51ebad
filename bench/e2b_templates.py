"""A template of two run steps built through e2b's Template SDK (2.63) against the same build
through hutch's SDK, in the same run, each with nothing cached.

    .venv/bin/python -m bench.e2b_templates [-n 5]

Needs .cache/e2b-2.63.0 (scripts/test makes it). The e2b side is timed inside its own process,
from `Template.build` to its return (the build's requests, its polling of the status, and the
build); hutch's from `rebuild(no_cache=True)` to the end of `wait_until_ready`.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from bench.common import bench_env, main_for, stats
from hutch import RunStep, Template
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("mkdir -p /opt/app && echo one > /opt/app/one", "echo two > /opt/app/two")
CLIENT = r"""
import json, sys, time
from e2b import Template
n, name, steps = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
template = Template().from_base_image()
for step in steps:
    template = template.run_cmd(step, user="root")
out = []
for _ in range(n):
    t = time.perf_counter(); Template.build(template, name, skip_cache=True); out.append(time.perf_counter() - t)
print(json.dumps(out))
"""


def measure(n: int) -> tuple[dict[str, dict[str, float]], list[tuple[str, str]], dict[str, float]]:
    python = ROOT / ".cache" / "e2b-2.63.0" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{python} is missing: run scripts/test once (it makes the e2b venvs)")
    with bench_env(base_image.build(DEFAULT_CACHE_DIR)) as (kw, raw):
        client_env = (raw.work.parent / "data" / "client.env").read_text()  # the server's, beside its data
        e2b_key = next(line.split("=", 1)[1] for line in client_env.splitlines() if line.startswith("E2B_API_KEY="))
        hutch_template = Template.create("bench-hutch-two", steps=[RunStep(run=s) for s in STEPS], **kw)
        hutch_template.wait_until_ready()
        hutch: list[float] = []
        e2b: list[float] = []
        env = {"PATH": "/usr/bin:/bin", "E2B_API_KEY": e2b_key, "E2B_API_URL": f"{kw['base_url']}/e2b"}
        for _ in range(n):  # in turn, so that the host's load falls on both alike
            t = time.perf_counter()
            hutch_template.rebuild(no_cache=True)
            hutch_template.wait_until_ready()
            hutch.append(time.perf_counter() - t)
            done = subprocess.run([str(python), "-c", CLIENT, "1", "bench-e2b-two", json.dumps(STEPS)], env=env,
                                  capture_output=True, text=True, timeout=900, check=True)
            e2b += json.loads(done.stdout.splitlines()[-1])
    figures = {"e2b_template_build_two_steps": stats(e2b), "hutch_template_build_two_steps": stats(hutch)}
    return figures, [("e2b_template_build_two_steps", "hutch_template_build_two_steps")], {}


def main() -> None:
    main_for("e2b_templates", measure)


if __name__ == "__main__":
    main()
