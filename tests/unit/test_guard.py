"""The guard's hold on the runsc root: a dying server's lock goes a moment after the pipe that woke
the guard, so a lock held briefly is waited for; one held on is a new server's."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from hutch.services import guard


def _lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_lock_released_a_moment_later_is_taken(tmp_path: Path) -> None:
    held = _lock(tmp_path / guard.LOCK_NAME)
    release = threading.Timer(0.3, os.close, (held,))
    release.start()
    mine = os.open(tmp_path / guard.LOCK_NAME, os.O_RDWR)
    try:
        assert guard._take(mine)
    finally:
        release.join()
        os.close(mine)


def test_a_lock_held_on_is_a_new_servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard, "LOCK_WAIT", 0.3)
    held = _lock(tmp_path / guard.LOCK_NAME)
    try:
        assert guard.stop_unclaimed("runsc-is-not-called", str(tmp_path), "sqlite://") == []
        mine = os.open(tmp_path / guard.LOCK_NAME, os.O_RDWR)
        assert not guard._take(mine)
        os.close(mine)
    finally:
        os.close(held)
