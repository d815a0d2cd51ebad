"""The e2b SDK on hutch: what E2B's facade costs beside hutch's own SDK, in the same run.

    .venv/bin/python -m bench.e2b [-n 30]

Needs the e2b venvs scripts/test makes (.cache/e2b-2.45.1, .cache/e2b-2.63.0). For each line, a
script in that venv creates a box, times `commands.run("true")`, a 1 MB `files.write` and `read`
and `files.list`, and the create itself; hutch's SDK does the same beside it. The 2.63 line runs
twice: by the path form (E2B_API_URL, E2B_SANDBOX_URL) and by E2B's host form (E2B_DOMAIN alone,
over TLS: hutch.e2b.hosts), paired with each other.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from bench.common import bench_env, main_for, stats, timed
from hutch import Sandbox
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR

ROOT = Path(__file__).resolve().parent.parent
LINES = ("2.45.1", "2.63.0")
CLIENT = r"""
import json, sys, time
from e2b import Sandbox
n = int(sys.argv[1])
def timed(fn):
    out = []
    for _ in range(n):
        t = time.perf_counter(); fn(); out.append(time.perf_counter() - t)
    return out
creates = []
for _ in range(max(3, n // 5)):
    t = time.perf_counter(); s = Sandbox.create(); s.commands.run("true"); creates.append(time.perf_counter() - t); s.kill()
sbx = Sandbox.create()
data = b"x" * 2**20
out = {"create_to_first_run": creates, "run_true": timed(lambda: sbx.commands.run("true")),
       "write_1mb": timed(lambda: sbx.files.write("/tmp/b.bin", data)),
       "read_1mb": timed(lambda: sbx.files.read("/tmp/b.bin", format="bytes")),
       "list": timed(lambda: sbx.files.list("/tmp"))}
sbx.kill()
print(json.dumps(out))
"""


def measure(n: int) -> tuple[dict[str, dict[str, float]], list[tuple[str, str]], dict[str, float]]:
    rootfs = base_image.build(DEFAULT_CACHE_DIR)
    figures: dict[str, dict[str, float]] = {}
    pairs: list[tuple[str, str]] = []
    with bench_env(rootfs) as (kw, raw):
        env_file = raw.work.parent / "data" / "client.env"  # hutch serve wrote the E2B key there
        variables = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
        sb = Sandbox.create("bench-e2b", **kw)
        try:
            data = b"x" * 2**20
            sb.files.write("/tmp/b.bin", data)
            creates = []
            for _ in range(max(3, n // 5)):
                t = time.perf_counter()
                other = Sandbox.create("bench-e2b-create", **kw)
                other.commands.run("true")
                creates.append(time.perf_counter() - t)
                other.kill()
            figures["hutch_create_to_first_run"] = stats(creates)
            figures["hutch_run_true"] = stats(timed(lambda: sb.commands.run("true"), n))
            figures["hutch_write_1mb"] = stats(timed(lambda: sb.files.write("/tmp/b.bin", data), n))
            figures["hutch_read_1mb"] = stats(timed(lambda: sb.files.read("/tmp/b.bin"), n))
            figures["hutch_list"] = stats(timed(lambda: sb.files.list("/tmp"), n))
        finally:
            sb.kill()
        for line in LINES:
            python = ROOT / ".cache" / f"e2b-{line}" / "bin" / "python"
            if not python.exists():
                continue
            env = {"PATH": "/usr/bin:/bin", "E2B_API_KEY": variables.get("E2B_API_KEY", ""),
                   "E2B_API_URL": f"{kw['base_url']}/e2b", "E2B_SANDBOX_URL": f"{kw['base_url']}/e2b/envd"}
            for name, samples in _client(python, env, n).items():
                figures[f"e2b_{line}_{name}"] = stats(samples)
                pairs.append((f"e2b_{line}_{name}", f"hutch_{name}"))
            if line == LINES[-1] and variables.get("E2B_DOMAIN"):
                host_env = {"PATH": "/usr/bin:/bin", "E2B_API_KEY": variables["E2B_API_KEY"],
                            "E2B_DOMAIN": variables["E2B_DOMAIN"], "SSL_CERT_FILE": variables["SSL_CERT_FILE"]}
                for name, samples in _client(python, host_env, n).items():
                    figures[f"e2b_{line}_host_{name}"] = stats(samples)
                    pairs.append((f"e2b_{line}_host_{name}", f"e2b_{line}_{name}"))
    return figures, pairs, {}


def _client(python: Path, env: dict[str, str], n: int) -> dict[str, list[float]]:
    done = subprocess.run([str(python), "-c", CLIENT, str(n)], env=env, capture_output=True, text=True,
                          timeout=900, check=True)
    result: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    main_for("e2b", measure)


if __name__ == "__main__":
    main()
