"""A whole hutch fleet on this one machine, for the fleet's tests and benches: a Ray head, a
PostgreSQL store, N node runtimes (each in a network namespace of its own, standing for a host)
and M stateless API servers.

    with Fleet() as fleet:                      # nodes a, b, c; API servers 0 and 1
        box = Sandbox.create("x", **fleet.client_args(0))
        fleet.kill_node("a")                    # as when a host is lost

The network: a bridge `hfleet0` (10.231.0.1/24) in the root namespace; node i (0-based) in
namespace `hf-<name>` at 10.231.0.(10+i), joined to the bridge by a veth (`hfv-<name>` on the
bridge's side, `eth0` inside); nothing is routed off the machine. The Ray head, PostgreSQL and
the API servers run in the root namespace (the head and PostgreSQL on 10.231.0.1, the API servers
on 127.0.0.1). Every member shares one directory (`shared`, standing for an NFS mount) and the base
template's cache (/var/cache/hutch, as the integration tests use; scripts/test builds it).

A node runs under `nsenter --net=/run/netns/hf-<name> unshare --mount --propagation slave`, not
`ip netns exec`: `ip netns exec` mounts a fresh /sys for the namespace, which hides
/sys/fs/cgroup, and runsc then cannot start a box at all ("cannot set up cgroup for root: stat
/sys/fs/cgroup/cpu"). The mount namespace of its own keeps a node's mounts (channel tmpfs, disks)
its own, as on a host of its own; they go with its last process.

Ray: the head's temp dir is under this fleet's directory, so nothing collides with another Ray on
the machine. A worker node takes the head's temp dir path; each node sees a directory of its own
there (bind-mounted in its mount namespace), as a host has its own /tmp: Ray nodes started at once
on one temp dir race for the same socket names ("bind: Address already in use", the raylet aborts).
`ray stop` is never used: it ends every Ray process on the machine, other people's too. The head
is ended by its process group.

One fleet at a time (the bridge and the addresses are fixed): a lock in /run says so, and a
fleet's start cleans what a crashed earlier one left (its namespaces, links, processes, disks).

No pytest here (benches import this module too).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from hutch.services.config import DEFAULT_CACHE_DIR, ServerConfig
from tests.integration.support import ClientArgs
from tests.postgres import running_postgres

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
VENV_BIN = Path(PYTHON).parent
HUTCH = [PYTHON, "-m", "hutch.cli"]
RAY = str(VENV_BIN / "ray")

BRIDGE = "hfleet0"
SUBNET = "10.231.0"
BRIDGE_IP = f"{SUBNET}.1"
NAMESPACE_PREFIX = "hf-"
VETH_PREFIX = "hfv-"
NODE_PORT = 7430  # each node's internal API, on its own address
LOCK = Path("/run/hfleet.lock")
STATE = Path("/run/hfleet.root")  # the directory of the fleet holding the lock: what a crash leaves is under it

# Ray's health checks (read by the head's GCS): a dead node is seen in about three seconds
RAY_HEALTH = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3",
              "RAY_health_check_timeout_ms": "1000", "RAY_health_check_initial_delay_ms": "1000"}


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    """As tests.integration.support.wait_for (which imports pytest, so it is not imported here)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


# --- processes, found by what they are, ended by their id --------------------------------------

