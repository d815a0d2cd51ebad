"""What the benchmarks share: a server of their own, raw runsc with hutch's flags, and the figures."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from hutch.node import base_image, idle, metrics
from hutch.node.runsc import RunscConfig, find_runsc
from hutch.node.spec import AgentRuntime, Limits, box_spec
from hutch.services.config import DEFAULT_CACHE_DIR, ServerConfig
from tests.integration.support import ClientArgs

# what a benchmark's measure returns: its figures (min/median/p95), the (figure, floor) pairs, and single values
Measurement = tuple[dict[str, dict[str, float]], list[tuple[str, str]], dict[str, float]]


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
        runtime = AgentRuntime.find(self.rootfs, base_image.agent_dir(DEFAULT_CACHE_DIR))
        spec = box_spec(rootfs=self.rootfs, channel_dir=self.work / "chan", agent_dir=self.work / "chan",
                        runtime=runtime, hostname="raw", limits=Limits(),
                        cgroup=f"raw-{b.name}")  # a cgroup of its own, as a box's: not one 1 GB limit for all
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


TICK = os.sysconf("SC_CLK_TCK")


def process_seconds(pid: int) -> float:
    """User and system CPU of a process (all its threads), in seconds; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def box_seconds(runtime_id: str) -> Callable[[], float]:
    """A reader of the CPU seconds a box's cgroup used so far (its sentry, stubs and gofer); 0 once gone."""
    def read() -> float:
        got = metrics.read_cpu_ns(runtime_id)
        return got / 1e9 if got is not None else 0.0
    return read


def server_pid(data_dir: Path) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"serve" in argv and str(data_dir).encode() in argv:
                return int(entry.name)
    raise RuntimeError("the benchmark's server is not running")


def start_server(root: Path, warm_pool: int | None,
                 extra_args: tuple[str, ...] = ()) -> tuple[subprocess.Popen[bytes], str, str]:
    """`warm_pool` None: the default pool (sized by memory)."""
    with socket.socket() as s, socket.socket() as p, socket.socket() as e:
        for sock in (s, p, e):
            sock.bind(("127.0.0.1", 0))
        # not the default preview or E2B port: benches run at once
        port, preview, e2b_port = s.getsockname()[1], p.getsockname()[1], e.getsockname()[1]
    data = root / "data"
    proc = subprocess.Popen([sys.executable, "-m", "hutch.cli", "--data-dir", str(data), "serve", "--port", str(port),
                             *(("--warm-pool", str(warm_pool)) if warm_pool is not None else ()),
                             "--max-sandboxes", "1000", "--team-max-sandboxes", "1000",
                             "--preview-port", str(preview), "--e2b-port", str(e2b_port), *extra_args],
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


@contextmanager
def bench_env(rootfs: Path, warm_pool: int | None = 0,
              extra_args: tuple[str, ...] = ()) -> Iterator[tuple[ClientArgs, RawRunsc]]:
    """A server on loopback with a temporary data dir, and raw runsc beside it; all removed after."""
    root = Path(tempfile.mkdtemp(prefix="hutch-b", dir="/tmp"))
    proc, url, key = start_server(root, warm_pool, extra_args)
    raw = RawRunsc(root / "raw", rootfs)
    try:
        yield ClientArgs(api_key=key, base_url=url), raw
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        for line in subprocess.run([*raw.cmd, "list", "--quiet"], capture_output=True, text=True).stdout.split():
            raw.delete(line)
        # the sandboxes of a benchmark cut short (they outlive their server, as every sandbox does)
        own = [raw.cmd[0], f"--root={ServerConfig(data_dir=root / 'data').run_dir / 'runsc'}"]
        for line in subprocess.run([*own, "list", "--quiet"], capture_output=True, text=True).stdout.split():
            idle.thaw(line)  # a pool box left frozen: its SIGKILL would wait for the thaw
            subprocess.run([*own, "delete", "--force", line], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(ServerConfig(data_dir=root / "data").run_dir, ignore_errors=True)


def wait_for_pool(base_url: str, size: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(f"{base_url}/health").json()["warm_pool"] < size:
        if time.monotonic() > deadline:
            raise SystemExit(f"the warm pool did not reach {size} boxes in {timeout:g} s")
        time.sleep(0.02)


def main_for(title: str, measure: Callable[[int], Measurement]) -> None:
    """`python -m bench.NAME [-n N]`: run one benchmark's measure(n) and print its table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20, help="runs per figure (default %(default)s)")
    n = ap.parse_args().n
    report(title, n, *measure(n))


def report(title: str, n: int, figures: dict[str, dict[str, float]], pairs: list[tuple[str, str]],
           extra: dict[str, float] | None = None) -> None:
    """One table: each figure with its ratio to each of its floors (medians), then the floors,
    then the figures that have none; and the same as JSON in bench/results/."""
    version = subprocess.run([find_runsc() or "runsc", "--version"], capture_output=True, text=True).stdout.split()[2]
    print(f"hutch {title} benchmark, N={n}, runsc {version}")
    row = "{:<38}{:>9}{:>9}{:>9}   {}"
    print(row.format("figure (ms)", "min", "median", "p95", "median vs its floor"))
    floors = {floor for _, floor in pairs}
    compared: dict[str, list[str]] = {}
    for name, floor in pairs:
        ratio = figures[name]["median"] / figures[floor]["median"]
        compared.setdefault(name, []).append(f"{ratio:.2f}x {floor}")
    ordered = [*compared, *sorted(floors - set(compared)), *[k for k in figures if k not in compared and k not in floors]]
    for label in ordered:
        f = figures[label]
        note = ", ".join(compared.get(label, [])) or ("(floor)" if label in floors else "")
        print(row.format(label, f"{f['min']:.1f}", f"{f['median']:.1f}", f"{f['p95']:.1f}", note))
    for label, value in (extra or {}).items():
        print(f"{label:<38}{value:>9.1f}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    path = out / f"{title}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    ratios = {f"{name}/{floor}": figures[name]["median"] / figures[floor]["median"] for name, floor in pairs}
    path.write_text(json.dumps({"n": n, "runsc": version, "figures_ms": figures, "median_ratios": ratios,
                                "extra": extra or {}}, indent=2))
    print(f"wrote {path}")
