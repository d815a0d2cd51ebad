"""The data-plane calls' own `timeout` (seconds) on a real box, sync and async: the seed's
`files.write/read/read_text(..., timeout=)` and the filesystem calls do what they do without one.
(What a call past its timeout does is tests/unit/test_sdk_timeouts.py's, against a server that
never answers.)"""

from __future__ import annotations

from typing import Any

import pytest

from hutch import NotFoundError

T = 30.0  # far more than any of these needs: the calls must work with a timeout given


def test_the_file_calls_take_a_timeout(box: Any) -> None:
    box.files.write("/app/data.txt", "content", timeout=T)  # the seed's quickstart, with a timeout
    assert box.files.read_text("/app/data.txt", timeout=T) == "content"
    assert box.files.read("/app/data.txt", user="root", timeout=T) == b"content"
    assert box.files.exists("/app/data.txt", timeout=T) and not box.files.exists("/app/none", timeout=T)
    assert box.files.get_info("/app/data.txt", timeout=T).size == 7
    assert box.files.make_dir("/app/sub", timeout=T) is True
    assert box.files.rename("/app/data.txt", "/app/sub/moved.txt", timeout=T).path == "/app/sub/moved.txt"
    assert [e.path for e in box.files.list("/app", depth=2, timeout=T)] == ["/app/sub", "/app/sub/moved.txt"]
    assert box.files.download_dir("/app", timeout=T)[:2] == b"PK"
    box.files.remove("/app/sub", timeout=T)
    with pytest.raises(NotFoundError):
        box.files.get_info("/app/sub", timeout=T)


def test_the_process_calls_take_a_timeout(box: Any) -> None:
    process = box.commands.spawn("sleep 600")
    assert [p.pid for p in box.commands.list(timeout=T)] == [process.pid]
    assert box.commands.kill(process.pid, timeout=T) is True
    process.wait(30)  # its exit is seen: it is off the list
    assert box.commands.list(timeout=T) == []
