"""The node runtime: starts, finds, watches and stops the boxes on this host (the
`hutch.node.api.NodeRuntime` of a single host, in the server's process).

A box is a detached container of the node's driver (runsc by default) whose PID 1 is the guest
agent, listening on a Unix socket in a per-box host directory. The node holds one agent client per
box for that socket (hutch.node.agent), pinned once: the channel directory is writable from inside
the box, so a link planted in the socket's place cannot send the host's requests elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import secrets
import shutil
import signal
import stat
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hutch.guest import protocol
from hutch.node import agent, disks, metrics, mounts
from hutch.node.agent import AgentClient, Channel
from hutch.node.api import (
    CHECKPOINT_SLACK,
    BoxAgent,
    BoxRef,
    BoxStartError,
    Capacity,
    ChannelError,
    LimitsUnavailable,
    NoSpaceError,
    UsageSample,
    VolumeMount,
)
from hutch.node.driver import Driver, DriverError
from hutch.node.idle import Freezer
from hutch.node.runsc import Runsc, RunscConfig, tail_of
from hutch.node.spec import AgentRuntime, Limits, box_spec
from hutch.node.volumes import VolumeDisks

log = logging.getLogger("hutch.node")

AGENT_DIR = Path(protocol.__file__).parent
BOOT_TIMEOUT = 30.0
REAP_DELAY = 0.02

MEDIUM_FILE = "hutch-medium"  # in a checkpoint's directory: "disk" or "memory", what it was made with

# The drivers by name, as uvicorn names its HTTP implementations; each is made from the same config.
DRIVERS: dict[str, Callable[[RunscConfig], Driver]] = {"runsc": Runsc}
DEFAULT_DRIVER = "runsc"


class Egress(Protocol):
    """The egress proxy's listeners, one per box (hutch.egress.proxy.EgressProxy)."""

    async def listen(self, key: str, path: Path) -> None: ...

    async def close(self, key: str) -> None: ...


@dataclass
class Box:
    runtime_id: str
    dir: Path
    on_disk: bool = False  # its writes go to its own disk (hutch.node.disks), not its memory
    _agent: AgentClient | None = None

    @property
    def agent(self) -> AgentClient:
        if self._agent is None:
            raise ChannelError(f"box {self.runtime_id} has no pinned channel")
        return self._agent

    @property
    def ref(self) -> BoxRef:
        return BoxRef(self.runtime_id, self.dir.name)

    def pin_socket(self, channel: Channel | None = None) -> bool:
        """Pin the agent's socket (never a link) and talk through it from now on. False while
        the agent has not made it yet."""
        client = agent.pin(self.socket, channel)
        if client is None:
            return False
        self._agent = client
        return True

    async def release(self) -> None:
        if self._agent is not None:
            client, self._agent = self._agent, None
            await client.aclose()

    @property
    def channel_dir(self) -> Path:
        return self.dir / "chan"

    @property
    def disk_dir(self) -> Path:
        return self.dir / "disk"

    @property
    def socket(self) -> Path:
        return self.channel_dir / protocol.SOCKET_NAME


