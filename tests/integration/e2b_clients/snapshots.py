"""Drives the real, unmodified e2b SDK's snapshots and fork against hutch; prints what happened as one
JSON object.

Run by tests/integration/test_e2b_snapshots.py with an SDK line's own python and only E2B_API_KEY,
E2B_API_URL and E2B_SANDBOX_URL set: `python snapshots.py <scenario> <tag>`. Standard library and e2b.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import e2b
from e2b import AsyncSandbox, Sandbox

SCENARIO, TAG = sys.argv[1], sys.argv[2]
HOME = "/home/user"
COUNTER = "i=0; while true; do i=$((i+1)); echo $i > {0}.new; mv {0}.new {0}; sleep 0.2; done"
out: dict[str, Any] = {}


def caught(fn: Callable[[], Any]) -> list[Any]:
    """The exception's class and status (E2B's SandboxException carries one), or ["none"]."""
    try:
        fn()
    except Exception as e:
        return [type(e).__name__, getattr(e, "status_code", None)]
    return ["none"]


def until(check: Callable[[], bool], seconds: float = 20) -> bool:
    """Whether `check` comes true within `seconds`: a wait on the state, not a fixed sleep."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def count(sbx: Sandbox, path: str = "/tmp/count") -> int:
    return int(sbx.commands.run(f"cat {path} 2>/dev/null || echo 0").stdout)


def continues(sbx: Sandbox, saved: int, pid: int) -> dict[str, Any]:
    """A box from the snapshot: the counter goes on from where it was saved, in the same process,
    and the file written before is there."""
    first = count(sbx)
    return {"from_saved": first >= saved, "counting": until(lambda: count(sbx) > first),
            "same_process": pid in [p.pid for p in sbx.commands.list()],
            "file": sbx.files.read(f"{HOME}/file.txt"), "token": sbx._envd_access_token}


def snapshots() -> None:
    meta = {"suite": "e2b-snapshots", "tag": TAG}
    src = Sandbox.create(timeout=300, metadata=meta)
    out["source"] = src.sandbox_id
    src.files.write(f"{HOME}/file.txt", "saved before\n")
    handle = src.commands.run(COUNTER.format("/tmp/count"), background=True, timeout=0)
    until(lambda: count(src) >= 10)  # a cold box would show this number, but never count past it
    saved = count(src)
    started = time.monotonic()
    snap = src.create_snapshot()
    out["seconds"] = {"snapshot": time.monotonic() - started}
    out["snapshot"] = {"id": snap.snapshot_id, "names": snap.names}
    out["source_runs_on"] = until(lambda: count(src) > saved + 5)

    started = time.monotonic()
    a = Sandbox.create(snap.snapshot_id, timeout=120, metadata={**meta, "box": "a"})
    a.commands.run("true")
    out["seconds"]["boot_to_first_command"] = time.monotonic() - started
    b = Sandbox.create(snap.snapshot_id, timeout=120, metadata={**meta, "box": "b"})
    out["boots"] = [continues(x, saved, handle.pid) for x in (a, b)]
    out["ids"] = [a.sandbox_id, b.sandbox_id]
    a.files.write(f"{HOME}/only-a.txt", "a\n")
    out["b_sees_a"] = b.files.exists(f"{HOME}/only-a.txt")
    out["source_sees_a"] = src.files.exists(f"{HOME}/only-a.txt")
    out["info_a"] = {"state": str(a.get_info().state.value), "metadata": a.get_info().metadata}
    a.kill()
    b.kill()

    named = Sandbox.create_snapshot(src.sandbox_id, name=f"snap-{TAG}")
    out["named"] = {"id": named.snapshot_id, "names": named.names}
    out["same_name"] = caught(lambda: src.create_snapshot(name=f"snap-{TAG}"))
    by_name = Sandbox.create(f"snap-{TAG}", timeout=60)
    out["by_name_file"] = by_name.files.read(f"{HOME}/file.txt")
    by_name.kill()

    listed = Sandbox.list_snapshots().next_items()
    out["listed"] = [s.snapshot_id for s in listed]
    out["listed_by_box"] = [s.snapshot_id for s in src.list_snapshots().next_items()]
    out["listed_by_name"] = [s.snapshot_id for s in Sandbox.list_snapshots(name=f"snap-{TAG}").next_items()]
    pages = Sandbox.list_snapshots(limit=1)
    out["pages"] = []
    while pages.has_next:
        out["pages"].append([s.snapshot_id for s in pages.next_items()])

    out["deleted"] = Sandbox.delete_snapshot(snap.snapshot_id)
    out["deleted_again"] = Sandbox.delete_snapshot(snap.snapshot_id)
    out["boot_deleted"] = caught(lambda: Sandbox.create(snap.snapshot_id, timeout=30))
    out["deleted_named"] = Sandbox.delete_snapshot(named.snapshot_id)
    out["left"] = [s.snapshot_id for s in Sandbox.list_snapshots().next_items()]

    started = time.monotonic()
    forks = src.fork(count=2, timeout=120)
    out["seconds"]["fork_2"] = time.monotonic() - started
    out["forks"] = [continues(f, saved, handle.pid) if isinstance(f, Sandbox) else repr(f) for f in forks]
    one, two = forks
    assert isinstance(one, Sandbox) and isinstance(two, Sandbox), forks
    out["fork_ids"] = [one.sandbox_id, two.sandbox_id]
    one.files.write(f"{HOME}/only-one.txt", "1\n")
    out["two_sees_one"] = two.files.exists(f"{HOME}/only-one.txt")
    out["fork_metadata"] = one.get_info().metadata
    out["left_after_fork"] = [s.snapshot_id for s in Sandbox.list_snapshots().next_items()]
    now = count(src)
    out["source_still_runs"] = until(lambda: count(src) > now)
    for box in (one, two, src):
        box.kill()


