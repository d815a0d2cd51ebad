"""Egress: what the way out of a box costs, beside a direct connection from the host to the same
test server, in the same run.

    .venv/bin/python -m bench.egress [-n 20]

The test server is the tests' stand-in internet (a network namespace on this machine). The same
Python loop runs on the host (direct) and in a box (through the relay and the egress proxy):
N sequential GETs on new connections, then a 64 MB download. Then HTTPS from the box, to a host it
holds a secret for (the proxy terminates the TLS and swaps the stand-in in) beside a host it
does not (the TLS is relayed end to end): what swapping a secret in costs. Last, the API's
/health and another box's GETs while one box floods denied connections from 8 threads, beside
the same before it: what a flood costs the others.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.common import bench_env, main_for, stats, timed
from hutch import NetworkConfig, Sandbox, Secret
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR
from tests.integration.box_scripts import FETCHES, FLOOD_FOR, run_script
from tests.integration.internet import EGRESS_HOSTS, certificate, stand_in_internet
from tests.integration.support import ClientArgs

BIG = 64 * 2**20
FLOOD_SECONDS = 60  # longer than the figures taken during it; the run checks it was
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
        flooded = flood_figures(kw, n)
    assert direct["big_bytes"] == boxed["big_bytes"] == tls["swapped"]["big_bytes"] == BIG
    figures = {"egress_get_new_connection": stats(boxed["small"]), "direct_get_new_connection": stats(direct["small"]),
               "https_get_secret_swapped": stats(tls["swapped"]["small"]),
               "https_get_tunnelled": stats(tls["tunnelled"]["small"]), **flooded}
    extra = {"egress_download_mb_per_s": BIG / 2**20 / boxed["big_seconds"],
             "direct_download_mb_per_s": BIG / 2**20 / direct["big_seconds"],
             "https_download_secret_swapped_mb_per_s": BIG / 2**20 / tls["swapped"]["big_seconds"],
             "https_download_tunnelled_mb_per_s": BIG / 2**20 / tls["tunnelled"]["big_seconds"]}
    return figures, [("egress_get_new_connection", "direct_get_new_connection"),
                     ("https_get_secret_swapped", "https_get_tunnelled"),
                     ("health_during_flood", "health_quiet"), ("box_get_during_flood", "box_get_quiet")], extra


def flood_figures(kw: ClientArgs, n: int) -> dict[str, dict[str, float]]:
    """/health and a bystander box's GETs, quiet and then while another box floods."""
    flooder = Sandbox.create(name="bench-flooder", network=NetworkConfig(deny_out=["0.0.0.0/0"]), **kw)
    bystander = Sandbox.create(name="bench-bystander", **kw)
    api = httpx.Client(base_url=kw["base_url"], timeout=30)  # one client: not its TLS context made each time
    try:
        def health() -> None:
            assert api.get("/health").status_code == 200

        def fetches() -> list[float]:
            return [float(t) for t in json.loads(run_script(bystander, FETCHES, n))]

        fetches()  # warm: the script is written, the interpreter's files are cached
        quiet_health, quiet_fetch = timed(health, n), fetches()
        flood = threading.Thread(target=run_script, args=(flooder, FLOOD_FOR, FLOOD_SECONDS, 8),
                                 kwargs={"timeout": FLOOD_SECONDS * 2})
        started = time.monotonic()
        flood.start()
        while not any(e.rule == "rate_limited" for e in flooder.get_network_log(limit=50).entries):
            if not flood.is_alive() or time.monotonic() - started > FLOOD_SECONDS:
                raise SystemExit("the flood did not get under way")
            time.sleep(0.1)  # under way once the box's refusals are past their burst
        busy_health, busy_fetch = timed(health, n), fetches()
        if time.monotonic() - started >= FLOOD_SECONDS:
            raise SystemExit("the flood ended before its figures were taken: raise FLOOD_SECONDS")
        flood.join()
    finally:
        api.close()
        flooder.kill()
        bystander.kill()
    return {"health_quiet": stats(quiet_health), "health_during_flood": stats(busy_health),
            "box_get_quiet": stats(quiet_fetch), "box_get_during_flood": stats(busy_fetch)}


def main() -> None:
    main_for("egress", measure)


if __name__ == "__main__":
    main()
