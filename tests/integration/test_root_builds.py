"""A root build cut short leaves the host's filesystems mounted in its partial root (mmdebstrap
binds /proc, /sys, /dev/pts and /dev/shm there while it runs): the next build's clean-up detaches
them before it removes the directory, and deletes nothing through them."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hutch.node import base_image


def test_a_partial_roots_leftover_mounts_are_detached_not_deleted_through(tmp_path: Path) -> None:
    host_dir = tmp_path / "the-hosts-dev-shm"
    host_dir.mkdir()
    (host_dir / "a-host-file").write_text("the host's")
    work = tmp_path / "base-bookworm-x.partial"
    inside = work / "rootfs" / "dev" / "shm"
    inside.mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(host_dir), str(inside)], check=True)
    try:
        assert (inside / "a-host-file").exists()
        base_image.discard_partial(work)
    finally:
        subprocess.run(["umount", "-l", str(inside)], stderr=subprocess.DEVNULL)
    assert not work.exists()
    assert (host_dir / "a-host-file").read_text() == "the host's"