def _processes() -> dict[int, tuple[int, str, str]]:
    """Every live process: pid -> (parent pid, state, command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":  # a zombie is dead already: only its parent's wait is missing
            found[int(entry.name)] = (int(fields[1]), fields[0], cmdline)
    return found


def _with_descendants(roots: Iterable[int], table: dict[int, tuple[int, str, str]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [p for p in roots if p in table]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def namespace_pids(namespace: str) -> set[int]:
    """The processes in a network namespace (`ip netns pids`)."""
    done = _ip("netns", "pids", namespace, check=False)
    return {int(p) for p in done.stdout.split() if p.isdigit()}


def _pgid_members(pgid: int, table: dict[int, tuple[int, str, str]]) -> set[int]:
    found = set()
    for pid in table:
        try:
            if os.getpgid(pid) == pgid:
                found.add(pid)
        except ProcessLookupError:
            pass
    return found


def kill_all(find: Callable[[], set[int]], timeout: float = 30.0, what: str = "processes") -> None:
    """SIGKILL what `find` names until it names nothing (what it names may fork meanwhile)."""
    protected = {1, os.getpid(), os.getppid()}

    def gone() -> bool:
        pids = find() - protected
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return not pids

    wait_for(gone, timeout, f"{what} to end")


def _mentioning(needles: Sequence[str], table: dict[int, tuple[int, str, str]]) -> set[int]:
    return {pid for pid, (_, _, cmdline) in table.items() if any(n in cmdline for n in needles)}


# --- what the fleet's members leave on the host --------------------------------------------------

def _run_dir(data_dir: Path) -> Path:
    return ServerConfig(data_dir=data_dir).run_dir


def _release_host_state(root: Path, run_dirs: Sequence[Path]) -> None:
    """Once no process of theirs runs: the mounts, loop devices and run dirs of members whose
    data dirs were under `root`."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for mount in sorted(mounts, key=len, reverse=True):
        if any(mount.startswith(f"{d}/") for d in (str(root), *map(str, run_dirs))):
            subprocess.run(["umount", "-l", mount], capture_output=True, timeout=30)
    loops = subprocess.run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
                           capture_output=True, text=True, timeout=30).stdout
    for line in loops.splitlines():
        parts = line.split(maxsplit=1)
        if len(parts) == 2 and parts[1].strip().startswith(f"{root}/"):
            subprocess.run(["losetup", "--detach", parts[0]], capture_output=True, timeout=30)
    for run_dir in run_dirs:
        shutil.rmtree(run_dir, ignore_errors=True)


def _member_run_dirs(root: Path) -> list[Path]:
    return [_run_dir(d) for pattern in ("node-*/data", "api-*/data") for d in root.glob(pattern)]


def clean_leftovers() -> None:
    """What a fleet that did not get to its own cleanup left: its processes (by its directory, its
    members' run dirs and its namespaces), its namespaces and links, its disks and directories.
    Called with the lock held, so no live fleet owns any of it."""
    old_root = Path(STATE.read_text().strip()) if STATE.exists() else None
    namespaces = [line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines()
                  if line.startswith(NAMESPACE_PREFIX)]
    run_dirs = _member_run_dirs(old_root) if old_root and old_root.is_dir() else []
    needles = [str(p) for p in (old_root, *run_dirs) if p is not None]

    def leftovers() -> set[int]:
        table = _processes()
        roots = _mentioning(needles, table) if needles else set()
        for ns in namespaces:
            roots |= namespace_pids(ns)
        return _with_descendants(roots, table)

    kill_all(leftovers, what="a crashed fleet's processes")
    for ns in namespaces:
        _ip("netns", "del", ns, check=False)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(VETH_PREFIX):
            _ip("link", "del", name, check=False)
    _ip("link", "del", BRIDGE, check=False)
    if old_root is not None:
        _release_host_state(old_root, run_dirs)
        shutil.rmtree(old_root, ignore_errors=True)
    STATE.unlink(missing_ok=True)


# --- ray, read from outside the cluster --------------------------------------------------------

def _gcs(address: str) -> Any:
    raylet: Any = importlib.import_module("ray._raylet")  # GcsClient has no stub
    return raylet.GcsClient(address)


def ray_node_states(address: str) -> dict[str, str]:
    """Each Ray node's address -> its state as the GCS sees it (RUNNING, IDLE, DEAD, ...); a
    node's latest registration wins."""
    from ray.autoscaler.v2.sdk import get_cluster_resource_state

    pb: Any = importlib.import_module("ray.core.generated.autoscaler_pb2")
    state: Any = get_cluster_resource_state(_gcs(address))
    found: dict[str, str] = {}
    for n in state.node_states:
        status = pb.NodeStatus.Name(n.status)
        if found.get(n.node_ip_address) in (None, "DEAD"):
            found[n.node_ip_address] = status
    return found