def _resident_bytes(pid_file: Path) -> int:
    """The resident memory of a box's sandbox process (0 if it cannot be read)."""
    try:
        status = Path(f"/proc/{int(pid_file.read_text())}/status").read_text()
        return 1024 * int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    except (OSError, ValueError, StopIteration):
        return 0


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _meminfo() -> dict[str, int]:
    """The host's /proc/meminfo, in bytes (empty if it cannot be read)."""
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            found[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return found


RUNTIME_ID_PATTERN = r"h[0-9a-f]{24}"  # what new_runtime_id makes (the fleet checks ids it is sent against it)


def _cgroup_refused(e: BoxStartError) -> bool:
    """Whether runsc itself failed the start for want of a cgroup (or of a controller in it): only
    a driver call's own failure counts, never a boot's later end, whose message carries what the
    box's PID 1 wrote (a box could write "cgroup" there to turn the node's limits off)."""
    return isinstance(e.__cause__, DriverError) and "cgroup" in str(e.__cause__).lower()


# Starts a box's container (a boot's or a restore's), with these limits, in a cgroup or with none
Starter = Callable[["Box", Limits, bool], Awaitable[None]]
ROOT_OVERLAY = "root"  # in a box's directory: the overlay its root is, when it mounts volumes (Node._root)


def new_runtime_id() -> str:
    # Fixed length and random: runsc ids must never be prefixes of one another.
    return "h" + secrets.token_hex(12)


class Node:
    """The boxes of this host, run by `driver`, each with its agent's client and its egress
    listener (a hutch.node.api.NodeRuntime)."""

    def __init__(self, run_dir: Path, driver: Driver, runtime: AgentRuntime, trust_dir: Path | None = None,
                 disks_dir: Path | None = None, egress: Egress | None = None, allow_unlimited: bool = False,
                 volumes: VolumeDisks | None = None) -> None:
        self.volumes = volumes  # volumes' filesystems (hutch.node.volumes); None: boxes mount none
        self.disks_dir = disks_dir  # boxes' disk images (hutch.node.disks): on the host's disk, not in run_dir
        self.trust_dir = trust_dir  # what TLS in every box trusts (hutch.egress.ca), mounted read-only
        # Every box has a cgroup of its own, which holds its memory and pid limits and its CPU cap
        # (_start_held). A host without the CPU controller runs boxes without CPU caps; one that
        # refuses runsc a cgroup at all (a container without cgroup delegation, say) runs none,
        # unless the operator allows unlimited boxes (`hutch serve --allow-unlimited-boxes`).
        self.cpu_caps = True
        self.cgroups = True  # False: boxes run with no cgroup, so without any limit (allow_unlimited only)
        self.allow_unlimited = allow_unlimited
        if allow_unlimited:
            log.warning("--allow-unlimited-boxes: if runsc cannot give boxes a cgroup on this host, they run "
                        "WITHOUT MEMORY, PID OR CPU LIMITS, and one box can take the whole host")
        self.disk_caps = True  # likewise disks: loop devices may be missing in a container
        self.boxes_dir = run_dir / "boxes"
        self.boxes_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.driver = driver
        self.runtime = runtime
        self.on_exit: Callable[[str], None] | None = None  # called with a runtime id when a box ends unstopped
        self._boxes: dict[str, Box] = {}
        self._watch_fds: dict[str, int] = {}
        self._stopping: set[str] = set()
        mounts.become_subreaper()
        self._reaper: asyncio.Task[None] | None = None
        self._reaps_on_sigchld = False
        self._reap_due: asyncio.TimerHandle | None = None
        self._sampler: asyncio.Task[None] | None = None
        self.usage_samples = metrics.Usage()
        self._background: set[asyncio.Task[None]] = set()
        self.egress = egress  # each box's way out; None: boxes have none
        self.idle: Freezer | None = None  # what freezes idle boxes (hutch.node.idle), set by the node's owner

    def reap(self) -> None:
        """Collect the exit of every adopted runsc process that has ended: a box's sandbox and
        gofer (runsc re-executes itself, so their name is "exe"). Never a driver call of ours: the
        event loop waits for those itself, and (under uvloop) would wait for ever if its exit
        status were taken here; it may not be in `driver.running` yet, so go by its name too."""
        for pid in mounts.adopted_children() - self.driver.running:
            if mounts.process_name(pid) != "exe":
                continue
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass

    def _reap_soon(self) -> None:
        """SIGCHLD: reap in REAP_DELAY, once for every exit meanwhile (a burst of boots ends
        hundreds of runsc calls a second, and each reap reads /proc for every child)."""
        if self._reap_due is None:
            self._reap_due = asyncio.get_running_loop().call_later(REAP_DELAY, self._reap_now)

    def _reap_now(self) -> None:
        self._reap_due = None
        self.reap()

    async def _reap_forever(self) -> None:
        """Where SIGCHLD cannot be handled (a loop off the main thread): look every 20 ms."""
        while True:
            await asyncio.sleep(REAP_DELAY)
            self.reap()

    def start_reaping(self) -> None:
        loop = asyncio.get_running_loop()
        if self._reaper is None and not self._reaps_on_sigchld:
            # Reap when a child ends: no timer wakes an idle server, and no task is left for a forced
            # shutdown to cancel before the pool's boxes are deleted (runsc delete waits for them)
            try:
                loop.add_signal_handler(signal.SIGCHLD, self._reap_soon)
                self._reaps_on_sigchld = True
                self.reap()  # what ended before the handler was in place
            except (RuntimeError, ValueError):  # not the main thread's loop
                self._reaper = loop.create_task(self._reap_forever())
        if self._sampler is None:
            self._sampler = asyncio.get_running_loop().create_task(self._sample_forever())
        if self.idle is not None:
            self.idle.start(self._freezable)

    async def _sample_forever(self) -> None:
        """Every few seconds, what each running box uses (its cgroup's files, read on a thread)."""
        while True:
            await asyncio.sleep(metrics.INTERVAL_SECONDS)
            boxes = [metrics.Watched(b.dir.name, rid, b.disk_dir if b.on_disk else None)
                     for rid, b in self._boxes.items() if rid not in self._stopping]
            if boxes:
                await asyncio.to_thread(self.usage_samples.sample, boxes)

    async def usage(self, runtime_id: str) -> list[UsageSample]:
        box = self._boxes.get(runtime_id)
        return self.usage_samples.of(box.dir.name) if box is not None else []

    def notify_exits(self, callback: Callable[[str], None]) -> None:
        self.on_exit = callback

    def holds(self, runtime_id: str) -> bool:
        return runtime_id in self._boxes

    def checkpoint_estimate(self, runtime_id: str) -> int | None:
        box = self._boxes.get(runtime_id)
        return None if box is None else _resident_bytes(box.dir / "sandbox.pid") + CHECKPOINT_SLACK

    def agent(self, runtime_id: str) -> BoxAgent | None:
        box = self._boxes.get(runtime_id)
        return None if box is None else box.agent

    def held(self) -> dict[str, str]:
        """Every box this node holds: its runtime id -> its key."""
        return {runtime_id: box.dir.name for runtime_id, box in self._boxes.items()}

    def _freezable(self) -> dict[str, str]:
        """The boxes the freezer may look at: not one being checkpointed or stopped (quiesced, it
        looks idle, and a frozen sentry would hang its save)."""
        return {runtime_id: key for runtime_id, key in self.held().items() if runtime_id not in self._stopping}

    def channel_socket(self, runtime_id: str) -> str | None:
        """The pinned path of a box's agent socket (a fleet's relay connects to it), if held."""
        box = self._boxes.get(runtime_id)
        return box.agent.socket if box is not None and box._agent is not None else None

    def capacity(self) -> Capacity:
        memory = _meminfo()
        return Capacity(boxes=len(self._boxes), cpus=os.cpu_count() or 1, memory_bytes=memory.get("MemTotal", 0),
                        memory_available_bytes=memory.get("MemAvailable", 0), cpu_caps=self.cpu_caps,
                        disk_caps=self.disk_caps and self.disks_dir is not None, limits=self.cgroups)

    # --- boot, restore ----------------------------------------------------------------------------

    async def boot(self, key: str, rootfs: Path, limits: Limits, writable_root: bool = False,
                   volumes: tuple[VolumeMount, ...] = ()) -> BoxRef:
        """Boot a box from a template root, with `volumes` mounted. `key` names its host directory
        for its whole life, across pauses (each run of it gets a new runtime id). With
        `writable_root` (a template build), what the box writes lands in `rootfs` itself; such a
        box is never paused."""
        mounted = await self._volume_dirs(volumes)

        async def start(box: Box, limits: Limits, cgroups: bool) -> None:
            self._prepare(box, rootfs, limits, volumes=mounted)
            await self._open_egress(box)
            overlay = "none" if writable_root else await self._make_disk(box, limits.disk_mib)
            await self.driver.run_detached(box.runtime_id, box.dir, box.dir / "runsc.err", box.dir / "sandbox.pid",
                                           overlay=overlay, cgroups=cgroups)

        return (await self._start_held(key, limits, start)).ref

    async def restore(self, key: str, rootfs: Path, limits: Limits, image_dir: Path,
                      volumes: tuple[VolumeMount, ...] = ()) -> BoxRef:
        """Bring a paused box back from its checkpoint, under a new runtime id, on the kind of
        disk it was checkpointed with (runsc restores no other): its own disk of `limits.disk_mib`,
        or its memory (so was every box paused before boxes had disks). `volumes`: the ones it
        had mounted (runsc restores a box only with the mounts it was saved with)."""
        on_disk = (image_dir / MEDIUM_FILE).exists() and (image_dir / MEDIUM_FILE).read_text() == "disk"
        mounted = await self._volume_dirs(volumes)

        async def start(box: Box, limits: Limits, cgroups: bool) -> None:
            self._prepare(box, rootfs, limits, wake=True, volumes=mounted)
            await self._open_egress(box)
            if on_disk:
                size = max(limits.disk_mib, 1024)
                await asyncio.to_thread(disks.make, self._disk_image(box), box.disk_dir,
                                        size + disks.RESTORE_SLACK_MIB)
                box.on_disk = True
            overlay = f"root:dir={box.disk_dir}" if on_disk else "root:memory"
            await self.driver.restore_detached(box.runtime_id, box.dir, image_dir, box.dir / "runsc.err",
                                               box.dir / "sandbox.pid", overlay=overlay, cgroups=cgroups)
            if on_disk:
                await asyncio.to_thread(disks.fill_to, box.disk_dir, size)

        return (await self._start_held(key, limits, start)).ref

    async def _start_held(self, key: str, limits: Limits, start: Starter) -> Box:
        """A new run of box `key`, started by `start` in a cgroup of its own, which holds it to its
        memory and pid limits (and its CPU cap). What the host refuses is found at the first box:
        a cgroup without the CPU controller, and boxes run without CPU caps (said once); no cgroup
        at all, and no box starts (LimitsUnavailable, said at each) unless the node allows
        unlimited boxes, which then run with no cgroup (said once, loudly)."""
        async def attempt(limits: Limits) -> Box:
            box = Box(new_runtime_id(), self.boxes_dir / key)  # a new id: runsc may keep a failed one's
            return await self._launch(box, start(box, limits, self.cgroups))

        uncapped = dataclasses.replace(limits, cpus=0)
        try:
            return await attempt(limits if self.cpu_caps else uncapped)
        except BoxStartError as e:
            if not (self.cgroups and _cgroup_refused(e)):
                raise
            refusal = e
        if limits.cpus and self.cpu_caps:  # perhaps only the CPU controller is missing
            try:
                box = await attempt(uncapped)
            except BoxStartError as e:
                if not _cgroup_refused(e):
                    raise
            else:
                log.warning("runsc could not give a box a CPU cap (%s): boxes run without CPU caps, still held to "
                            "their memory and pid limits", refusal)
                self.cpu_caps = False
                return box
        if not self.allow_unlimited:
            log.error("runsc could not make a box a cgroup (%s): no box can be held to its memory and pid limits, "
                      "so none starts. Give hutch a writable cgroup hierarchy (a container: --cgroupns=host and "
                      "/sys/fs/cgroup mounted read-write, or cgroup delegation), or accept boxes without any "
                      "limit with --allow-unlimited-boxes", refusal)
            raise LimitsUnavailable("this host cannot hold boxes to their memory and pid limits (runsc could not "
                                    "make a cgroup), so none starts; its operator must fix that (see the log)") from refusal
        log.critical("runsc could not make a box a cgroup (%s): with --allow-unlimited-boxes, boxes now run "
                     "WITHOUT MEMORY, PID OR CPU LIMITS", refusal)
        self.cgroups = self.cpu_caps = False
        return await attempt(uncapped)

    async def _make_disk(self, box: Box, size_mib: int) -> str:
        """The box's disk, if it has a size and the node keeps disks; the runsc overlay to use. A
        host that cannot make one (no loop devices in a container, say) runs boxes with their
        writes in memory, uncapped, and says so once."""
        if not size_mib or self.disks_dir is None or not self.disk_caps:
            return "root:memory"
        try:
            await asyncio.to_thread(disks.make, self._disk_image(box), box.disk_dir, size_mib)
        except disks.DiskError as e:
            log.warning("a box's disk could not be made (%s): boxes keep their writes in memory", e)
            self.disk_caps = False
            return "root:memory"
        box.on_disk = True
        return f"root:dir={box.disk_dir}"

    def _disk_image(self, box: Box) -> Path:
        return (self.disks_dir or box.dir) / f"{box.dir.name}.img"

    async def _forget_dir(self, box: Box) -> None:
        """The box's host directory and disk, once runsc is done with it."""
        mounts.unmount(box.channel_dir)
        mounts.unmount(box.dir / ROOT_OVERLAY)  # before the directory goes: never a walk into the template
        if box.runtime_id:
            await asyncio.to_thread(metrics.remove_cgroup, box.runtime_id)
        if self._disk_image(box).exists():
            await asyncio.to_thread(disks.remove, self._disk_image(box), box.disk_dir)
        shutil.rmtree(box.dir, ignore_errors=True)

    @staticmethod
    def _root(box: Box, rootfs: Path, volumes: list[tuple[Path, str, bool]] | None) -> Path:
        """The root the spec names: the template's own; for a box with volumes, an overlay of it with
        an upper directory of the box's own. runsc's gofer makes a bind mount's mount point in the
        root it is given, and a template's root is every box's: it is never written."""
        if not volumes:
            return rootfs
        merged = box.dir / ROOT_OVERLAY
        if not mounts.is_mount(merged):
            upper, work = box.dir / f"{ROOT_OVERLAY}-upper", box.dir / f"{ROOT_OVERLAY}-work"
            for d in (upper, work):
                d.mkdir(mode=0o700, exist_ok=True)
            top = os.stat(rootfs)  # the merged root takes the upper directory's mode and owner
            os.chown(upper, top.st_uid, top.st_gid)
            os.chmod(upper, stat.S_IMODE(top.st_mode))
            mounts.mount_overlay(merged, [rootfs], upper, work)
        return merged

    async def _volume_dirs(self, volumes: tuple[VolumeMount, ...]) -> list[tuple[Path, str, bool]]:
        """Each volume's host directory (mounted now if the node restarted), its path in the box
        and whether it is read-only: what the spec binds."""
        if not volumes:
            return []
        if self.volumes is None:
            raise BoxStartError("this node keeps no volumes")
        try:
            return [(await asyncio.to_thread(self.volumes.data, v.volume_id), v.path, v.read_only) for v in volumes]
        except (OSError, disks.DiskError) as e:
            raise BoxStartError(f"a volume could not be mounted: {e}") from e

    def _prepare(self, box: Box, rootfs: Path, limits: Limits, wake: bool = False,
                 volumes: list[tuple[Path, str, bool]] | None = None) -> None:
        """The box's host directory: its channel tmpfs and its OCI spec."""
        box.dir.mkdir(mode=0o700, exist_ok=True)
        if not mounts.is_mount(box.channel_dir):
            mounts.mount_channel_tmpfs(box.channel_dir)
        if wake:  # a restored agent sees it at once and listens again: no signal to race with
            (box.channel_dir / protocol.WAKE_FILE).touch()
        spec = box_spec(rootfs=self._root(box, rootfs, volumes), template_root=rootfs, channel_dir=box.channel_dir,
                        agent_dir=AGENT_DIR,
                        runtime=self.runtime, hostname="sandbox", limits=limits, trust_dir=self.trust_dir,
                        cgroup=box.runtime_id, volumes=volumes or ())
        (box.dir / "config.json").write_text(json.dumps(spec))

    async def _open_egress(self, box: Box) -> None:
        """The box's own listener of the egress proxy, in its channel directory: which box a
        connection comes from is known by where it arrives."""
        if self.egress is not None:
            await self.egress.listen(box.dir.name, box.channel_dir / protocol.EGRESS_SOCKET)

    async def _close_egress(self, box: Box) -> None:
        if self.egress is not None:
            await self.egress.close(box.dir.name)

    async def _launch(self, box: Box, start: Awaitable[None], wake: bool = False) -> Box:
        runtime_id = box.runtime_id
        try:
            await start
            self._watch(runtime_id, int((box.dir / "sandbox.pid").read_text()))
            await self._wait_for_agent(box, wake=wake)
            self._boxes[runtime_id] = box
            if runtime_id not in self._watch_fds:
                raise RuntimeError("the box ended as it booted")
        except BaseException as e:
            self._boxes.pop(runtime_id, None)
            self._unwatch(runtime_id)
            err = tail_of(box.dir / "runsc.err", 1000)
            await self._remove(box)
            if isinstance(e, (DriverError, OSError, TimeoutError, RuntimeError)):  # ChannelError too
                raise BoxStartError(f"{e} {err}".strip()) from e
            raise
        return box

    async def _wait_for_agent(self, box: Box, timeout: float = BOOT_TIMEOUT, wake: bool = False) -> None:
        """Wait for the agent's socket, pin it, and see the agent answer. With `wake`, the agent
        is waiting for SIGUSR1 to listen again (after a restore): send it, and again every
        0.25 s until it listens, since a signal sent as the restore completes can be lost."""
        deadline = time.monotonic() + timeout
        next_wake = 0.0
        while not box.pin_socket(self.idle.channel(box.runtime_id) if self.idle else None):
            if box.runtime_id not in self._watch_fds:
                raise RuntimeError("the box ended as it booted")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the agent did not listen within {timeout:.0f} s")
            if wake and time.monotonic() >= next_wake:
                await self.driver.kill(box.runtime_id, "USR1")
                next_wake = time.monotonic() + 0.25
            await asyncio.sleep(0.002)
        while not await box.agent.health(timeout=2.0):  # no answer, or a wrong one (something else on the socket)
            if time.monotonic() > deadline:
                raise TimeoutError("the agent's socket never answered")
            await asyncio.sleep(0.002)

    # --- pause ----------------------------------------------------------------------------------

    async def pause(self, runtime_id: str, image_dir: Path) -> None:
        """Checkpoint a box to `image_dir` (memory, processes, its written files) and free it.

        The agent first closes every socket of the host's (gVisor cannot save them); if the
        checkpoint fails, the box is told to listen again and keeps running. A disk without room
        for the image is found out first (a checkpoint that runs out of space can end the box).
        """
        box = await self._quiesce(runtime_id, image_dir)
        self._stopping.add(runtime_id)
        self._unwatch(runtime_id)
        self.usage_samples.paused(box.dir.name)
        await self._close_egress(box)  # and every connection of it: nothing of the host's may be open
        try:
            shutil.rmtree(image_dir, ignore_errors=True)
            image_dir.mkdir(parents=True, mode=0o700)
            (image_dir / MEDIUM_FILE).write_text("disk" if box.on_disk else "memory")  # what a restore must use
            await self.driver.checkpoint(runtime_id, image_dir)
        except BaseException:
            self._stopping.discard(runtime_id)
            state = await self._state(runtime_id)
            if state and state.get("status") == "running":
                self._watch(runtime_id, int(state.get("pid") or 0))
                await self._open_egress(box)
                await self._relisten(box)
            shutil.rmtree(image_dir, ignore_errors=True)
            raise
        self._boxes.pop(runtime_id, None)
        await self._forget_dir(box)  # the checkpoint holds what the box wrote to its disk
        self._in_background(self._forget(runtime_id))  # the container stopped at its checkpoint

    async def _quiesce(self, runtime_id: str, image_dir: Path) -> Box:
        """Before a checkpoint: room for its image found (else NoSpaceError, nothing done), then
        every host socket of the box's agent closed (gVisor cannot save them)."""
        box = self._boxes[runtime_id]
        needed = self.checkpoint_estimate(runtime_id) or CHECKPOINT_SLACK
        free = shutil.disk_usage(_existing(image_dir)).free
        if free < needed:
            raise NoSpaceError(f"{free // 2**20} MiB free where the checkpoint needs about {needed // 2**20} MiB")
        await box.agent.quiesce()
        await box.release()
        deadline = time.monotonic() + 10
        while os.path.lexists(box.socket):
            if time.monotonic() > deadline:
                await self._relisten(box)
                raise TimeoutError("the agent did not let go of its socket")
            await asyncio.sleep(0.002)
        return box

    async def snapshot(self, runtime_id: str, image_dir: Path) -> None:
        """Checkpoint a box to `image_dir` and let it run on from there (`--leave-running`): it is
        stopped only while it is saved. Its agent is quiesced and its egress closed for that
        time, as for a pause, and listens again after, whether the checkpoint worked or not."""
        box = await self._quiesce(runtime_id, image_dir)
        try:
            self._stopping.add(runtime_id)  # runsc may run it on under another pid: no exit is reported meanwhile
            await self._close_egress(box)
            shutil.rmtree(image_dir, ignore_errors=True)
            image_dir.mkdir(parents=True, mode=0o700)
            (image_dir / MEDIUM_FILE).write_text("disk" if box.on_disk else "memory")
            await self.driver.checkpoint(runtime_id, image_dir, leave_running=True,
                                         overlay=f"root:dir={box.disk_dir}" if box.on_disk else "root:memory",
                                         cgroups=self.cgroups)
        except BaseException:
            shutil.rmtree(image_dir, ignore_errors=True)
            raise
        finally:
            await self._run_on(runtime_id, box)

    async def _run_on(self, runtime_id: str, box: Box) -> None:
        """After a `--leave-running` checkpoint (whether it worked or not): the box watched under
        its pid (runsc may have made it a new one), its egress and its agent back. A box that did
        not run on, or whose agent does not listen again, is stopped, and that is raised: never a
        box held with no agent and no watch."""
        state: dict[str, Any] | None = None
        known = False
        for _ in range(3):  # a loaded host's `runsc state` may time out: that says nothing of the box
            try:
                state, known = await self.driver.state(runtime_id), True
                break
            except DriverError as e:
                log.warning("state %s after its snapshot: %s", runtime_id, e)
                await asyncio.sleep(0.5)
        try:
            if known:
                pid = int(state.get("pid") or 0) if state and state.get("status") == "running" else 0
            else:  # its first pid's watch still open: that process still runs
                pid = int((box.dir / "sandbox.pid").read_text() or 0) if runtime_id in self._watch_fds else 0
            if not pid:
                raise RuntimeError("the box did not run on after its checkpoint")
            if pid != int((box.dir / "sandbox.pid").read_text() or 0):
                self._unwatch(runtime_id)
                (box.dir / "sandbox.pid").write_text(str(pid))
            if runtime_id not in self._watch_fds:
                self._watch(runtime_id, pid)
            await self._open_egress(box)
            await self._relisten(box)
        except BaseException:
            self._stopping.discard(runtime_id)
            await asyncio.shield(self.stop(runtime_id, box.dir.name))
            raise
        self._stopping.discard(runtime_id)

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` without waiting for it, kept until done (and awaited by close())."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def stop_later(self, runtime_id: str, key: str) -> None:
        """stop(), without waiting for it: for callers that must not block on the driver."""
        self._in_background(self.stop(runtime_id, key))

    async def _forget(self, runtime_id: str) -> None:
        try:
            await self.driver.delete(runtime_id)
        except DriverError as e:
            log.warning("delete %s after its checkpoint: %s", runtime_id, e)
        finally:
            self._stopping.discard(runtime_id)

    async def _relisten(self, box: Box) -> None:
        await self._wait_for_agent(box, wake=True)

    async def wake(self, runtime_id: str) -> None:
        await self.driver.kill(runtime_id, "USR1")

    # --- watch ----------------------------------------------------------------------------------

    def _watch(self, runtime_id: str, pid: int) -> None:
        """Learn at once when a box's sandbox process ends (memory limit, crash, host kill)."""
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # already gone
            self._exited(runtime_id)
            return
        self._watch_fds[runtime_id] = fd
        asyncio.get_running_loop().add_reader(fd, self._exited, runtime_id)

    def _exited(self, runtime_id: str) -> None:
        self._unwatch(runtime_id)
        if runtime_id in self._stopping or runtime_id not in self._boxes:
            return
        log.warning("box %s ended on its own", runtime_id)
        if self.on_exit:
            self.on_exit(runtime_id)

    def _unwatch(self, runtime_id: str) -> None:
        fd = self._watch_fds.pop(runtime_id, None)
        if fd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)

    def is_running(self, runtime_id: str) -> bool:
        """Whether the node holds this box and has not seen its sandbox process end."""
        return runtime_id in self._boxes and runtime_id in self._watch_fds

    async def _state(self, runtime_id: str) -> dict[str, Any] | None:
        """The driver's state of a box, or None when it does not know it or cannot say."""
        try:
            return await self.driver.state(runtime_id)
        except DriverError as e:
            log.warning("state %s: %s", runtime_id, e)
            return None

    async def is_alive(self, runtime_id: str) -> bool:
        try:
            state = await self.driver.state(runtime_id)
        except DriverError:
            return True
        return state is not None and state.get("status") == "running"

    # --- stop -----------------------------------------------------------------------------------

    async def stop(self, runtime_id: str, key: str | None = None) -> None:
        """Destroy a box and everything the host held for it. Idempotent."""
        self._stopping.add(runtime_id)
        try:
            self._unwatch(runtime_id)
            box = self._boxes.pop(runtime_id, None)
            box = box or Box(runtime_id, self.boxes_dir / (key or runtime_id))
            self.usage_samples.forget(box.dir.name)
            await self._remove(box)
        finally:
            self._stopping.discard(runtime_id)

    async def _remove(self, box: Box) -> None:
        await box.release()
        await self._close_egress(box)
        try:
            await self.driver.delete(box.runtime_id)
        except DriverError as e:  # e.g. a timeout on a starved host: the box is still to go, later
            log.warning("delete %s: %s; trying again in the background", box.runtime_id, e)
            self._in_background(self._remove_later(box))
            return
        await self._forget_dir(box)

    async def _remove_later(self, box: Box, tries: int = 5) -> None:
        for attempt in range(tries):
            await asyncio.sleep(2.0 * (attempt + 1))
            try:
                await self.driver.delete(box.runtime_id)
            except DriverError as e:
                log.warning("delete %s, try %d: %s", box.runtime_id, attempt + 2, e)
                continue
            await self._forget_dir(box)
            return
        log.error("box %s could not be deleted; the next start removes it", box.runtime_id)

    # --- restart --------------------------------------------------------------------------------

    async def adopt(self, running: dict[str, str]) -> set[str]:
        """After a restart: take back the boxes still running (runtime id -> key), and remove
        every other container and box directory. Returns the runtime ids found alive."""
        async def take(runtime_id: str, key: str) -> bool:
            box = Box(runtime_id, self.boxes_dir / key)
            box.on_disk = mounts.is_mount(box.disk_dir)
            state = await self._state(runtime_id)  # thawed first (Thawing): a killed server may have left it frozen
            ok = state is not None and state.get("status") == "running"
            if ok and state:
                self._watch(runtime_id, int(state.get("pid") or 0))
                try:
                    await self._wait_for_agent(box, timeout=5.0)  # it may be listening again just now
                except (TimeoutError, RuntimeError):
                    ok = False
            if ok:
                self._boxes[runtime_id] = box
                await self._open_egress(box)  # the last server's listener went with it
            else:
                self._unwatch(runtime_id)
                await self._remove(box)
            return ok

        # all at once: a box that never answers must not hold up the others, or the start
        taken = await asyncio.gather(*(take(r, k) for r, k in running.items()))
        alive = {r for r, ok in zip(running, taken, strict=True) if ok}
        try:
            strays = set(await self.driver.list_ids()) - alive
        except DriverError:
            strays = set()
        for runtime_id in strays:
            await self.stop(runtime_id)
        kept = {running[r] for r in alive}
        for d in self.boxes_dir.iterdir():
            if d.name not in kept:
                await self._forget_dir(Box("", d))
        for image in self.disks_dir.glob("*.img") if self.disks_dir and self.disks_dir.exists() else ():
            if image.stem not in kept:
                await asyncio.to_thread(disks.remove, image, self.boxes_dir / image.stem / "disk")
        return alive

    async def close(self) -> None:
        """Let go of the boxes without stopping them: they outlive the server (thawed)."""
        if self.idle is not None:
            await self.idle.close()
        for task in (self._reaper, self._sampler):
            if task is not None:
                task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if self._reaps_on_sigchld:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGCHLD)
            self._reaps_on_sigchld = False
            if self._reap_due is not None:
                self._reap_due.cancel()
                self._reap_now()
        for runtime_id in list(self._boxes):
            self._unwatch(runtime_id)
            await self._boxes.pop(runtime_id).release()
