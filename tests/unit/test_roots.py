"""hutch.node.roots: paths in a root looked at without following links, and scrub, on real files."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from hutch.node import base_image, roots


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A root beside a host directory: file, dir/, and links into the host from both levels."""
    host = tmp_path / "host"
    (host / "bin").mkdir(parents=True)
    (host / "bin/python3").write_text("the host's\n")
    r = tmp_path / "root"
    (r / "etc").mkdir(parents=True)
    (r / "etc/file").write_text("the root's\n")
    (r / "etc/link").symlink_to(host / "bin/python3")
    (r / "up").symlink_to(host)
    return r


def test_a_link_in_a_root_is_never_followed(root: Path) -> None:
    assert roots.is_file_in(root, "etc/file") and roots.is_file_in(root, "/etc/file")
    assert not roots.is_file_in(root, "etc/link")  # the last component is a link to a host file
    assert not roots.is_file_in(root, "up/bin/python3")  # a directory on the way is a link
    assert not roots.is_file_in(root, "etc/../etc/file") and not roots.is_file_in(root, "")
    st = roots.lstat_in(root, "etc/link")
    assert st is not None and stat.S_ISLNK(st.st_mode)
    assert roots.lstat_in(root, "up/bin") is None and roots.lstat_in(root, "etc/none") is None


def test_the_base_root_counts_as_built_only_by_what_is_in_it(tmp_path: Path) -> None:
    base = base_image.base_root_path(tmp_path)
    base.mkdir(parents=True)
    (base / "usr").mkdir()
    (base / "usr/bin").symlink_to("/usr/bin")  # the host's python3 is not the root's
    assert not base_image.is_built(tmp_path)
    (base / "usr/bin").unlink()
    (base / "usr/bin").mkdir()
    (base / "usr/bin/python3").symlink_to("python3.11")  # as Debian has it, dangling here
    assert base_image.is_built(tmp_path)


def test_scrub_takes_out_sockets_fifos_and_devices_and_follows_nothing(root: Path, tmp_path: Path) -> None:
    (tmp_path / "host/pipe").parent.mkdir(exist_ok=True)
    os.mkfifo(tmp_path / "host/pipe")  # reached only through the root's link "up": it stays
    deep = root / "a/b/c"
    deep.mkdir(parents=True)
    os.mkfifo(deep / "pipe")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(root / "a/app.sock"))
    if os.geteuid() == 0:
        os.mknod(root / "a/null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        os.mknod(root / "a/disk", stat.S_IFBLK | 0o600, os.makedev(7, 0))
        os.mknod(root / "a/whiteout", stat.S_IFCHR, 0)
    dropped = roots.scrub(root, keep_whiteouts=True)

    kinds = {"FIFO /a/b/c/pipe", "socket /a/app.sock"}
    if os.geteuid() == 0:
        kinds |= {"character device /a/null", "block device /a/disk"}
        assert stat.S_ISCHR(os.lstat(root / "a/whiteout").st_mode)  # a layer's whiteout stays
    assert set(dropped.shown) == kinds and dropped.count == len(kinds)
    assert dropped.lines("the layer")[0].startswith(f"dropped {len(kinds)} ")
    assert sorted(os.listdir(root / "a")) == ["b"] + (["whiteout"] if os.geteuid() == 0 else [])
    assert stat.S_ISFIFO(os.lstat(tmp_path / "host/pipe").st_mode)
    assert (root / "etc/file").read_text() == "the root's\n" and os.path.islink(root / "up")
    if os.geteuid() == 0:
        assert roots.scrub(root).shown == ["character device /a/whiteout"]  # a root keeps none
    assert roots.scrub(root) == roots.Dropped()


def test_scrub_refuses_a_root_it_cannot_finish(root: Path) -> None:
    for i in range(5):
        os.mkfifo(root / f"pipe{i}")
    with pytest.raises(roots.RootError, match="more than 3"):
        roots.scrub(root, limit=3)
    with pytest.raises(roots.RootError, match="longer than"):
        roots.scrub(root, timeout=0)
    with pytest.raises(roots.RootError, match="failed"):
        roots.scrub(root / "none")