def ray_resource_requests(address: str) -> list[dict[str, float]]:
    """The bundles asked of Ray's autoscaler, read from the GCS: `request_resources`' standing
    request (autoscaler v1 keeps it in the internal KV as JSON; v2 as cluster resource
    constraints), and the demand of work that waits for room (pending placement groups and
    tasks, which the GCS gathers from the raylets for the autoscaler)."""
    from ray.autoscaler.v2.sdk import get_cluster_resource_state

    gcs = _gcs(address)
    found: list[dict[str, float]] = []
    stored = gcs.internal_kv_get(b"autoscaler_resource_request", None)
    if stored:
        found += [{k: float(v) for k, v in b.items()} for b in json.loads(stored)]
    state: Any = get_cluster_resource_state(gcs)
    for constraint in state.cluster_resource_constraints:
        for by_count in constraint.resource_requests:
            found.append(dict(by_count.request.resources_bundle))
    for by_count in state.pending_resource_requests:
        found.append(dict(by_count.request.resources_bundle))
    for gang in state.pending_gang_resource_requests:
        for request in gang.requests:
            found.append(dict(request.resources_bundle))
    return found


# --- the members ---------------------------------------------------------------------------------

@dataclass
class Member:
    """A process of the fleet's, with its own data dir and log."""

    root: Path  # its own directory: data/ and log
    proc: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def run_dir(self) -> Path:
        return _run_dir(self.data_dir)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self, command: Sequence[str], env: dict[str, str]) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            log.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(command)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, cwd=REPO, start_new_session=True)

    def check(self, what: str) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"{what} exited ({self.proc.returncode}):\n{tail(self.log)}")


@dataclass
class Node(Member):
    name: str = ""
    index: int = 0
    lost: bool = False  # killed by kill_node

    @property
    def namespace(self) -> str:
        return NAMESPACE_PREFIX + self.name

    @property
    def veth(self) -> str:
        return VETH_PREFIX + self.name

    @property
    def ip(self) -> str:
        return f"{SUBNET}.{10 + self.index}"

    def pids(self) -> set[int]:
        """Every process of this 'host': in its namespace (the node, its Ray worker and Ray's
        workers), below the node, or naming its data or run dir (its boxes' runsc processes, which
        runsc puts in network namespaces of their own and which outlive the node)."""
        table = _processes()
        roots = namespace_pids(self.namespace) | _mentioning([str(self.data_dir), f"{self.run_dir}/"], table)
        if self.running and self.proc is not None:
            roots.add(self.proc.pid)
        return _with_descendants(roots, table)


@dataclass
class Api(Member):
    index: int = 0
    port: int = 0
    preview_port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False


