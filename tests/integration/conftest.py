"""Fixtures: a real `hutch serve` on loopback with real gVisor boxes, two teams, and the SDK in both
its sync and async forms behind one blocking face, so every SDK test runs against both."""

from __future__ import annotations

import asyncio
import inspect
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from hutch import AsyncSandbox, Sandbox
from hutch.node.runsc import find_runsc
from hutch.sdk.process import AsyncProcess, AsyncProcessStdin
from hutch.sdk.sandbox import AsyncCommands, AsyncFiles
from hutch.server.config import ServerConfig
from tests.integration.internet import EGRESS_HOSTS, Internet, certificate, stand_in_internet

HUTCH = [sys.executable, "-m", "hutch.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    data_dir: Path
    port: int
    args: tuple[str, ...] = ()  # more `hutch serve` options
    proc: subprocess.Popen[bytes] | None = None
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

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([*HUTCH, "--data-dir", str(self.data_dir), "serve", "--port", str(self.port),
                                          *self.args],
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
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
        run_dir = ServerConfig(data_dir=self.data_dir).run_dir
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

    def admin_key(self) -> str:
        for line in (self.data_dir / "client.env").read_text().splitlines():
            if line.startswith("HUTCH_API_KEY="):
                return line.split("=", 1)[1]
        raise AssertionError("no key in client.env")

    def new_team(self, name: str) -> str:
        out = subprocess.run([*HUTCH, "--data-dir", str(self.data_dir), "team-create", name],
                             check=True, capture_output=True, text=True)
        return out.stdout.strip()

    def cleanup_boxes(self, *keys: str) -> None:
        for key in keys:
            for info in Sandbox.list(api_key=key, base_url=self.url):
                Sandbox.kill_by_id(info.id, api_key=key, base_url=self.url)


def make_server(*args: str) -> Server:
    # short paths: the boxes' channel sockets must stay under the 108-byte limit
    root = Path(tempfile.mkdtemp(prefix="hutch-t", dir="/tmp"))
    hosts = root / "egress-hosts"
    hosts.write_text(EGRESS_HOSTS)
    (root / "images").mkdir()  # where templates may import OCI images from (Server.image_dir)
    return Server(root / "data", free_port(), ("--egress-hosts", str(hosts), "--egress-no-system-dns",
                                               "--trust-ca", str(certificate()[0]), "--image-dir", str(root / "images"),
                                               "--preview-port", str(free_port()), *args))


def runsc_cli(server: Server, *args: str) -> str:
    """runsc on the server's own state root (its boxes only)."""
    root = ServerConfig(data_dir=server.data_dir).run_dir / "runsc"
    out = subprocess.run([find_runsc() or "runsc", f"--root={root}", *args], capture_output=True, text=True, timeout=60)
    return out.stdout


@pytest.fixture
def own_server() -> Iterator[Server]:
    """A server of the test's own, without a warm pool (these tests count runsc's containers)."""
    server = make_server("--warm-pool", "0")
    server.start()
    try:
        yield server
    finally:
        retire(server)


def retire(server: Server, before_remove: Callable[[], object] = lambda: None) -> None:
    """Stop a test's own server and leave nothing of it: boxes, containers, directories."""
    if server.proc and server.proc.poll() is None:
        server.cleanup_boxes(server.admin_key())
    server.stop()
    for rid in runsc_cli(server, "list", "--quiet").split():
        runsc_cli(server, "delete", "--force", rid)
    before_remove()
    server.remove()


@dataclass
class Env:
    server: Server
    key_a: str  # team "default"
    key_b: str  # team "other"

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="session")
def env() -> Iterator[Env]:
    server = make_server()
    server.start()
    e = Env(server, server.admin_key(), server.new_team("other"))
    try:
        yield e
    finally:
        try:
            server.cleanup_boxes(e.key_a, e.key_b)
        finally:
            server.stop()
            server.remove()


@pytest.fixture(autouse=True)
def _client_config(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HUTCH_API_KEY", env.key_a)
    monkeypatch.setenv("HUTCH_BASE_URL", env.url)


# --- one blocking face over the sync and the async SDK ---------------------------------------------

class _Loop:
    """An event loop on its own thread, for driving the async SDK from a blocking test."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, awaitable: Any) -> Any:
        async def wait() -> Any:
            return await awaitable
        return asyncio.run_coroutine_threadsafe(wait(), self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


class Blocking:
    """Runs every call of an async SDK object to completion, so one test body serves both SDKs."""

    WRAP = (AsyncSandbox, AsyncCommands, AsyncFiles, AsyncProcess, AsyncProcessStdin)

    def __init__(self, target: Any, loop: _Loop) -> None:
        self._target, self._loop = target, loop

    def _wrap(self, value: Any) -> Any:
        if isinstance(value, self.WRAP):
            return Blocking(value, self._loop)
        return value

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return self._wrap(value)

        def call(*args: Any, **kwargs: Any) -> Any:
            result = value(*args, **kwargs)
            if inspect.isawaitable(result):
                result = self._loop.run(result)
            return self._wrap(result)

        return call

    def __repr__(self) -> str:
        return f"Blocking({self._target!r})"


@pytest.fixture(params=["sync", "async"])
def sdk(request: pytest.FixtureRequest) -> Iterator[Any]:
    """`Sandbox`, or `AsyncSandbox` driven to completion call by call."""
    if request.param == "sync":
        yield Sandbox
        return
    loop = _Loop()
    try:
        yield Blocking(AsyncSandbox, loop)
    finally:
        loop.close()


@pytest.fixture
def box(sdk: Any) -> Iterator[Any]:
    sb = sdk.create(name="test", metadata={"suite": "tests"})
    try:
        yield sb
    finally:
        sb.kill()


@pytest.fixture
def make_box(sdk: Any) -> Iterator[Callable[..., Any]]:
    made: list[Any] = []

    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("name", "test")
        sb = sdk.create(**kwargs)
        made.append(sb)
        return sb

    yield make
    for sb in made:
        sb.kill()


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


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")



# --- a stand-in for the internet, in a network namespace -------------------------------------------

@pytest.fixture(scope="session")
def internet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Internet]:
    with stand_in_internet(tmp_path_factory.mktemp("internet")) as net:
        yield net
