"""The agent's filesystem calls that need no box: a watch on a real directory (inotify) sees a
write made the agent's way (a temp file renamed over the target) as the file's own, E2B's
metadata xattrs, and a link's end."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from hutch.guest import fsops


def _agent_write(path: Path, data: bytes, meta: dict[str, str] | None = None) -> None:
    """What the agent's file write does: a temp file beside the target, renamed over it."""
    tmp = path.parent / fsops.temp_name(path.name, path.exists())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with open(fd, "wb") as f:
        f.write(data)
        os.fchmod(fd, 0o644)
        fsops.write_metadata(fd, meta or {})
    os.replace(tmp, path)


def _events(watch: fsops.Watch, enough: int) -> list[tuple[str, str]]:
    got: list[tuple[str, str]] = []
    for _ in range(50):  # each read waits for the kernel's next events, at most 0.1 s
        got += watch.read(0.1)
        if len(got) >= enough:
            break
    return got


def test_a_write_is_seen_as_the_files_own_never_its_temp_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    watch = fsops.Watch(str(tmp_path), recursive=True)
    try:
        _agent_write(tmp_path / "new.txt", b"one")
        assert _events(watch, 3) == [("new.txt", "create"), ("new.txt", "chmod"), ("new.txt", "write")]
        _agent_write(tmp_path / "new.txt", b"two")
        _agent_write(tmp_path / "sub" / "x.txt", b"x")
        assert _events(watch, 5) == [("new.txt", "chmod"), ("new.txt", "write"), ("sub/x.txt", "create"),
                                     ("sub/x.txt", "chmod"), ("sub/x.txt", "write")]
        # a name of that shape from anyone else (another pid) is the box's own file, and shows
        (tmp_path / ".a.txt.hutch-1-2-c").write_bytes(b"")
        assert (".a.txt.hutch-1-2-c", "create") in _events(watch, 1)
        entry = watch.entry("sub/x.txt")
        assert entry is not None and (entry["path"], entry["size"]) == (f"{tmp_path}/sub/x.txt", 1)
        assert watch.entry("sub/gone.txt") is None
    finally:
        watch.close()


def test_metadata_is_written_on_the_new_file_and_read_back(tmp_path: Path) -> None:
    target = tmp_path / "m.txt"
    try:
        _agent_write(target, b"x", {"author": "mish"})
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            pytest.skip("this filesystem keeps no user xattrs")
        raise
    assert fsops.read_metadata(str(target)) == {"author": "mish"}
    assert fsops.stat_path(str(target), trust_all=True)["metadata"] == {"author": "mish"}
    os.setxattr(target, "user.other", b"not ours")
    os.setxattr(target, "user.e2b.bin", b"\xff")  # not UTF-8: left out, as envd does
    assert fsops.read_metadata(str(target)) == {"author": "mish"}
    _agent_write(target, b"y")  # an overwrite without metadata leaves none
    assert fsops.read_metadata(str(target)) is None and "metadata" not in fsops.stat_path(str(target), True)


def test_a_links_end_is_resolved_through_every_link(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "t.txt").write_text("hi")
    os.symlink("d", tmp_path / "dl")
    os.symlink("dl/t.txt", tmp_path / "l")
    os.symlink("nowhere", tmp_path / "dangling")
    link = fsops.stat_path(str(tmp_path / "l"), trust_all=True)
    assert (link["type"], link["target"]) == ("symlink", "dl/t.txt")
    assert link["link"] == {"path": f"{os.path.realpath(tmp_path)}/d/t.txt", "type": "file", "mode": 0o666 & ~_umask()}
    assert fsops.stat_path(str(tmp_path / "dangling"), trust_all=True)["link"] is None
    assert fsops.stat_path(str(tmp_path / "d"), trust_all=True)["link"] is None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
