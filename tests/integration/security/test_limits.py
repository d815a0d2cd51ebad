"""Fail closed: no box runs without its memory and pid limits. A host where runsc cannot make a box
a cgroup refuses the box, typed and leaving nothing behind, unless its operator allowed unlimited
boxes (`--allow-unlimited-boxes`), which the server then says loudly."""

from __future__ import annotations

import asyncio
import ctypes
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hutch import Sandbox
from hutch.node import base_image, mounts
from hutch.node.node import Node
from hutch.node.runsc import Runsc, RunscConfig, find_runsc
from hutch.node.spec import AgentRuntime, Limits
from hutch.services.config import DEFAULT_CACHE_DIR
from tests.integration.support import Server, make_server, retire, runsc_cli, wait_for

CLONE_NEWNS = 0x20000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
UNLIMITED = "WITHOUT MEMORY, PID OR CPU LIMITS"


def cgroups_read_only() -> None:
    """In the server's process before it starts: a mount namespace of its own in which every
    cgroup hierarchy is read-only, so runsc really cannot make a box a cgroup there."""
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int) -> None:
        if result != 0:
            raise OSError(ctypes.get_errno(), "unshare or mount")

    check(libc.unshare(CLONE_NEWNS))
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None))  # nothing of this reaches the host
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, target, kind, *_ = line.split()
        if kind in ("cgroup", "cgroup2"):
            check(libc.mount(None, target.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY, None))


def server_without_cgroups(*args: str) -> Iterator[Server]:
    server = make_server("--warm-pool", "0", *args)
    server.preexec = cgroups_read_only
    server.start()
    try:
        yield server
    finally:
        retire(server)


@pytest.fixture
def refusing() -> Iterator[Server]:
    yield from server_without_cgroups()


@pytest.fixture
def allowing() -> Iterator[Server]:
    yield from server_without_cgroups("--allow-unlimited-boxes")


def api(server: Server) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.admin_key()}"}, timeout=120)


def test_a_host_without_cgroups_refuses_boxes_typed_and_leaves_nothing(refusing: Server) -> None:
    with api(refusing) as c:
        r = c.post("/v1/sandboxes", json={"name": "no-limits"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "limits_unavailable", r.text
        assert [s for s in c.get("/v1/sandboxes").json() if s["status"] != "failed"] == []
    assert runsc_cli(refusing, "list", "--quiet").split() == [], "no half-made container"
    boxes = refusing.config.run_dir / "boxes"
    assert not boxes.exists() or list(boxes.iterdir()) == [], "no box directory"
    assert refusing.proc is not None
    mounts = Path(f"/proc/{refusing.proc.pid}/mountinfo").read_text()
    assert str(boxes) not in mounts, "no channel mount left in the server's namespace"
    log = refusing.log.read_text()
    assert "--allow-unlimited-boxes" in log and "cgroup" in log, "the log says what to do"


def test_with_the_flag_a_box_runs_unlimited_and_the_log_says_so(allowing: Server) -> None:
    wait_for(lambda: UNLIMITED in allowing.log.read_text(), what="the warning at start")
    assert allowing.log.read_text().count(UNLIMITED) == 1
    box = Sandbox.create(name="unlimited", **allowing.client_args())
    try:
        # what the log warns of is true: 1.5 GiB in a box of 1 GiB
        r = box.commands.run("python3 -c \"x = bytearray(1536 * 2**20); print('allocated', len(x))\"")
        assert r.stdout == f"allocated {1536 * 2**20}\n"
    finally:
        box.kill()
    log = allowing.log.read_text()
    assert log.count(UNLIMITED) == 2 and "runsc could not make a box a cgroup" in log, "said at its first box"


# --- a box's own cgroup, whatever its vcpu ----------------------------------------------------------

LIMIT_FILES = {"memory": ("memory.limit_in_bytes", "memory.max"), "pids": ("pids.max", "pids.max")}


def cgroup_of(pid: str, controller: str) -> str:
    """The cgroup of host process `pid` for `controller` (cgroup v1), or its only one (v2)."""
    where = dict(line.split(":", 2)[1:] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines())
    return where.get(controller, where[""])


def limit_of(pid: str, controller: str) -> str:
    """The limit of `controller` on host process `pid`, from its cgroup."""
    v1, v2 = LIMIT_FILES[controller]
    at = cgroup_of(pid, controller).lstrip("/")
    hierarchy = Path("/sys/fs/cgroup") / controller
    path = hierarchy / at / v1 if hierarchy.is_dir() else Path("/sys/fs/cgroup") / at / v2
    return path.read_text().strip()


def test_a_box_without_a_cpu_cap_is_still_held_to_its_memory_limit(tmp_path: Path) -> None:
    """A box of 0 vcpu (no CPU cap) still has its cgroup, with its memory and pid limits."""
    binary = find_runsc()
    assert binary is not None
    base = base_image.base_root_path(DEFAULT_CACHE_DIR)
    run_dir = Path("/run/hutch") / f"t-{tmp_path.name[-12:]}"

    async def scenario() -> None:
        runtime = AgentRuntime.find(base, base_image.agent_dir(DEFAULT_CACHE_DIR))
        node = Node(run_dir, Runsc(RunscConfig(run_dir / "runsc", binary=binary)), runtime)
        node.start_reaping()  # the node is this process' now: its boxes' sandboxes are ours to reap
        ref = await node.boot("k0", base, Limits(memory_mib=256, pids=128, cpus=0))
        try:
            # the host's view of the box's sandbox process: in the box's own cgroup, with its limits
            pid = (run_dir / "boxes" / "k0" / "sandbox.pid").read_text().strip()
            # hutch's own, as the spec asks (runsc 20240729 would make one at the root unasked)
            assert cgroup_of(pid, "memory") == cgroup_of(pid, "pids") == f"/hutch/{ref.runtime_id}"
            assert limit_of(pid, "memory") == str(256 * 2**20)
            assert limit_of(pid, "pids") == "128"
            assert node.capacity().limits
        finally:
            await node.stop(ref.runtime_id, ref.key)
            await node.close()

    try:
        asyncio.run(scenario())
    finally:
        # The Node made this process a subreaper: left so, pytest would adopt the boxes of every
        # server a later test kills, never reap them, and `runsc delete` would wait on the zombies.
        assert mounts.libc.prctl(mounts.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) == 0
        subprocess.run(["rm", "-rf", str(run_dir)], check=False)  # the stop unmounted its channel
