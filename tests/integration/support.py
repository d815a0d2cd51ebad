"""What the integration tests share that is not a fixture: a real `hutch serve` of their own, waits on
state, calls run in the background, and the one way to skip a test whose dependency is missing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import httpx
import pytest

from hutch import Sandbox, SandboxError
from hutch.node.idle import freezer_file, thaw
from hutch.node.runsc import find_runsc
from hutch.services.config import ServerConfig
from hutch.store import SandboxRecord, Store
from tests.integration.internet import EGRESS_HOSTS, certificate

HUTCH = [sys.executable, "-m", "hutch.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def pooled(url: str) -> int:
    """How many boxes the server's warm pool holds now (its /health)."""
    return int(httpx.get(f"{url}/health").json()["warm_pool"])


def frozen(runtime_id: str) -> bool:
    """What the host's freezer says of the box (read by the test, never through the box)."""
    path, frozen_word, _ = freezer_file(runtime_id)
    return path.read_text().strip() == frozen_word


def thawed(runtime_id: str) -> bool:
    """Not frozen, nor on its way (cgroup v1's FREEZING)."""
    path, _, thawed_word = freezer_file(runtime_id)
    return path.read_text().strip() == thawed_word


def logged(box: Sandbox, host: str | None = None, count: int = 1, limit: int = 100, what: str | None = None) -> list[Any]:
    """The box's network log rows (newest first, for `host` if given) once there are `count`: a
    connection's row is written when it closes, which the proxy sees a moment after the box's
    command has ended."""
    rows: list[Any] = []

    def enough() -> bool:
        rows[:] = [e for e in box.get_network_log(limit=limit).entries if host is None or e.host == host]
        return len(rows) >= count

    wait_for(enough, 30, what or f"{count} network log rows" + (f" for {host}" if host else ""))
    return rows


@dataclass
class Background:
    """A call run on a thread, keeping whatever it raised, for tests that act while it runs."""

    thread: threading.Thread
    errors: list[BaseException]

    def join(self, timeout: float = 60) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the call did not end"


def in_background(fn: Callable[[], object]) -> Background:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # kept for the test to check
            errors.append(e)

    bg = Background(threading.Thread(target=run), errors)
    bg.thread.start()
    return bg


def counter(every: float = 0.1) -> str:
    """A command leaving a box process that counts into /tmp/count every `every` seconds. Each
    value is written beside it and renamed over it, so a read never sees a half-written file."""
    return (f"nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; "
            f"sleep {every}; done' >/dev/null 2>&1 &")


COUNTER = counter()


def counted(box: Any) -> int:
    """What COUNTER has counted to, once it has written."""
    return int(box.commands.run("until [ -s /tmp/count ]; do sleep 0.05; done; cat /tmp/count").stdout)


def needs_installed(what: str, present: bool) -> None:
    """Skip the test unless `what`, which scripts/test installs, is present. Under CI=true the test
    fails instead: there scripts/test has run, so a missing dependency is a broken setup, and a skip
    would let the test pass unseen."""
    if present:
        return
    message = f"{what} is not installed (scripts/test installs it)"
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def client_result(python: Path, client: Path, args: list[str], variables: dict[str, str],
                  timeout: float = 300) -> dict[str, Any]:
    """Run a peer's SDK client script (`client`, in its own venv's `python`, with only `variables`
    in its environment) and return the last JSON object it printed; its failure fails the test."""
    done = subprocess.run([str(python), str(client), *args], env=variables, capture_output=True, text=True,
                          timeout=timeout)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    assert done.returncode == 0 and lines, f"{args[0]} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def ok_or_failed(box: Sandbox, timeout_seconds: float) -> str:
    """After an attack a box either still answers or is reported failed; it never hangs a call."""
    try:
        r = box.commands.run("echo ok", timeout_seconds=timeout_seconds)
        return "ok" if r.stdout == "ok\n" else "broken"
    except SandboxError:
        return str(box.get_info().status)


class ClientArgs(TypedDict):
    """The SDK's keywords that point a call at a server of a test's own."""

    api_key: str
    base_url: str