@dataclass
class Fleet:
    """Start with `with Fleet(...) as fleet:`; everything is gone at the end. `vcpu` and
    `memory_mib` are what each node offers boxes (a base box takes 1 vcpu and 1024 MiB)."""

    node_names: Sequence[str] = ("a", "b", "c")
    apis: int = 2
    vcpu: int = 12
    memory_mib: int = 12288
    warm_pool: int = 0  # per node: 0 keeps box counts and capacity exact
    placement_wait: float = 5.0  # seconds an API server waits for room before no_capacity
    cache_dir: Path = DEFAULT_CACHE_DIR
    node_args: Sequence[str] = ()  # more `hutch node` options
    api_args: Sequence[str] = ()  # more `hutch serve` options
    keep: bool = False  # leave the fleet's directory (logs) behind
    out: IO[str] = sys.stderr  # where log tails go when something fails

    root: Path = field(init=False)
    shared: Path = field(init=False)
    store_url: str = field(init=False)
    ray_port: int = field(init=False)
    nodes: dict[str, Node] = field(init=False, default_factory=dict)
    servers: list[Api] = field(init=False, default_factory=list)
    _head_pgid: int | None = field(init=False, default=None)
    _head_log: Path = field(init=False)
    _stack: contextlib.ExitStack = field(init=False, default_factory=contextlib.ExitStack)
    _lock: IO[bytes] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        for name in self.node_names:
            # the veth's name (hfv-NAME) must fit IFNAMSIZ; a name is also a namespace's
            assert name.isascii() and name.isalnum() and name.islower() and len(name) <= 10, f"bad node name {name!r}"
        assert len(self.node_names) <= 200 and len(set(self.node_names)) == len(self.node_names)

    # --- the whole fleet ---

    @property
    def ray_address(self) -> str:
        return f"{BRIDGE_IP}:{self.ray_port}"

    def __enter__(self) -> Fleet:
        try:
            self.start()
        except BaseException:
            if self._lock is not None:
                self.print_logs("the fleet did not start")
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is not None:
            self.print_logs(f"the fleet's user raised {kind.__name__}")
        self.close()

    def start(self) -> None:
        self._take_lock()
        clean_leftovers()
        self.root = Path(tempfile.mkdtemp(prefix="hfleet-", dir="/tmp"))  # short: Ray's socket paths
        self.root.chmod(0o755)  # PostgreSQL runs as its own user, under it
        STATE.write_text(str(self.root))
        self.shared = self.root / "shared"
        self.shared.mkdir()
        self._head_log = self.root / "ray-head.log"
        self._network()
        self.store_url = self._stack.enter_context(running_postgres(self.root / "pg", host=BRIDGE_IP))
        self._ray_head()
        for i, name in enumerate(self.node_names):
            self.nodes[name] = Node(self.root / f"node-{name}", name=name, index=i)
            self.start_node(name, wait=False)
        for name in self.node_names:
            self.wait_node_up(name)
        for i in range(self.apis):  # one after the other: the first makes the default team
            self.servers.append(Api(self.root / f"api-{i}", index=i, port=free_port(), preview_port=free_port()))
            self.start_api(i)
        wait_for(lambda: all(ray_node_states(self.ray_address).get(n.ip) in ("RUNNING", "IDLE")
                             for n in self.nodes.values()), 60, "every node in Ray")

    def close(self) -> None:
        """Everything down and gone; safe after a partial start."""
        if self._lock is None:
            return  # not started, or another fleet's lock: nothing here is ours
        try:
            for api in self.servers:
                self._stop(api)
            for node in self.nodes.values():
                self._stop(node, wait=30)
                kill_all(node.pids, what=f"node {node.name}'s processes")
                if node.proc is not None:
                    node.proc.wait()
            if self._head_pgid is not None:
                pgid = self._head_pgid
                kill_all(lambda: _with_descendants(_pgid_members(pgid, _processes()), _processes()), what="the Ray head")
                self._head_pgid = None
        finally:
            try:
                self._stack.close()  # PostgreSQL
            finally:
                self._teardown_network()
                if hasattr(self, "root"):
                    _release_host_state(self.root, _member_run_dirs(self.root))
                    if not self.keep:
                        shutil.rmtree(self.root, ignore_errors=True)
                STATE.unlink(missing_ok=True)
                if self._lock is not None:
                    self._lock.close()
                    self._lock = None

    def _take_lock(self) -> None:
        self._lock = open(LOCK, "wb")  # noqa: SIM115 (held until close)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            self._lock.close()
            self._lock = None
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise RuntimeError(f"another fleet runs on this machine (it holds {LOCK})") from None
            raise

    def _env(self) -> dict[str, str]:
        """What every member runs with: this checkout importable (Ray's workers need hutch too),
        the venv's `ray` first on PATH, Ray's temp dir under the fleet's, no usage stats."""
        path = os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        return {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{VENV_BIN}:{path}", "RAY_TMPDIR": str(self.root),
                "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}

    # --- network ---

    def _network(self) -> None:
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for i, name in enumerate(self.node_names):
            ns, veth, address = NAMESPACE_PREFIX + name, VETH_PREFIX + name, f"{SUBNET}.{10 + i}"
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", BRIDGE)
            _ip("link", "set", veth, "up")
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        route = _ip("route", "get", f"{SUBNET}.10").stdout
        assert f"dev {BRIDGE} " in route, f"{SUBNET}.0/24 would not go to the fleet's bridge: {route}"

    def _teardown_network(self) -> None:
        for name in self.node_names:
            _ip("link", "del", VETH_PREFIX + name, check=False)
            _ip("netns", "del", NAMESPACE_PREFIX + name, check=False)
        _ip("link", "del", BRIDGE, check=False)

    # --- Ray's head ---

    def _ray_head(self) -> None:
        self.ray_port = free_port(BRIDGE_IP)
        command = [RAY, "start", "--head", "--node-ip-address", BRIDGE_IP, "--port", str(self.ray_port),
                   "--num-cpus", "0", "--include-dashboard=false", "--disable-usage-stats",
                   "--temp-dir", str(self.root / "ray"),
                   # ports of their own: their defaults are fixed, and another Ray may hold them
                   "--ray-client-server-port", str(free_port(BRIDGE_IP)),
                   "--dashboard-agent-listen-port", str(free_port(BRIDGE_IP))]
        with open(self._head_log, "ab") as log:
            # a session of its own: the head's daemons stay in its process group, which ends them
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env={**self._env(), **RAY_HEALTH}, cwd=self.root, start_new_session=True)
        self._head_pgid = proc.pid
        if proc.wait(180) != 0:
            raise RuntimeError(f"ray start --head failed:\n{tail(self._head_log)}")
        wait_for(lambda: _listening(BRIDGE_IP, self.ray_port), 30, "Ray's GCS")

    def ray_head_alive(self) -> bool:
        return self._head_pgid is not None and bool(self.head_pids())

    def head_pids(self) -> set[int]:
        """The Ray head's processes (its GCS, raylet and their helpers): what Ray's control costs."""
        return _pgid_members(self._head_pgid, _processes()) if self._head_pgid is not None else set()

    # --- nodes ---

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def start_node(self, name: str, wait: bool = True) -> None:
        node = self.nodes[name]
        (node.root / "ray").mkdir(parents=True, exist_ok=True)
        # its own Ray temp dir where the head's is (a worker node takes the head's path): Ray
        # nodes started at once on one temp dir race for the same socket names
        own_tmp = ["sh", "-c", 'mount --bind "$1" "$2" && shift 2 && exec "$@"', "hfleet-node",
                   str(node.root / "ray"), str(self.root / "ray")]
        command = ["nsenter", f"--net=/run/netns/{node.namespace}", "unshare", "--mount", "--propagation", "slave",
                   "--", *own_tmp, *HUTCH, "--data-dir", str(node.data_dir), "node", "--ray", self.ray_address,
                   "--store", self.store_url, "--shared", str(self.shared), "--listen", f"{node.ip}:{NODE_PORT}",
                   "--name", name, "--vcpu", str(self.vcpu), "--memory-mib", str(self.memory_mib),
                   "--cache-dir", str(self.cache_dir), "--warm-pool", str(self.warm_pool), *self.node_args]
        node.spawn(command, self._env())
        node.lost = False
        if wait:
            self.wait_node_up(name)

    def wait_node_up(self, name: str, timeout: float = 180) -> None:
        """Until the node serves its API (it has joined Ray and registered by then)."""
        node = self.nodes[name]

        def up() -> bool:
            node.check(f"node {name}")
            self._check_head()
            return _listening(node.ip, NODE_PORT)

        wait_for(up, timeout, f"node {name} on {node.ip}:{NODE_PORT}")

    def kill_node(self, name: str) -> None:
        """SIGKILL every process of the node's 'host' at once: the node, its Ray worker, Ray's
        workers and its boxes' runsc processes, as when the host is lost."""
        node = self.nodes[name]
        kill_all(node.pids, what=f"node {name}'s processes")
        if node.proc is not None:
            node.proc.wait()
        node.lost = True

    def wait_ray_sees(self, name: str, alive: bool, timeout: float = 30) -> None:
        ip = self.nodes[name].ip
        wanted = ("RUNNING", "IDLE") if alive else ("DEAD",)
        wait_for(lambda: ray_node_states(self.ray_address).get(ip, "DEAD") in wanted, timeout,
                 f"Ray to see node {name} {'alive' if alive else 'dead'}")

    # --- API servers ---

    def api(self, i: int) -> Api:
        return self.servers[i]

    def start_api(self, i: int) -> None:
        """Start API server i (again: on the same port, with the same data dir and keys)."""
        api = self.servers[i]
        command = [*HUTCH, "--data-dir", str(api.data_dir), "serve", "--store", self.store_url, "--ray", self.ray_address,
                   "--shared", str(self.shared), "--host", "127.0.0.1", "--port", str(api.port),
                   "--preview-port", str(api.preview_port), "--e2b-port", "0", "--cache-dir", str(self.cache_dir),
                   "--placement-wait", str(self.placement_wait), *self.api_args]
        api.spawn(command, self._env())

        def up() -> bool:
            api.check(f"API server {i}")
            self._check_head()
            return api.healthy()

        wait_for(up, 180, f"API server {i} on {api.url}")

    def kill_api(self, i: int) -> None:
        api = self.servers[i]
        assert api.proc is not None
        api.proc.send_signal(signal.SIGKILL)
        api.proc.wait()

    def env(self, i: int) -> dict[str, str]:
        """API server i's client env (its client.env: HUTCH_BASE_URL, HUTCH_API_KEY, E2B_*)."""
        found = {}
        for line in (self.servers[i].data_dir / "client.env").read_text().splitlines():
            name, sep, value = line.partition("=")
            if sep:
                found[name] = value
        return found

    def client_args(self, i: int) -> ClientArgs:
        """The SDK keywords for API server i: `Sandbox.create(..., **fleet.client_args(i))`."""
        env = self.env(i)
        return {"api_key": env["HUTCH_API_KEY"], "base_url": env["HUTCH_BASE_URL"]}

    def http(self, i: int) -> httpx.Client:
        """Plain HTTP to API server i's control plane, with its admin key."""
        return httpx.Client(base_url=self.servers[i].url, timeout=60,
                            headers={"Authorization": f"Bearer {self.env(i)['HUTCH_API_KEY']}"})

    def hutch(self, i: int, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A hutch client command against API server i."""
        env = {**self._env(), **self.env(i)}
        done = subprocess.run([*HUTCH, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            raise AssertionError(f"hutch {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done

    def node_list(self, i: int = 0) -> list[dict[str, Any]]:
        """`hutch --json nodes` through API server i."""
        rows: list[dict[str, Any]] = json.loads(self.hutch(i, "--json", "nodes").stdout)
        return rows

    def wait_nodes_up(self, names: Iterable[str], i: int = 0, timeout: float = 60) -> None:
        """Until API server i lists exactly `names` as up."""
        wanted = sorted(names)
        wait_for(lambda: sorted(r["name"] for r in self.node_list(i) if r["health"] == "up") == wanted, timeout,
                 f"nodes {wanted} up")

    # --- when something fails ---

    def _check_head(self) -> None:
        if not self.ray_head_alive():
            raise AssertionError("the Ray head is gone (did someone run `ray stop`? it ends every Ray on the "
                                 f"machine):\n{tail(self._head_log)}")

    def logs(self, chars: int = 3000) -> str:
        """The tail of every member's log."""
        parts = []
        if hasattr(self, "_head_log"):
            parts.append(("ray head", self._head_log))
        if hasattr(self, "root"):
            parts.append(("postgres", self.root / "pg" / "postgres.log"))
        for n in self.nodes.values():
            parts += [(f"node {n.name}", n.log), (f"node {n.name}'s ray start", n.data_dir / "ray-node.log")]
            parts += [(f"node {n.name}'s raylet", p) for p in sorted(n.root.glob("ray/session_2*/logs/raylet.err"))]
        parts += [(f"API server {a.index}", a.log) for a in self.servers]
        return "\n".join(f"----- {what} ({path}) -----\n{tail(path, chars)}" for what, path in parts)

    def print_logs(self, why: str) -> None:
        print(f"\n===== {why}: the fleet's logs =====\n{self.logs()}", file=self.out, flush=True)

    def _stop(self, member: Member, wait: float = 20) -> None:
        if member.running and member.proc is not None:
            member.proc.send_signal(signal.SIGTERM)
            try:
                member.proc.wait(wait)
            except subprocess.TimeoutExpired:
                member.proc.kill()
                member.proc.wait()

