"""Load and faults: many clients at once, a box's runtime killed from outside, the server killed
in the middle of creates, a full disk. Each ends with nothing leaked and nothing lost."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import pytest

from hutch import Sandbox, SandboxError, ServerError
from hutch.store import POOL_SIZE
from tests.integration.support import Env, Server, in_background, make_server, retire, runsc_cli, wait_for


def _held(server: Server) -> dict[str, set[str]]:
    """What the host holds for the server's boxes: runsc containers, box directories, channel
    mounts; and the server's open descriptors."""
    boxes = server.config.run_dir / "boxes"
    mounts = {line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
              if line.split()[1].startswith(str(boxes))}
    assert server.proc is not None
    return {"containers": set(runsc_cli(server, "list", "--quiet").split()),
            "dirs": {d.name for d in boxes.iterdir()} if boxes.exists() else set(), "mounts": mounts,
            "fds": set(os.listdir(f"/proc/{server.proc.pid}/fd"))}


def _live_runtime_ids(server: Server) -> set[str]:
    return {r.runtime_id for r in server.store().list_sandboxes(None) if r.runtime_id and r.status == "active"}


def test_twenty_clients_creating_running_and_killing_leak_nothing(own_server: Server) -> None:
    kw = own_server.client_args()
    before = _held(own_server)
    errors: list[BaseException] = []
    done = [0]
    deadline = time.monotonic() + 25

    def client(n: int) -> None:
        while time.monotonic() < deadline:
            try:
                sb = Sandbox.create(name=f"load-{n}", **kw)
                try:
                    assert sb.commands.run(f"echo {n}").stdout == f"{n}\n"
                finally:
                    sb.kill()
                done[0] += 1
            except BaseException as e:  # counted, and shown below
                errors.append(e)

    clients = [in_background(partial(client, n)) for n in range(20)]
    for c in clients:
        c.join(300)
    assert not errors, errors[:3]
    assert done[0] >= 20
    after = _held(own_server)
    assert after["containers"] == before["containers"] == set()
    assert after["dirs"] == before["dirs"] and after["mounts"] == before["mounts"]
    # beyond the store's pooled connections (a database and its WAL file each), all closed
    assert len(after["fds"]) <= len(before["fds"]) + 3 * POOL_SIZE + 10, "the server's sockets and files all closed"
    assert Sandbox.list(**kw) == []


def test_a_box_killed_from_outside_is_failed_and_the_others_are_untouched(env: Env) -> None:
    victim = Sandbox.create(name="victim")
    other = Sandbox.create(name="other")
    try:
        other.files.write("/tmp/mine", "kept")
        rec = env.server.record(victim.id)
        assert rec.runtime_id
        subprocess.run(["pkill", "-9", "-f", rec.runtime_id], check=True)  # every runsc process of that box
        wait_for(lambda: victim.get_info().status == "failed", timeout=20, what="the box to be failed")
        assert other.commands.run("cat /tmp/mine").stdout == "kept"
        assert other.get_info().status == "active"
    finally:
        victim.kill()
        other.kill()


def test_a_server_killed_mid_create_leaves_no_orphans(own_server: Server) -> None:
    kw = own_server.client_args()
    outcomes: list[str] = []

    def create(n: int) -> None:
        try:
            Sandbox.create(name=f"mid-{n}", **kw)
            outcomes.append("made")
        except SandboxError:
            outcomes.append("failed")

    creates = [in_background(partial(create, n)) for n in range(4)]
    boxes = own_server.config.run_dir / "boxes"
    wait_for(lambda: boxes.is_dir() and any(boxes.iterdir()), what="the creates in flight: boxes booting")
    own_server.stop(signal.SIGKILL)
    for c in creates:
        c.join(120)
    own_server.start()
    live = _live_runtime_ids(own_server)
    held = _held(own_server)
    assert held["containers"] == live, "every container left is a recorded, live sandbox"
    assert len(held["dirs"]) == len(live) and len(held["mounts"]) == len(live)
    for info in Sandbox.list(**kw):
        assert Sandbox.connect(info.id, **kw).commands.run("echo ok").stdout == "ok\n"


@pytest.fixture
def small_disk_server() -> Iterator[Server]:
    # a team's default checkpoint budget (half of 80% of 160 MiB) is less than a pause's estimate
    server = make_server("--warm-pool", "0", "--team-max-paused-bytes", "1G")
    server.data_dir.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160m,mode=0700", "tmpfs", str(server.data_dir)], check=True)
    try:
        server.start()
        yield server
    finally:
        retire(server, lambda: subprocess.run(["umount", "-l", str(server.data_dir)], capture_output=True))


def test_a_full_disk_is_a_clear_error_and_loses_nothing(small_disk_server: Server) -> None:
    server = small_disk_server
    kw = server.client_args()
    running = Sandbox.create(name="running", **kw)
    paused = Sandbox.create(name="paused", **kw)
    running.files.write("/home/user/work.txt", "unsaved work")
    paused.files.write("/home/user/state.txt", "paused state")
    paused.pause()
    filler = server.data_dir / "filler"
    free = os.statvfs(server.data_dir)
    with open(filler, "wb") as f:
        f.truncate(0)
        f.write(b"\0" * max(0, free.f_bavail * free.f_frsize - 4 * 2**20))  # leave 4 MiB
    try:
        with pytest.raises(ServerError) as full:
            running.pause()
        assert full.value.status_code == 507 and full.value.code == "insufficient_storage"
        assert running.get_info().status == "active"
        assert running.commands.run("cat /home/user/work.txt").stdout == "unsaved work"
        r = httpx.post(f"{server.url}/v1/sandboxes", json={"name": "on-a-full-disk"},
                       headers={"Authorization": f"Bearer {kw['api_key']}"}, timeout=120)
        assert r.status_code in (201, 507), r.text
        if r.status_code == 201:
            Sandbox.kill_by_id(r.json()["id"], **kw)
    finally:
        filler.unlink()
    paused.resume()
    assert paused.commands.run("cat /home/user/state.txt").stdout == "paused state"
    running.pause()
    running.resume()
    assert running.commands.run("cat /home/user/work.txt").stdout == "unsaved work"


def test_the_server_raises_its_open_files_limit(env: Env) -> None:
    """Started with the systemd default soft limit (1024), the server takes as many descriptors as
    it may (65536, or the hard limit where it cannot raise that): a few boxes holding idle
    connections must not leave it unable to accept."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    server = make_server("--warm-pool", "0")
    server.preexec = partial(resource.setrlimit, resource.RLIMIT_NOFILE, (1024, hard))
    server.start()
    try:
        assert server.proc is not None
        limits = Path(f"/proc/{server.proc.pid}/limits").read_text()
        soft = int(next(line for line in limits.splitlines() if line.startswith("Max open files")).split()[3])
        assert soft >= min(65536, hard) and soft > 1024, limits
    finally:
        retire(server)