@dataclass
class Server:
    data_dir: Path
    port: int
    args: tuple[str, ...] = ()  # more `hutch serve` options
    proc: subprocess.Popen[bytes] | None = None
    preexec: Callable[[], None] | None = None  # run in the server's process before it starts (e.g. limits)
    env: dict[str, str] = field(default_factory=dict)  # set in the server's environment
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.data_dir.parent / f"server-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def image_dir(self) -> Path:
        return self.data_dir.parent / "images"

    @property
    def preview_port(self) -> int:
        return int(self.args[self.args.index("--preview-port") + 1])

    @property
    def e2b_port(self) -> int:
        return int(self.args[self.args.index("--e2b-port") + 1])

    @property
    def config(self) -> ServerConfig:
        return ServerConfig(data_dir=self.data_dir)

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([*HUTCH, "--data-dir", str(self.data_dir), "serve", "--port", str(self.port),
                                          *self.args],
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=self.preexec, env={**os.environ, **self.env})
        deadline = time.monotonic() + 300  # the first start may build the base template
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the server exited:\n{self.log.read_text()[-3000:]}"
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the server did not start")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def remove(self) -> None:
        """Once the server is down: end any box still running from its run dir (a server killed
        with SIGKILL leaves its warm pool behind), then delete the run dir and the data dir."""
        run_dir = self.config.run_dir
        for rid in runsc_cli(self, "list", "--quiet").split():
            thaw(rid)  # a frozen process' SIGKILL waits for its thaw
        subprocess.run(["pkill", "-9", "-f", f"root={run_dir}/runsc"], capture_output=True)
        for mount in [*run_dir.glob("boxes/*/chan"), *run_dir.glob("boxes/*/disk")]:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        loops = subprocess.run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
                               capture_output=True, text=True).stdout
        for line in loops.splitlines():  # the disks of boxes the server left running
            if str(self.data_dir) in line:
                subprocess.run(["losetup", "--detach", line.split()[0]], capture_output=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)

    def client_env(self, name: str) -> str:
        """A variable of the client.env that `hutch serve` writes beside its data."""
        for line in (self.data_dir / "client.env").read_text().splitlines():
            if line.startswith(f"{name}="):
                return line.split("=", 1)[1]
        raise AssertionError(f"hutch serve wrote no {name}")

    def admin_key(self) -> str:
        return self.client_env("HUTCH_API_KEY")

    def e2b_key(self) -> str:
        return self.client_env("E2B_API_KEY")

    def client_args(self) -> ClientArgs:
        """The admin's keywords for SDK calls to this server."""
        return {"api_key": self.admin_key(), "base_url": self.url}

    def new_team(self, name: str) -> str:
        out = subprocess.run([*HUTCH, "--data-dir", str(self.data_dir), "team-create", name],
                             check=True, capture_output=True, text=True)
        return out.stdout.strip()

    def cleanup_boxes(self, *keys: str) -> None:
        for key in keys:
            for info in Sandbox.list(api_key=key, base_url=self.url):
                Sandbox.kill_by_id(info.id, api_key=key, base_url=self.url)

    def store(self) -> Store:
        """The server's own database, read directly (what the API does not show)."""
        return Store(self.config.db_url)

    def record(self, sandbox_id: str) -> SandboxRecord:
        rec = self.store().get_sandbox(sandbox_id)
        assert rec is not None, f"no record of {sandbox_id}"
        return rec

    def box_dir(self, sandbox_id: str) -> Path:
        """Where the node keeps a running box on the host."""
        return self.config.run_dir / "boxes" / self.record(sandbox_id).box_key

    def memory_kib(self, kind: str = "VmRSS") -> int:
        """The server process's memory from /proc: VmRSS now, or VmHWM, its peak."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{kind}:"):
                return int(line.split()[1])
        raise AssertionError(f"no {kind} in /proc/{self.proc.pid}/status")


# A test server's pool, unless its test says otherwise: two boxes, as a small host's (a default
# server sizes its pool by memory: dozens of boxes beside every test server of the suite).
DEFAULT_POOL = ("--warm-pool-max", "2")


def make_server(*args: str) -> Server:
    # short paths: the boxes' channel sockets must stay under the 108-byte limit
    root = Path(tempfile.mkdtemp(prefix="hutch-t", dir="/tmp"))
    hosts = root / "egress-hosts"
    hosts.write_text(EGRESS_HOSTS)
    (root / "images").mkdir()  # where templates may import OCI images from (Server.image_dir)
    return Server(root / "data", free_port(), ("--egress-hosts", str(hosts), "--egress-no-system-dns",
                                               "--trust-ca", str(certificate()[0]), "--image-dir", str(root / "images"),
                                               "--preview-port", str(free_port()), "--e2b-port", str(free_port()),
                                               *DEFAULT_POOL, *args))


def runsc_cli(server: Server, *args: str) -> str:
    """runsc on the server's own state root (its boxes only)."""
    root = server.config.run_dir / "runsc"
    out = subprocess.run([find_runsc() or "runsc", f"--root={root}", *args], capture_output=True, text=True, timeout=60)
    return out.stdout


def retire(server: Server, before_remove: Callable[[], object] = lambda: None) -> None:
    """Stop a test's own server and leave nothing of it: boxes, containers, directories."""
    if server.proc and server.proc.poll() is None:
        server.cleanup_boxes(server.admin_key())
    server.stop()
    for rid in runsc_cli(server, "list", "--quiet").split():
        thaw(rid)  # a pool box a killed server left frozen: its SIGKILL would wait for the thaw
        runsc_cli(server, "delete", "--force", rid)
    before_remove()
    server.remove()


@dataclass
class Env:
    """The session's server and its two teams."""

    server: Server
    key_a: str  # team "default"
    key_b: str  # team "other"

    @property
    def url(self) -> str:
        return self.server.url

    def api(self, key: str | None = None) -> httpx.Client:
        """Plain HTTP to the control plane, with a team's key (team A's unless another is given)."""
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key or self.key_a}"}, timeout=60)