def errors() -> None:
    """What each bad id or request is, as the SDK raises it."""
    out["snapshot_missing_box"] = caught(lambda: Sandbox.create_snapshot("no-such-box"))
    out["fork_missing_box"] = caught(lambda: Sandbox.fork("no-such-box", count=1))
    out["boot_missing"] = caught(lambda: Sandbox.create("no-such-snapshot", timeout=30))
    out["delete_missing"] = Sandbox.delete_snapshot("no-such-snapshot")


def filesystem_pause() -> None:
    """2.63's pause(mode="filesystem"): the files kept; the connect boots the box afresh with them."""
    at = f"{HOME}/count"
    src = Sandbox.create(timeout=120)
    src.files.write(f"{HOME}/file.txt", "kept\n")
    handle = src.commands.run(COUNTER.format(at), background=True, timeout=0)
    until(lambda: count(src, at) >= 3)
    src.pause(mode="filesystem")
    out["paused"] = not src.is_running()
    box = Sandbox.connect(src.sandbox_id, timeout=60)
    out["same_box"] = box.sandbox_id == src.sandbox_id
    out["file"] = box.files.read(f"{HOME}/file.txt")
    saved = count(box, at)
    out["counting"] = until(lambda: count(box, at) > saved, seconds=3)
    out["process"] = handle.pid in [p.pid for p in box.commands.list()]
    box.kill()
    life = Sandbox.create(timeout=60, lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}})
    out["lifecycle_running"] = life.is_running()
    life.kill()


def filesystem() -> None:
    """2.63's create_snapshot(mode="filesystem"): the files only; a box of it boots afresh."""
    at = f"{HOME}/count"  # on the root filesystem: /tmp is a tmpfs, which a files-only snapshot leaves out
    src = Sandbox.create(timeout=120)
    src.files.write(f"{HOME}/file.txt", "files only\n")
    src.files.write("/tmp/scratch", "scratch\n")
    handle = src.commands.run(COUNTER.format(at), background=True, timeout=0)
    until(lambda: count(src, at) >= 3)
    snap = src.create_snapshot(mode="filesystem")
    box = Sandbox.create(snap.snapshot_id, timeout=60)
    out["file"] = box.files.read(f"{HOME}/file.txt")
    out["tmp_kept"] = box.files.exists("/tmp/scratch")
    saved = count(box, at)  # the counter's last write is a file like any other
    out["count_kept"] = saved >= 3
    out["counting"] = until(lambda: count(box, at) > saved, seconds=3)
    out["process"] = handle.pid in [p.pid for p in box.commands.list()]
    out["source_counting"] = until(lambda: count(src, at) > saved)
    box.kill()
    src.kill()
    out["deleted"] = Sandbox.delete_snapshot(snap.snapshot_id)


def quotas() -> None:
    """On a server whose teams run at most 2 boxes and keep 1 snapshot."""
    src = Sandbox.create(timeout=120)
    snap = src.create_snapshot()
    out["second_snapshot"] = caught(lambda: src.create_snapshot())
    out["fork_past_snapshots"] = caught(lambda: src.fork(count=1, timeout=60))  # its own snapshot is one more
    Sandbox.delete_snapshot(snap.snapshot_id)
    forks = src.fork(count=2, timeout=60)  # one more box fits
    out["forks"] = sorted(type(f).__name__ for f in forks)
    out["refused"] = [str(f) for f in forks if isinstance(f, Exception)]
    out["left"] = [s.snapshot_id for s in Sandbox.list_snapshots().next_items()]
    for f in forks:
        if isinstance(f, Sandbox):
            f.kill()
    src.kill()


async def fork_async() -> None:
    """The async SDK's create_snapshot, create from it and fork."""
    src = await AsyncSandbox.create(timeout=120)
    await src.files.write(f"{HOME}/file.txt", "async\n")
    snap = await src.create_snapshot()
    box = await AsyncSandbox.create(snap.snapshot_id, timeout=60)
    out["booted"] = await box.files.read(f"{HOME}/file.txt")
    forks = await src.fork(count=2, timeout=60)
    out["forks"] = [await f.files.read(f"{HOME}/file.txt") if isinstance(f, AsyncSandbox) else repr(f) for f in forks]
    for x in (box, *[f for f in forks if isinstance(f, AsyncSandbox)], src):
        await x.kill()
    out["deleted"] = await AsyncSandbox.delete_snapshot(snap.snapshot_id)


def main() -> None:
    out["version"] = getattr(e2b, "__version__", "")
    if SCENARIO == "fork_async":
        asyncio.run(fork_async())
    else:
        {"snapshots": snapshots, "errors": errors, "quotas": quotas, "filesystem": filesystem,
         "filesystem_pause": filesystem_pause}[SCENARIO]()
    print(json.dumps(out), flush=True)
    os._exit(0)  # not the interpreter's shutdown: the SDK's HTTP client may crash in it


if __name__ == "__main__":
    main()
