"""The OCI runtime spec of a box: its root, mounts, limits and the agent as PID 1."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hutch.guest import protocol
from hutch.node import roots

# What the agent (root inside the box) may do: run commands as another user, hand files to that
# user, write anywhere in the box. Docker's default set, without raw sockets: no CAP_SYS_ADMIN (no
# mount), no CAP_SYS_MODULE, CAP_SYS_PTRACE or CAP_NET_ADMIN. Every root process of a box has these
# and no more: the agent's own, a command the API runs as root, and one the box user runs with
# `sudo` (the agent starts it: hutch/guest/sudod.py).
AGENT_CAPABILITIES = [
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID",
    "CAP_SETUID", "CAP_SETPCAP", "CAP_SETFCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
    "CAP_AUDIT_WRITE", "CAP_MKNOD",
]


CPU_PERIOD = 100_000  # microseconds


@dataclass(frozen=True)
class Limits:
    memory_mib: int = 1024
    pids: int = 1024
    cpu_shares: int = 1024
    nofile: int = 65536
    cpus: int = 0  # a hard cap in CPUs (the template's vcpu), through the box's cgroup; 0: none
    disk_mib: int = 0  # what the box may write to its root (hutch.node.disks); 0: in its memory, no cap

    @classmethod
    def of_shape(cls, vcpu: int, memory_mib: int, pids: int, disk_mib: int = 0) -> Limits:
        """A box of a template's shape: capped at `vcpu` CPUs (weighted by them against others),
        `memory_mib` of memory and `disk_mib` of writes to its root."""
        return cls(memory_mib=memory_mib, pids=pids, cpu_shares=1024 * vcpu, cpus=vcpu, disk_mib=disk_mib)


# Which agent boxes run as PID 1 (HUTCH_AGENT): "python" (hutch/guest, from the runtime root) or
# "go" (agent/, which scripts/install builds into the cache dir's "agent", a directory holding it
# alone). Unset: the compiled one where it is built, else the Python one (logged), so an install
# without Go (a package, an image that did not build it) still serves boxes.
AGENT_ENV = "HUTCH_AGENT"
DEFAULT_AGENT = "go"

log = logging.getLogger("hutch.node")


def agent_kind() -> str:
    kind = os.environ.get(AGENT_ENV, "") or DEFAULT_AGENT
    if kind not in ("go", "python"):
        raise ValueError(f"{AGENT_ENV} must be go or python, not {kind!r}")
    return kind


# A compiled agent is mounted from a directory named by its binary's content (`pin_agent`), and a
# checkpoint names it (hutch.node.nodebox): runsc restores a process only from the very file its
# memory maps, so a box paused before an upgrade of the agent resumes with the binary it ran.
AGENT_SUM = re.compile(r"[0-9a-f]{16}")


def pin_agent(binary: Path, pins_dir: Path) -> tuple[str, Path]:
    """The content sum of the compiled agent at `binary`, and `pins_dir/<sum>`: a directory holding
    a copy of it alone, made if new (never changed after: a later build gets a directory of its own)."""
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()[:16]
    pinned = pins_dir / digest
    if not (pinned / protocol.AGENT_BINARY).is_file():
        pins_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
        for stale in pins_dir.glob(".new-*"):  # a copy a crash cut short (one server runs on a data dir)
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(dir=pins_dir, prefix=".new-"))
        try:
            shutil.copyfile(binary, work / protocol.AGENT_BINARY)
            os.chmod(work / protocol.AGENT_BINARY, 0o755)
            os.chmod(work, 0o755)
            os.rename(work, pinned)
        except OSError:
            shutil.rmtree(work, ignore_errors=True)
            if not (pinned / protocol.AGENT_BINARY).is_file():  # not another process' pin of the same binary
                raise
    return digest, pinned


@dataclass(frozen=True)
class AgentRuntime:
    """How to start the agent: its Python from the read-only runtime root, whatever the template,
    or the compiled agent, from its own directory mounted read-only.

    That directory is mounted whenever it exists, whichever agent runs: a box's checkpoint can only
    be restored with the mounts it was taken with, so a snapshot stays restorable when the setting
    changes (a mount more than the image had is fine, one fewer is not)."""

    root: Path  # host path of a Debian root with python3
    loader: str  # paths inside that root
    library_path: str
    python: str
    bin_dir: Path | None = None  # host directory of the compiled agent, mounted if set
    compiled: bool = False  # run the compiled agent rather than the Python one
    bin_sum: str | None = None  # the content sum `bin_dir` is pinned under (`pin_agent`), if it is
    pins_dir: Path | None = None  # where the binaries boxes ran are pinned

    @classmethod
    def find(cls, root: Path, compiled_dir: Path, pins_dir: Path | None = None) -> AgentRuntime:
        """The runtime in `root`, and the compiled agent in `compiled_dir` (base_image.agent_dir),
        pinned under `pins_dir` if given."""
        libdirs = sorted(root.glob("usr/lib/*-linux-gnu"))
        loaders = sorted(p for d in libdirs for p in d.glob("ld-linux*.so.*") if not p.is_symlink())
        pythons = sorted(p for p in (root / "usr/bin").glob("python3.[0-9]*") if p.name.count(".") == 1)
        if not loaders or not pythons:
            raise FileNotFoundError(f"{root} holds no dynamic loader and python3: not a usable agent runtime")

        def rel(p: Path) -> str:
            return "/" + str(p.relative_to(root))

        lib = ":".join(protocol.RUNTIME_DIR + rel(d) for d in libdirs)
        compiled = agent_kind() == "go"
        if compiled and not (compiled_dir / protocol.AGENT_BINARY).is_file():
            if os.environ.get(AGENT_ENV):
                raise FileNotFoundError(f"{compiled_dir / protocol.AGENT_BINARY}: the compiled agent is not built "
                                        f"(scripts/install builds it); or set {AGENT_ENV}=python")
            log.warning("%s is not built (scripts/install builds it): boxes run the Python agent",
                        compiled_dir / protocol.AGENT_BINARY)
            compiled = False
        bin_dir, bin_sum = (compiled_dir if compiled_dir.is_dir() else None), None
        if bin_dir is not None and pins_dir is not None and (bin_dir / protocol.AGENT_BINARY).is_file():
            bin_sum, bin_dir = pin_agent(bin_dir / protocol.AGENT_BINARY, pins_dir)
        return cls(root, protocol.RUNTIME_DIR + rel(loaders[0]), lib, protocol.RUNTIME_DIR + rel(pythons[-1]),
                   bin_dir, compiled, bin_sum, pins_dir)

    def pinned(self, bin_sum: str | None) -> tuple[str | None, Path | None]:
        """The compiled agent a box is started with, as (sum, directory): the one pinned as
        `bin_sum` (what a checkpoint ran) if this host keeps it, else this runtime's."""
        if bin_sum and self.pins_dir is not None and AGENT_SUM.fullmatch(bin_sum):
            pinned = self.pins_dir / bin_sum
            if (pinned / protocol.AGENT_BINARY).is_file():
                return bin_sum, pinned
        if bin_sum and bin_sum != self.bin_sum:  # another node's, or removed: the restore may not take
            log.warning("the agent a checkpoint ran (%r) is not kept here: restoring with this one (%s)",
                        bin_sum[:64], self.bin_sum)
        return self.bin_sum, self.bin_dir

    def argv(self) -> list[str]:
        if self.compiled:  # static: needs nothing of the runtime root or the template
            return [f"{protocol.AGENT_BIN_DIR}/{protocol.AGENT_BINARY}"]
        # Started through the runtime's own loader, so nothing of the template is needed.
        agent = f"{protocol.AGENT_DIR}/agent.py"
        # -S -s: no site module and no user site: nothing to import that the agent does not use
        return [self.loader, "--library-path", self.library_path, self.python, "-S", "-s", "-B", agent]


