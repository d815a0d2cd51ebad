"""What a box runs from on the host, and its removal: its directory (the OCI bundle runsc is given:
the channel tmpfs, the spec, the root of a box with volumes), its own disk, its volumes' directories.
Everything here is made before the driver starts the box and removed once the driver is done."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import stat
from pathlib import Path

from hutch.guest import protocol
from hutch.node import disks, metrics, mounts
from hutch.node.api import BoxStartError, VolumeMount
from hutch.node.nodebox import ROOT_OVERLAY, Box, write_agent_sum
from hutch.node.spec import AgentRuntime, Limits, box_spec
from hutch.node.volumes import VolumeDisks

log = logging.getLogger("hutch.node")

AGENT_DIR = Path(protocol.__file__).parent

# A volume as the spec binds it: its host directory, its path in the box, whether it is read-only
Bound = tuple[Path, str, bool]


class Bundles:
    """The host directories (under `boxes_dir`, one per box key) and disks of the node's boxes."""

    def __init__(self, boxes_dir: Path, runtime: AgentRuntime, trust_dir: Path | None = None,
                 disks_dir: Path | None = None, volumes: VolumeDisks | None = None) -> None:
        self.boxes_dir = boxes_dir
        self.boxes_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.runtime = runtime
        self.trust_dir = trust_dir  # what TLS in every box trusts (hutch.egress.ca), mounted read-only
        self.disks_dir = disks_dir  # boxes' disk images (hutch.node.disks): on the host's disk, not in run_dir
        self.volumes = volumes  # volumes' filesystems (hutch.node.volumes); None: boxes mount none
        self.disk_caps = True  # False once a disk could not be made (no loop devices in a container, say)

    @property
    def gives_disks(self) -> bool:
        """Whether boxes get disks of their own."""
        return self.disk_caps and self.disks_dir is not None

    def box(self, runtime_id: str, key: str) -> Box:
        """A run of box `key`, in its directory."""
        return Box(runtime_id, self.boxes_dir / key)

    async def volume_dirs(self, volumes: tuple[VolumeMount, ...]) -> list[Bound]:
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

    def prepare(self, box: Box, rootfs: Path, limits: Limits, wake: bool = False,
                volumes: list[Bound] | None = None, agent_sum: str | None = None) -> None:
        """The box's host directory: its channel tmpfs and its OCI spec. `agent_sum`: the compiled
        agent a checkpoint being restored ran (its memory maps that file), if this host keeps it."""
        box.dir.mkdir(mode=0o700, exist_ok=True)
        if not mounts.is_mount(box.channel_dir):
            mounts.mount_channel_tmpfs(box.channel_dir)
        if wake:  # a restored agent sees it at once and listens again: no signal to race with
            (box.channel_dir / protocol.WAKE_FILE).touch()
        bin_sum, bin_dir = self.runtime.pinned(agent_sum)
        spec = box_spec(rootfs=self._root(box, rootfs, volumes), template_root=rootfs, channel_dir=box.channel_dir,
                        agent_dir=AGENT_DIR,
                        runtime=self.runtime, hostname="sandbox", limits=limits, trust_dir=self.trust_dir,
                        cgroup=box.runtime_id, volumes=volumes or (), bin_dir=bin_dir)
        write_agent_sum(box.dir, bin_sum)  # a checkpoint of this run says so
        (box.dir / "config.json").write_text(json.dumps(spec))

    @staticmethod
    def _root(box: Box, rootfs: Path, volumes: list[Bound] | None) -> Path:
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

    async def make_disk(self, box: Box, size_mib: int) -> str:
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

    async def make_restore_disk(self, box: Box, size_mib: int) -> None:
        """A disk for a box restored from a checkpoint made on its disk: `size_mib` and the slack
        a restore needs (hutch.node.disks.fill_to takes that back once it runs)."""
        await asyncio.to_thread(disks.make, self._disk_image(box), box.disk_dir, size_mib + disks.RESTORE_SLACK_MIB)
        box.on_disk = True

    def _disk_image(self, box: Box) -> Path:
        return (self.disks_dir or box.dir) / f"{box.dir.name}.img"

    async def forget(self, box: Box) -> None:
        """The box's host directory and disk, once runsc is done with it."""
        mounts.unmount(box.channel_dir)
        mounts.unmount(box.dir / ROOT_OVERLAY)  # before the directory goes: never a walk into the template
        if box.runtime_id:
            await asyncio.to_thread(metrics.remove_cgroup, box.runtime_id)
        if self._disk_image(box).exists():
            await asyncio.to_thread(disks.remove, self._disk_image(box), box.disk_dir)
        shutil.rmtree(box.dir, ignore_errors=True)

    async def sweep(self, kept: set[str]) -> None:
        """After a restart: every box directory and disk image but those of the keys `kept`."""
        for d in self.boxes_dir.iterdir():
            if d.name not in kept:
                await self.forget(Box("", d))
        for image in self.disks_dir.glob("*.img") if self.disks_dir and self.disks_dir.exists() else ():
            if image.stem not in kept:
                await asyncio.to_thread(disks.remove, image, self.boxes_dir / image.stem / "disk")
