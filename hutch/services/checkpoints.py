"""A box's checkpoints on disk: where a paused box's image lives, how much disk one takes, and the
budgets a pause is held to (a team's paused boxes and bytes, the server's bytes).

A pause, a snapshot and the start's reconcile all measure and mark images the same way, so the
rules live here once.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from hutch.node import boxfiles
from hutch.node.api import CHECKPOINT_SLACK, NodeRuntime
from hutch.services.config import ServerConfig
from hutch.store import CheckpointBudgets, PauseRefused, SandboxRecord, Store

CHECKPOINT_DONE = "hutch-checkpoint-complete"  # written into an image directory once it is whole
DISK_RESERVE = 64 * 2**20  # below this much free space in the data dir, a failed pause is called a full disk
CHECKPOINT_SHARE = 0.8  # of the checkpoints' filesystem, their default budget (the rest: the store, roots, disks)
BUDGET_NAMES = {"team_paused": "team_max_paused", "team_bytes": "team_max_paused_bytes",
                "all_bytes": "checkpoint_budget_bytes"}  # a refusal's budget, by its setting's name


def checkpoint_size(image: Path) -> int:
    """The disk a checkpoint's directory takes: its regular files' allocated blocks, links never
    followed (0 if it is gone)."""
    total = 0
    for top, dirs, files in os.walk(image, followlinks=False):
        for name in (*files, *dirs):
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_blocks * 512
    return total


def link_image(source: Path, target: Path) -> None:
    """A second directory of a finished checkpoint: its files hard-linked (neither is ever written
    again; a copy where the two are on different filesystems), links in it never followed."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True, mode=0o700)
    for entry in os.scandir(source):
        if not entry.is_file(follow_symlinks=False):  # an image is files only: anything else is not whole
            raise OSError(f"{entry.path} is not a regular file: the image cannot be linked")
        try:
            os.link(entry.path, target / entry.name, follow_symlinks=False)
        except OSError:
            shutil.copy2(entry.path, target / entry.name, follow_symlinks=False)


def checkpoint_bound(rec: SandboxRecord) -> int:
    """The most a box's checkpoint can take: its memory and its own disk, if it has one (its
    writes go into the checkpoint), and the node's slack. What a pause holds against the budgets
    where the node's estimate cannot be had (a fleet's API server sees no node's /proc)."""
    return (rec.memory_mib + (rec.disk_mib or 0)) * 2**20 + CHECKPOINT_SLACK


def own_bytes(rec: SandboxRecord) -> int:
    """The most a box can store of its own: its disk or its memory, whichever is larger (a box
    whose disk could not be made, or that came back from before disks, writes into memory)."""
    return max(rec.disk_mib or 0, rec.memory_mib) * 2**20


def mount_paths(rec: SandboxRecord) -> tuple[str, ...]:
    """Where the box mounts volumes: a files-only save or restore leaves those paths alone."""
    return tuple(m["path"] for m in rec.volumes or ())


class Checkpoints:
    """The server's checkpoints of paused boxes: their images and the budgets they are held to."""

    def __init__(self, config: ServerConfig, store: Store, node: NodeRuntime) -> None:
        self.config, self.store, self.node = config, store, node

    def image_dir(self, sandbox_id: str) -> Path:
        return self.config.checkpoint_dir / sandbox_id

    def files_only(self, rec: SandboxRecord) -> bool:
        """Whether a paused box kept its files only (its resume boots it afresh)."""
        return (self.image_dir(rec.id) / boxfiles.MARKER).exists()

    def disk_full(self, e: BaseException) -> bool:
        """Whether a failed checkpoint is best told as a full disk."""
        try:
            free = shutil.disk_usage(self.config.data_dir).free
        except OSError:
            free = 0
        return "no space left" in str(e).lower() or free < DISK_RESERVE

    def budgets(self) -> CheckpointBudgets:
        """The budgets a pause is held to now; the defaults follow the checkpoints' filesystem."""
        every = self.config.checkpoint_budget_bytes
        if every is None:
            where = self.config.checkpoint_dir
            every = int(shutil.disk_usage(next(p for p in (where, *where.parents) if p.exists())).total
                        * CHECKPOINT_SHARE)
        team = self.config.team_max_paused_bytes
        return CheckpointBudgets(team_paused=self.config.team_max_paused,
                                 team_bytes=every // 2 if team is None else team, all_bytes=every)

    def reserve(self, rec: SandboxRecord) -> int:
        """What a pause holds against the budgets until its checkpoint's real size is known: the
        node's own estimate (which its free-disk check uses too), else the box's bound."""
        estimate = self.node.checkpoint_estimate(rec.runtime_id) if rec.runtime_id else None
        return checkpoint_bound(rec) if estimate is None else estimate

    def begin_pause(self, rec: SandboxRecord) -> PauseRefused | None:
        """Off the event loop: a statfs (of a fleet's shared mount, maybe) and one transaction."""
        return self.store.begin_pause(rec.id, self.reserve(rec), self.budgets())

    def refusal(self, rec: SandboxRecord, refused: PauseRefused) -> str:
        """Why a budget refused a box's pause, naming the setting that would make room."""
        setting = BUDGET_NAMES[refused.budget]
        if refused.budget == "team_paused":
            return f"its team has {refused.held} paused sandboxes, the most it may have ({setting}={refused.limit})"
        whose = "its team's" if refused.budget == "team_bytes" else "the server's"
        return (f"{whose} checkpoints take {refused.held / 2**20:.0f} MiB of {refused.limit / 2**20:.0f} MiB "
                f"({setting}), and this one may take about {self.reserve(rec) / 2**20:.0f} MiB")
