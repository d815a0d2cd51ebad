"""Egress: what the way out of a box costs, beside a direct connection from the host to the same
test server, in the same run.

    .venv/bin/python -m bench.egress [-n 20]

The test server is the tests' stand-in internet (a network namespace on this machine). The same
Python loop runs on the host (direct) and in a box (through the relay and the egress proxy):
N sequential GETs on new connections, then a 64 MB download. Then HTTPS from the box, to a host it
holds a secret for (the proxy terminates the TLS and swaps the stand-in in) beside a host it
does not (the TLS is relayed end to end): what swapping a secret in costs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import bench_env, main_for, stats
from hutch import Sandbox, Secret
from hutch.node import base_image
from hutch.server.config import DEFAULT_CACHE_DIR
from tests.integration.internet import EGRESS_HOSTS, certificate, stand_in_internet

BIG = 64 * 2**20
LOOP = r"""
import json, sys, time, urllib.request
url, n, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
small = []
for _ in range(n):
    t = time.perf_counter()
    urllib.request.urlopen(url + "/small", timeout=30).read()
    small.append(time.perf_counter() - t)
t = time.perf_counter()
size = len(urllib.request.urlopen(f"{url}/big/{big}", timeout=120).read())
print(json.dumps({"small": small, "big_seconds": time.perf_counter() - t, "big_bytes": size}))
"""
LOOP_TLS = r"""
import json, os, sys, time, urllib.request
url, n, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
headers = {"x-api-key": os.environ["KEY"]}
small = []
for _ in range(n):
    t = time.perf_counter()
    urllib.request.urlopen(urllib.request.Request(url + "/small", headers=headers), timeout=30).read()
    small.append(time.perf_counter() - t)
t = time.perf_counter()
size = len(urllib.request.urlopen(urllib.request.Request(f"{url}/big/{big}", headers=headers), timeout=120).read())
print(json.dumps({"small": small, "big_seconds": time.perf_counter() - t, "big_bytes": size}))
"""


def measure(n: int) -> tuple[dict[str, dict[str, float]], list[tuple[str, str]], dict[str, float]]:
    rootfs = base_image.build(DEFAULT_CACHE_DIR)
    work = Path(tempfile.mkdtemp(prefix="hutch-e", dir="/tmp"))
    hosts = work / "hosts"
    hosts.write_text(EGRESS_HOSTS)
    script = work / "loop.py"
    script.write_text(LOOP)
    with stand_in_internet(work) as net, \
            bench_env(rootfs, extra_args=("--egress-hosts", str(hosts), "--egress-no-system-dns",
                                          "--trust-ca", str(certificate()[0]))) as (kw, _raw):
        direct_run = subprocess.run([sys.executable, str(script), f"http://{net.server_address}", str(n), str(BIG)],
                                    capture_output=True, text=True, check=True, timeout=300,
                                    env={"PATH": "/usr/bin:/bin"})  # no proxy variables: straight there
        direct = json.loads(direct_run.stdout)
        sb = Sandbox.create(name="bench-egress", **kw)
        try:
            sb.files.write("/tmp/loop.py", LOOP)
            boxed_run = sb.commands.run(f"python3 /tmp/loop.py http://example.test {n} {BIG}", timeout_seconds=300)
            assert boxed_run.exit_code == 0, boxed_run.stderr
            boxed = json.loads(boxed_run.stdout)
        finally:
            sb.kill()
        secret = Secret.create("bench-key", "sk-bench-value", provider="anthropic", **kw)
        sb = Sandbox.create(name="bench-secret", secrets={"KEY": "bench-key"}, **kw)
        try:
            sb.files.write("/tmp/tls.py", LOOP_TLS)
            tls = {}
            for label, url in (("swapped", "https://api.anthropic.com"), ("tunnelled", "https://example.test")):
                run = sb.commands.run(f"python3 /tmp/tls.py {url} {n} {BIG}", timeout_seconds=300)
                assert run.exit_code == 0, run.stderr
                tls[label] = json.loads(run.stdout)
        finally:
            sb.kill()
            secret.delete()
    assert direct["big_bytes"] == boxed["big_bytes"] == tls["swapped"]["big_bytes"] == BIG
    figures = {"egress_get_new_connection": stats(boxed["small"]), "direct_get_new_connection": stats(direct["small"]),
               "https_get_secret_swapped": stats(tls["swapped"]["small"]),
               "https_get_tunnelled": stats(tls["tunnelled"]["small"])}
    extra = {"egress_download_mb_per_s": BIG / 2**20 / boxed["big_seconds"],
             "direct_download_mb_per_s": BIG / 2**20 / direct["big_seconds"],
             "https_download_secret_swapped_mb_per_s": BIG / 2**20 / tls["swapped"]["big_seconds"],
             "https_download_tunnelled_mb_per_s": BIG / 2**20 / tls["tunnelled"]["big_seconds"]}
    return figures, [("egress_get_new_connection", "direct_get_new_connection"),
                     ("https_get_secret_swapped", "https_get_tunnelled")], extra


def main() -> None:
    main_for("egress", measure)


if __name__ == "__main__":
    main()