def box_spec(*, rootfs: Path, channel_dir: Path, agent_dir: Path, runtime: AgentRuntime,
             hostname: str, limits: Limits, trust_dir: Path | None = None, cgroup: str = "box",
             volumes: Sequence[tuple[Path, str, bool]] = (), template_root: Path | None = None,
             bin_dir: Path | None = None) -> dict[str, Any]:
    """`volumes`: (host directory, path in the box, read-only) of each volume it mounts, mounted
    last, so nothing of the box's own is ever mounted inside one. `template_root`: the template's
    own root when `rootfs` is an overlay of it (what is looked at on the host). `bin_dir`: the
    compiled agent's directory, if not the runtime's (`AgentRuntime.pinned`)."""
    bin_dir = bin_dir or runtime.bin_dir
    def bind(src: Path, dst: str, mode: str) -> dict[str, Any]:
        return {"destination": dst, "type": "bind", "source": str(src), "options": ["rbind", mode]}

    caps = list(AGENT_CAPABILITIES)
    trust = []
    if trust_dir is not None:
        trust.append(bind(trust_dir, protocol.TRUST_DIR, "ro"))
        # Tools that read only the system's bundle. Where the root has a link there instead, it keeps
        # it: runsc would resolve a link in the box, but then a file would be mounted wherever it points.
        if roots.is_file_in(template_root or rootfs, protocol.SYSTEM_BUNDLE):  # a link in the root: never followed by the host
            trust.append(bind(trust_dir / "bundle.crt", protocol.SYSTEM_BUNDLE, "ro"))
    return {
        "ociVersion": "1.0.0",
        "process": {
            "user": {"uid": 0, "gid": 0},
            "args": runtime.argv(),
            "env": [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                *([] if runtime.compiled else [f"PYTHONHOME={protocol.RUNTIME_DIR}/usr", "PYTHONDONTWRITEBYTECODE=1"]),
            ],
            "cwd": "/",
            "terminal": False,
            # Nothing gains privileges by execve: setuid and setgid bits and file capabilities grant
            # nothing (a template's own sudo or su, a setuid copy of a shell root left behind). runsc
            # 20240729 behaves so whatever this says (it logs that it ignores false); later releases
            # honour those bits only with --allow-suid, which hutch does not pass, and not under this
            # flag. The box user's way to root is the agent's `sudo` service, which hands out what
            # the API's user="root" does.
            "noNewPrivileges": True,
            "capabilities": {k: caps for k in ("bounding", "effective", "permitted")},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": limits.nofile, "soft": limits.nofile}],
        },
        # Writable so the in-memory overlay accepts writes; the directory itself is never touched.
        "root": {"path": str(rootfs), "readonly": False},
        "hostname": hostname,
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
            bind(channel_dir, protocol.CHANNEL_DIR, "rw"),
            bind(agent_dir, protocol.AGENT_DIR, "ro"),
            bind(runtime.root, protocol.RUNTIME_DIR, "ro"),
            # the compiled agent's directory (it holds the binary alone), whichever agent runs
            *([] if bin_dir is None else [bind(bin_dir, protocol.AGENT_BIN_DIR, "ro")]),
            *trust,
            *(bind(src, dst, "ro" if ro else "rw") for src, dst, ro in volumes),
        ],
        "linux": {
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            "resources": {
                "memory": {"limit": limits.memory_mib * 2**20},
                "pids": {"limit": limits.pids},
                "cpu": {"shares": limits.cpu_shares,
                        **({"quota": limits.cpus * CPU_PERIOD, "period": CPU_PERIOD} if limits.cpus else {})},
            },
            # Always a cgroup of its own: it holds the memory and pid limits (and the CPU cap). runsc
            # refuses to start a box it cannot give one, unless told to ignore cgroups (hutch.node.hostlimits).
            "cgroupsPath": f"/hutch/{cgroup}",
        },
    }
