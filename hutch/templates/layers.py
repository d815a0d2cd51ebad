"""The layer cache of template builds.

A run step's layer is the upper directory of a host overlay mount whose lower directories are the
parent root and the layers of the steps before it: what the step wrote, deleted files as overlayfs
whiteouts. A layer is keyed by everything that made it (the parent, the env, workdir and user in
force, the command), so a step identical to one built before on the same parent is not run again.
A finished template root is the stack flattened into one plain directory.

A step writes its layer onto a disk of the template's `disk_mib` (hutch.node.disks), so a build
cannot fill the host's disk; the finished layer is copied into the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hutch.node import disks, mounts


def chain_key(parent_key: str, state: dict[str, Any], command: str) -> str:
    """The key of a run step's layer: its parent's key, what was in force, and the command."""
    text = json.dumps([parent_key, state, command], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def stack_key(top_key: str, layers: list[Path]) -> str:
    """The name of a flattened stack: its top key and which copy of each layer it holds (a
    no-cache build replaces layers, and its root must not be taken for the old one's)."""
    text = json.dumps([top_key, [os.stat(layer).st_ino for layer in layers]])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


@dataclass
class PendingLayer:
    """A layer being built: the overlay's upper and work directories, on a disk of its own."""

    key: str
    dir: Path  # the disk's mount point

    @property
    def image(self) -> Path:
        return self.dir.with_name(self.dir.name + ".img")

    @property
    def upper(self) -> Path:
        return self.dir / "upper"

    @property
    def work(self) -> Path:
        return self.dir / "work"


class LayerCache:
    def __init__(self, root: Path, owner: str) -> None:
        self.root = root
        self.owner = owner  # which server's builds: several data dirs share one cache
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()

    def path(self, key: str) -> Path:
        return self.root / key

    def has(self, key: str) -> bool:
        return self.path(key).is_dir()

    def begin(self, key: str, build_id: str, disk_mib: int) -> PendingLayer:
        pending = PendingLayer(key, self.root / f"{key}.partial-{self.owner}-{build_id}")
        disks.make(pending.image, pending.dir, disk_mib, layer=True)
        pending.upper.mkdir(mode=0o755)
        pending.work.mkdir(mode=0o700)
        return pending

    def commit(self, pending: PendingLayer, replace: bool = False) -> Path:
        """Copy the layer into the cache under its key. A concurrent build of the same step may
        have kept one first: then that one stays (they are the same), unless `replace` (a
        no-cache build: its fresh layer is the cache's from now on)."""
        final = self.path(pending.key)
        copy = self.root / f"{pending.dir.name}.copy"
        old = self.root / f"{pending.dir.name}.old"
        try:
            shutil.rmtree(copy, ignore_errors=True)
            _copy(pending.upper, copy)  # whiteouts and opaque directories (xattrs) as they are
            with self._lock:
                if replace and final.exists():
                    os.rename(final, old)
                if not final.exists():
                    os.rename(copy, final)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(copy, ignore_errors=True)
            self.discard(pending)
        return final

    def discard(self, pending: PendingLayer) -> None:
        disks.remove(pending.image, pending.dir)
        shutil.rmtree(pending.dir, ignore_errors=True)

    def clear_partials(self) -> None:
        """At start: what this server's builds that were running left behind."""
        for d in self.root.glob(f"*.partial-{self.owner}-*"):
            if d.suffix == ".img":
                disks.remove(d, d.with_suffix(""))
            shutil.rmtree(d, ignore_errors=True)
        for d in [*self.root.glob(f"*.partial-{self.owner}-*.copy"), *self.root.glob(f"*.partial-{self.owner}-*.old")]:
            shutil.rmtree(d, ignore_errors=True)


def flatten(lowers: list[Path], dest: Path, mountpoint: Path) -> None:
    """Copy the merged view of `lowers` (topmost first) into the new directory `dest`, with
    owners, modes, links, device nodes and extended attributes as they are."""
    if len(lowers) == 1:  # no overlay needed (and overlayfs wants two lowers without an upper)
        _copy(lowers[0], dest)
        return
    mounts.mount_overlay(mountpoint, lowers)
    try:
        _copy(mountpoint, dest)
    finally:
        mounts.unmount(mountpoint)


def _copy(src: Path, dest: Path) -> None:
    dest.mkdir(parents=True, mode=0o755)
    shutil.copystat(src, dest)
    proc = subprocess.run(["cp", "-a", "--reflink=auto", "--", f"{src}/.", str(dest)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=1800)
    if proc.returncode != 0:
        raise OSError(f"copying the template root failed: {proc.stderr.strip()[-500:]}")
