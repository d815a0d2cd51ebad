"""The template roots' collector: a root goes once nothing may boot or build from it again.

A single host's roots are its own: the store and this process say what is in use. A fleet's are
shared by every node, collected by the nodes (never the API servers) while other hosts build and
boot from them, so a root goes only once it has been seen unused for a grace, and its removal is
checked against the store again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from hutch.services.build_sources import BuildSources
from hutch.services.config import ServerConfig
from hutch.store import Store
from hutch.templates.builds import Builder

log = logging.getLogger("hutch.server")

# A shared root nothing refers to is removed only once it has been so this long: longer than a
# create on any API server takes from reading a template's root to storing its sandbox (room,
# boot, up to an hour of readiness probe), which no other process can see meanwhile.
UNUSED_GRACE = 2 * 3600.0
UNUSED_MARK = ".unused"  # <root dir>.unused beside a shared root: since when nothing refers to it
TRASH = ".trash-"  # <root dir>.trash-<time>-<n>: a root being removed (moved first, looked at again)
TRASH_AGE = 600.0  # a collector's trash left this long is its own no more (it died midway)


class RootCollector:
    def __init__(self, config: ServerConfig, store: Store, builder: Builder, sources: BuildSources) -> None:
        self.config, self.store, self.builder, self.sources = config, store, builder, sources
        self.booting_roots: Callable[[], set[str]] = set  # roots of sandboxes being created (Sandboxes)
        if config.fleet is not None:
            builder.on_root = self.root_chosen

    async def collect(self, owner: str | None) -> None:
        """Remove the roots nothing may boot from again: not a template's current root, not the
        root of a sandbox that may run again or is booting, not one a build makes or reads. A
        fleet's roots are collected by its nodes (`collect_shared`), not its API servers."""
        if self.config.fleet is not None:
            if owner is not None:
                keep = self.sources.reading() | self.booting_roots()
                await asyncio.to_thread(self.collect_shared, keep, set(self.builder.claimed.values()))
            return
        keep = self.store.roots_in_use() | self.sources.reading() | self.booting_roots()
        claimed = set(self.builder.claimed.values())
        roots = self.builder.roots_dir
        for d in roots.iterdir() if roots.exists() else ():
            name = d.name.split(".partial-")[0]
            if name not in claimed and str(d / "rootfs") not in keep:
                await asyncio.to_thread(shutil.rmtree, d, True)

    def shared_in_use(self) -> tuple[set[str], set[str]]:
        """The builds queued or running in the fleet, and the names of the root directories
        something in the store refers to (by name: a host may reach the shared directory by
        another path; a name of another directory's only keeps more)."""
        builds, build_roots = self.store.builds_in_flight()
        return builds, _root_names(self.store.roots_in_use() | build_roots)

    def collect_shared(self, keep: set[str], claimed: set[str]) -> None:
        """A fleet's shared roots, collected from any node, while other hosts build and boot from
        them. The store says which roots are referred to (templates, sandboxes that may run again,
        builds queued or running: what they make and what they build on); a create on an API
        server refers to a root the store does not show until its sandbox is stored, so a root is
        removed only once it has been seen unreferred to for UNUSED_GRACE (a mark beside it says
        since when; a build that takes the root again removes the mark). The removal moves the
        root aside and reads the store again: a build that took it meanwhile gets it back, or
        (it found it gone) makes it anew. A partial root goes once its build is not queued or running."""
        roots = self.builder.roots_dir
        if not roots.is_dir():
            return
        builds, in_use = self.shared_in_use()
        in_use |= _root_names(keep)
        now = time.time()
        for d in list(roots.iterdir()):
            name = d.name
            if TRASH in name:
                _, _, stamp = name.partition(TRASH)
                at = stamp.split("-", 1)[0]
                if not at.isdigit() or now - int(at) >= TRASH_AGE:
                    shutil.rmtree(d, ignore_errors=True)
            elif name.endswith(UNUSED_MARK):
                if not (roots / name.removesuffix(UNUSED_MARK)).exists():
                    d.unlink(missing_ok=True)
            elif ".partial-" in name:
                key, _, build_id = name.partition(".partial-")
                if build_id not in builds and key not in claimed:
                    shutil.rmtree(d, ignore_errors=True)
            elif name in claimed or name in in_use:
                _mark(d).unlink(missing_ok=True)
            else:
                since = _unused_since(d)
                if since is None:
                    _mark(d).write_text(f"{now}\n")
                elif now - since >= UNUSED_GRACE:
                    self._remove_shared(d)

    def _remove_shared(self, d: Path) -> None:
        trash = d.with_name(f"{d.name}{TRASH}{int(time.time())}-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(d, trash)
        except FileNotFoundError:
            return  # another node's collector was first
        if d.name in self.shared_in_use()[1]:  # a build took it again meanwhile
            try:
                os.rename(trash, d)
            except OSError:  # it found it gone and made it anew
                shutil.rmtree(trash, ignore_errors=True)
            return
        log.info("removing the shared template root %s: nothing has referred to it for %.0f s", d.name, UNUSED_GRACE)
        shutil.rmtree(trash, ignore_errors=True)
        _mark(d).unlink(missing_ok=True)

    def root_chosen(self, build_id: str, rootfs: Path) -> None:
        """A fleet build is about to make or reuse a shared root: the store says so first (every
        collector keeps it from then on), and a mark of it being unused goes."""
        self.store.update_build(build_id, rootfs=str(rootfs))
        _mark(rootfs.parent).unlink(missing_ok=True)



def _root_names(rootfs: set[str]) -> set[str]:
    """The directories (by name) that hold these roots (each `<dir>/rootfs`)."""
    return {Path(r).parent.name for r in rootfs}


def _mark(root: Path) -> Path:
    return root.with_name(root.name + UNUSED_MARK)


def _unused_since(root: Path) -> float | None:
    """When a collector first saw the shared root unreferred to (its mark), if one did."""
    try:
        return float(_mark(root).read_text(errors="replace")[:64])
    except (FileNotFoundError, ValueError):
        return None
