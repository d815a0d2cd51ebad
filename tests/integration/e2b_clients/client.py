"""Drives the real, unmodified e2b SDK against hutch and prints what happened as one JSON object.

Run by tests/integration/test_e2b.py with each SDK line's own python, with only E2B_API_KEY, E2B_API_URL and
E2B_SANDBOX_URL set: `python client.py <scenario> <sync|async> [arg]`. Standard library and e2b only.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import e2b
from e2b import AsyncSandbox, CommandExitException, PtySize, Sandbox, SandboxQuery

SCENARIO, MODE = sys.argv[1], sys.argv[2]
ARG = sys.argv[3] if len(sys.argv) > 3 else ""
out: dict[str, Any] = {"version": e2b.__version__ if hasattr(e2b, "__version__") else ""}


def caught(fn: Any) -> str:
    try:
        fn()
    except Exception as e:
        return type(e).__name__
    return "none"


async def acaught(coro: Any) -> str:
    try:
        await coro
    except Exception as e:
        return type(e).__name__
    return "none"


def until(check: Callable[[], bool], seconds: float = 10) -> bool:
    """Whether `check` comes true within `seconds`: a wait on the state, not a fixed sleep."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


async def until_async(check: Callable[[], Awaitable[bool]], seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not await check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)
    return True


def count(sbx: Sandbox) -> int:
    """What COUNTER (below) has counted to; 0 before it first wrote."""
    return int(sbx.commands.run("cat /tmp/count 2>/dev/null || echo 0").stdout)


async def count_async(sbx: AsyncSandbox) -> int:
    return int((await sbx.commands.run("cat /tmp/count 2>/dev/null || echo 0")).stdout)


# --- commands and the control plane -----------------------------------------------------------------

def commands_sync() -> None:
    sbx = Sandbox.create(timeout=120, metadata={"suite": "e2b", "mode": ARG, "a b": "c&d"}, envs={"BOX_VAR": "1"})
    out["id"] = sbx.sandbox_id
    seen: list[str] = []
    r = sbx.commands.run("echo out; echo err >&2; echo $BOX_VAR $CALL_VAR", envs={"CALL_VAR": "2"},
                         on_stdout=lambda s: seen.append("o:" + s), on_stderr=lambda s: seen.append("e:" + s))
    out["run"] = {"stdout": r.stdout, "stderr": r.stderr, "exit_code": r.exit_code, "seen": seen}
    out["whoami"] = sbx.commands.run("whoami; pwd", user="root", cwd="/tmp").stdout
    out["default_user"] = sbx.commands.run("whoami; pwd").stdout
    try:
        sbx.commands.run("echo failing; exit 3")
        out["exit"] = "no exception"
    except CommandExitException as e:
        out["exit"] = {"exit_code": e.exit_code, "stdout": e.stdout, "error": e.error}
    h = sbx.commands.run("sleep 0.5; echo late", background=True)
    out["background_wait"] = h.wait().stdout
    h = sbx.commands.run("sleep 600", background=True, timeout=0)
    out["listed"] = h.pid in [p.pid for p in sbx.commands.list()]
    out["kill"] = sbx.commands.kill(h.pid)
    out["killed_wait"] = caught(h.wait)
    out["kill_again"] = sbx.commands.kill(h.pid)
    h = sbx.commands.run("read line; echo got $line", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "hello\n")
    out["stdin"] = h.wait().stdout
    h = sbx.commands.run("sleep 30", background=True, timeout=1)
    out["deadline"] = caught(h.wait)
    # the server killed it at its deadline: it leaves the list
    out["deadline_killed"] = until(lambda: h.pid not in [p.pid for p in sbx.commands.list()])
    info = sbx.get_info()
    out["info"] = {"state": str(info.state.value if hasattr(info.state, "value") else info.state),
                   "metadata": info.metadata, "template": info.template_id}
    found = Sandbox.list(query=SandboxQuery(metadata={"suite": "e2b", "mode": ARG, "a b": "c&d"})).next_items()
    out["listed_ids"] = [s.sandbox_id for s in found]
    out["list_other"] = len(Sandbox.list(query=SandboxQuery(metadata={"suite": "nope"})).next_items())
    sbx.set_timeout(200)
    out["running"] = sbx.is_running()
    out["metrics"] = type(sbx.get_metrics()).__name__
    out["killed"] = sbx.kill()
    out["killed_twice"] = Sandbox.kill(out["id"])
    out["connect_gone"] = caught(lambda: Sandbox.connect(out["id"]))


async def commands_async() -> None:
    sbx = await AsyncSandbox.create(timeout=120, metadata={"suite": "e2b", "mode": ARG}, envs={"BOX_VAR": "1"})
    out["id"] = sbx.sandbox_id
    seen: list[str] = []
    r = await sbx.commands.run("echo out; echo err >&2; echo $BOX_VAR $CALL_VAR", envs={"CALL_VAR": "2"},
                               on_stdout=lambda s: seen.append("o:" + s), on_stderr=lambda s: seen.append("e:" + s))
    out["run"] = {"stdout": r.stdout, "stderr": r.stderr, "exit_code": r.exit_code, "seen": seen}
    out["whoami"] = (await sbx.commands.run("whoami; pwd", user="root", cwd="/tmp")).stdout
    out["default_user"] = (await sbx.commands.run("whoami; pwd")).stdout
    try:
        await sbx.commands.run("echo failing; exit 3")
        out["exit"] = "no exception"
    except CommandExitException as e:
        out["exit"] = {"exit_code": e.exit_code, "stdout": e.stdout, "error": e.error}
    h = await sbx.commands.run("sleep 0.5; echo late", background=True)
    out["background_wait"] = (await h.wait()).stdout
    h = await sbx.commands.run("sleep 600", background=True, timeout=0)
    out["listed"] = h.pid in [p.pid for p in await sbx.commands.list()]
    out["kill"] = await sbx.commands.kill(h.pid)
    out["killed_wait"] = await acaught(h.wait())
    out["kill_again"] = await sbx.commands.kill(h.pid)
    h = await sbx.commands.run("read line; echo got $line", background=True, stdin=True)
    await sbx.commands.send_stdin(h.pid, "hello\n")
    out["stdin"] = (await h.wait()).stdout
    h = await sbx.commands.run("sleep 30", background=True, timeout=1)
    out["deadline"] = await acaught(h.wait())
    async def gone() -> bool:
        return h.pid not in [p.pid for p in await sbx.commands.list()]

    out["deadline_killed"] = await until_async(gone)
    info = await sbx.get_info()
    out["info"] = {"state": str(info.state.value if hasattr(info.state, "value") else info.state),
                   "metadata": info.metadata, "template": info.template_id}
    found = await AsyncSandbox.list(query=SandboxQuery(metadata={"suite": "e2b", "mode": ARG})).next_items()
    out["listed_ids"] = [s.sandbox_id for s in found]
    out["list_other"] = len(await AsyncSandbox.list(query=SandboxQuery(metadata={"suite": "nope"})).next_items())
    await sbx.set_timeout(200)
    out["running"] = await sbx.is_running()
    out["metrics"] = type(await sbx.get_metrics()).__name__
    out["killed"] = await sbx.kill()
    out["killed_twice"] = await AsyncSandbox.kill(out["id"])
    out["connect_gone"] = await acaught(AsyncSandbox.connect(out["id"]))


# --- files ------------------------------------------------------------------------------------------

def files_sync() -> None:
    sbx = Sandbox.create(timeout=120)
    out["id"] = sbx.sandbox_id
    f = sbx.files
    out["write"] = f.write("notes/a.txt", "hello").path
    f.write("/tmp/b.bin", bytes(range(256)) * 100, use_octet_stream=True)
    f.write("/tmp/c.txt", "zipped", gzip=True)
    f.write_files([{"path": "/tmp/many/1.txt", "data": "one"}, {"path": "/tmp/many/2.txt", "data": b"two"}])
    out["read"] = f.read("notes/a.txt")
    out["read_bytes"] = bytes(f.read("/tmp/b.bin", format="bytes")) == bytes(range(256)) * 100
    out["read_gzip"] = f.read("/tmp/c.txt")
    out["read_many"] = [f.read("/tmp/many/1.txt"), f.read("/tmp/many/2.txt")]
    out["root_file"] = caught(lambda: f.read("/root/x", user="user"))
    out["missing"] = caught(lambda: f.read("/tmp/nothing"))
    out["bad_user"] = caught(lambda: sbx.commands.run("true", user="nobody"))
    out["list"] = sorted((e.name, e.type.value if e.type else None) for e in f.list("/tmp/many"))
    info = f.get_info("notes/a.txt")
    out["info"] = {"name": info.name, "path": info.path, "size": info.size, "type": info.type.value,
                   "owner": info.owner, "permissions": info.permissions}
    out["exists"] = [f.exists("notes/a.txt"), f.exists("/tmp/nothing")]
    out["make_dir"] = [f.make_dir("/tmp/d/e"), f.make_dir("/tmp/d/e")]
    out["rename"] = f.rename("notes/a.txt", "notes/b.txt").path
    f.remove("/tmp/many")
    out["removed"] = f.exists("/tmp/many")
    w = f.watch_dir("/tmp/d")
    f.write("/tmp/d/new.txt", "x")
    seen: set[tuple[str, str]] = set()

    def created() -> bool:
        seen.update((e.name, e.type.value) for e in w.get_new_events())
        return ("new.txt", "create") in seen

    until(created)
    out["events"] = sorted(seen)
    w.stop()
    sbx.kill()


async def files_async() -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    out["id"] = sbx.sandbox_id
    f = sbx.files
    out["write"] = (await f.write("notes/a.txt", "hello")).path
    await f.write("/tmp/b.bin", bytes(range(256)) * 100, use_octet_stream=True)
    await f.write("/tmp/c.txt", "zipped", gzip=True)
    await f.write_files([{"path": "/tmp/many/1.txt", "data": "one"}, {"path": "/tmp/many/2.txt", "data": b"two"}])
    out["read"] = await f.read("notes/a.txt")
    out["read_bytes"] = bytes(await f.read("/tmp/b.bin", format="bytes")) == bytes(range(256)) * 100
    out["read_gzip"] = await f.read("/tmp/c.txt")
    out["read_many"] = [await f.read("/tmp/many/1.txt"), await f.read("/tmp/many/2.txt")]
    out["root_file"] = await acaught(f.read("/root/x", user="user"))
    out["missing"] = await acaught(f.read("/tmp/nothing"))
    out["bad_user"] = await acaught(sbx.commands.run("true", user="nobody"))
    out["list"] = sorted((e.name, e.type.value if e.type else None) for e in await f.list("/tmp/many"))
    info = await f.get_info("notes/a.txt")
    out["info"] = {"name": info.name, "path": info.path, "size": info.size, "type": info.type.value,
                   "owner": info.owner, "permissions": info.permissions}
    out["exists"] = [await f.exists("notes/a.txt"), await f.exists("/tmp/nothing")]
    out["make_dir"] = [await f.make_dir("/tmp/d/e"), await f.make_dir("/tmp/d/e")]
    out["rename"] = (await f.rename("notes/a.txt", "notes/b.txt")).path
    await f.remove("/tmp/many")
    out["removed"] = await f.exists("/tmp/many")
    events: list[Any] = []
    w = await f.watch_dir("/tmp/d", on_event=events.append)
    await f.write("/tmp/d/new.txt", "x")

    async def created() -> bool:
        return any((e.name, e.type.value) == ("new.txt", "create") for e in events)

    await until_async(created)
    await w.stop()
    out["events"] = sorted({(e.name, e.type.value) for e in events})
    await sbx.kill()


# --- envd parity: metadata, watch events, remove, links, a killed box, a command timeout ------------

META = {"author": "mish", "purpose": "upload"}
BAD_META = [{"bad key": "v"}, {"": "v"}, {"good": "bad\nvalue"}, {"good": "value\n"}, {"key\n": "v"}]


def parity_sync() -> None:
    from e2b.sandbox.filesystem.filesystem import WriteEntry

    sbx = Sandbox.create(timeout=120)
    out["id"] = sbx.sandbox_id
    f = sbx.files
    # metadata, as E2B's tests/sync/sandbox_sync/files/test_metadata.py checks it
    out["meta_write"] = [f.write("m.txt", "x", metadata=META).metadata, f.get_info("m.txt").metadata,
                         f.write("o.txt", "x", metadata=META, use_octet_stream=True).metadata,
                         f.get_info("o.txt").metadata]
    out["meta_none"] = [f.write("n.txt", "x").metadata, f.get_info("n.txt").metadata]
    infos = f.write_files([WriteEntry(path="w1.txt", data="1"), WriteEntry(path="w2.txt", data="2")],
                          metadata={"source": "suite"})
    out["meta_many"] = [[i.metadata, f.get_info(i.path).metadata] for i in infos]
    f.make_dir("md")
    f.write("md/l.txt", "x", metadata={"Tag": "listed"})  # keys are lowercased, as envd does
    out["meta_list"] = [e.metadata for e in f.list("md") if e.name == "l.txt"]
    f.write("r1.txt", "x", metadata={"stage": "renamed"})
    out["meta_rename"] = f.rename("r1.txt", "r2.txt").metadata
    f.write("ow.txt", "first", metadata={"author": "mish"})
    out["meta_overwrite"] = [f.write("ow.txt", "second").metadata, f.get_info("ow.txt").metadata]
    sbx.commands.run("python3 -c \"import os; os.setxattr('/home/user/n.txt', 'user.e2b.author', b'mish')\"")
    out["meta_xattr"] = f.get_info("n.txt").metadata
    out["meta_bad"] = [caught(lambda m=m: f.write("bad.txt", "x", metadata=m)) for m in BAD_META]
    out["meta_bad_made"] = f.exists("bad.txt")
    # watch: a write is the file's own (test_watch.py), with its entry
    f.make_dir("wd")
    f.write("wd/w.txt", "before")
    h = f.watch_dir("wd", include_entry=True)
    f.write("wd/w.txt", "after")
    f.write("wd/new.txt", "fresh")
    seen: list[Any] = []
    until(lambda: polled(h, seen, lambda: sum(e.name == "new.txt" for e in seen) >= 3))
    h.stop()
    out["watch"] = [[e.name, e.type.value] for e in seen]
    out["watch_entry"] = [[e.entry.name, e.entry.path, e.entry.type.value, e.entry.size] if e.entry else None
                          for e in seen if e.type.value == "write"]
    f.make_dir("rd/nested")
    h = f.watch_dir("rd", recursive=True, allow_network_mounts=True)
    f.write("rd/nested/x.txt", "x")
    got: list[Any] = []
    until(lambda: polled(h, got, lambda: len(got) >= 3))
    h.stop()
    out["watch_recursive"] = [[e.name, e.type.value, e.entry] for e in got]
    # remove of what is not there, get_info of a link
    out["remove_missing"] = caught(lambda: f.remove("no_such_file.txt"))
    f.make_dir("ln")
    f.write("ln/t.txt", "Hello")
    sbx.commands.run("ln -s t.txt link.txt && ln -s nowhere dangling", cwd="/home/user/ln")
    link = f.get_info("ln/link.txt")
    out["link"] = [link.type.value if link.type else None, link.symlink_target, link.mode]
    dangling = f.get_info("ln/dangling")
    out["dangling"] = [dangling.type.value if dangling.type else None, dangling.symlink_target]
    out["link_listed"] = sorted((e.name, e.type.value if e.type else None, e.symlink_target) for e in f.list("ln"))
    # a command's timeout, then the box killed while a command runs
    out["timeout"] = exception(lambda: sbx.commands.run("sleep 10", timeout=2))
    h2 = sbx.commands.run("sleep 10", timeout=2, background=True)
    out["timeout_iterating"] = exception(lambda: [None for _ in h2])
    running = sbx.commands.run("sleep 60", background=True)
    sbx.kill()
    out["killed"] = exception(running.wait)


def polled(handle: Any, events: list[Any], enough: Callable[[], bool]) -> bool:
    """The watch's new events added to `events`; whether there are enough now."""
    events.extend(handle.get_new_events())
    return enough()


def host_sync() -> None:
    """get_host(port), and a server on that port in the box (left running: the test calls it)."""
    sbx = Sandbox.create(timeout=120)
    out["id"] = sbx.sandbox_id
    sbx.commands.run("cd /tmp && python3 -m http.server 8001", background=True, timeout=0)
    out["host"] = sbx.get_host(8001)


def exception(fn: Any) -> list[str]:
    try:
        fn()
    except Exception as e:
        return [type(e).__name__, str(e)]
    return ["none", ""]


async def aexception(coro: Any) -> list[str]:
    try:
        await coro
    except Exception as e:
        return [type(e).__name__, str(e)]
    return ["none", ""]


async def parity_async() -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    out["id"] = sbx.sandbox_id
    f = sbx.files
    out["meta_write"] = [(await f.write("m.txt", "x", metadata=META)).metadata, (await f.get_info("m.txt")).metadata]
    await f.make_dir("wd")
    await f.write("wd/w.txt", "before")
    seen: list[Any] = []
    h = await f.watch_dir("wd", on_event=seen.append, include_entry=True)
    await f.write("wd/w.txt", "after")
    await f.write("wd/new.txt", "fresh")

    async def three() -> bool:
        return sum(bool(e.name == "new.txt") for e in seen) >= 3

    await until_async(three)
    await h.stop()
    out["watch"] = [[e.name, e.type.value] for e in seen]
    out["watch_entry"] = [[e.entry.name, e.entry.path, e.entry.type.value, e.entry.size] if e.entry else None
                          for e in seen if e.type.value == "write"]
    out["remove_missing"] = await acaught(f.remove("no_such_file.txt"))
    await f.write("t.txt", "Hello")
    await sbx.commands.run("ln -s t.txt link.txt")
    link = await f.get_info("link.txt")
    out["link"] = [link.type.value if link.type else None, link.symlink_target, link.mode]
    out["timeout"] = await aexception(sbx.commands.run("sleep 10", timeout=2))
    running = await sbx.commands.run("sleep 60", background=True)
    await sbx.kill()
    out["killed"] = await aexception(running.wait())


# --- terminals, input streams, reattaching ---------------------------------------------------------

PTY_INPUT = b"stty size; echo pty-$((6*7)); exit 0\n"


def pty_sync() -> None:
    sbx = Sandbox.create(timeout=120)
    h = sbx.pty.create(PtySize(rows=24, cols=80), timeout=0)
    sbx.pty.resize(h.pid, PtySize(rows=30, cols=100))
    sbx.pty.send_stdin(h.pid, PTY_INPUT)
    got: list[bytes] = []
    r = h.wait(on_pty=lambda b: got.append(bytes(b)))
    text = b"".join(got).decode(errors="replace")
    out["pty"] = {"size": "30 100" in text, "echo": "pty-42" in text, "exit": r.exit_code}
    if hasattr(sbx.commands, "stream_input"):  # 2.63
        h = sbx.commands.run("cat", background=True, stdin=True, timeout=0)
        sbx.commands.stream_input(h.pid, ["a", b"b\n"])
        sbx.commands.close_stdin(h.pid)
        out["stream_input"] = h.wait().stdout
    h = sbx.commands.run("sleep 1; echo connected", background=True)
    h.disconnect()
    out["connect"] = sbx.commands.connect(h.pid).wait().stdout
    h = sbx.commands.run("echo first; sleep 2; echo second", background=True)
    for stdout, _stderr, _pty in h:  # the first line, then away
        if stdout:
            break
    h.disconnect()
    out["no_replay"] = sbx.commands.connect(h.pid).wait().stdout  # as envd: only what came after
    sbx.kill()


async def pty_async() -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    got: list[bytes] = []
    h = await sbx.pty.create(PtySize(rows=24, cols=80), on_data=lambda b: got.append(bytes(b)), timeout=0)
    await sbx.pty.resize(h.pid, PtySize(rows=30, cols=100))
    await sbx.pty.send_stdin(h.pid, PTY_INPUT)
    r = await h.wait()
    text = b"".join(got).decode(errors="replace")
    out["pty"] = {"size": "30 100" in text, "echo": "pty-42" in text, "exit": r.exit_code}
    if hasattr(sbx.commands, "stream_input"):
        h = await sbx.commands.run("cat", background=True, stdin=True, timeout=0)
        stream = sbx.commands.stream_input(h.pid)  # async: a handle to send through
        await stream.send("a")
        await stream.send(b"b\n")
        await stream.close()
        await sbx.commands.close_stdin(h.pid)
        out["stream_input"] = (await h.wait()).stdout
    h = await sbx.commands.run("sleep 1; echo connected", background=True)
    await h.disconnect()
    out["connect"] = (await (await sbx.commands.connect(h.pid)).wait()).stdout
    first = asyncio.Event()
    h = await sbx.commands.run("echo first; sleep 2; echo second", background=True,
                               on_stdout=lambda _s: first.set())
    await asyncio.wait_for(first.wait(), 30)
    await h.disconnect()
    out["no_replay"] = (await (await sbx.commands.connect(h.pid)).wait()).stdout
    await sbx.kill()


# --- pause and connect ----------------------------------------------------------------------------------

COUNTER = "i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.2; done"


def pause_sync() -> None:
    sbx = Sandbox.create(timeout=120)
    out["id"] = sbx.sandbox_id
    sbx.commands.run("echo kept > /tmp/kept")
    h = sbx.commands.run(COUNTER, background=True, timeout=0)
    until(lambda: count(sbx) > 0)
    out["paused"] = sbx.pause() if hasattr(sbx, "pause") else sbx.beta_pause()
    out["state"] = str(Sandbox.get_info(sbx.sandbox_id).state.value)
    out["paused_again"] = Sandbox.pause(sbx.sandbox_id) if hasattr(Sandbox, "pause") else None
    back = Sandbox.connect(sbx.sandbox_id, timeout=120)
    out["state_after"] = str(back.get_info().state.value)
    out["kept"] = back.commands.run("cat /tmp/kept").stdout
    first = count(back)
    out["counting"] = until(lambda: count(back) > first)
    out["process_kept"] = h.pid in [p.pid for p in back.commands.list()]
    # the first handle, after the resume by another, and after its own pause and connect
    out["same_handle"] = [sbx.commands.run("echo one").stdout]
    sbx.pause() if hasattr(sbx, "pause") else sbx.beta_pause()
    sbx.connect(timeout=120)
    out["same_handle"].append(sbx.commands.run("echo two").stdout)
    back.kill()


async def pause_async() -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    out["id"] = sbx.sandbox_id
    await sbx.commands.run("echo kept > /tmp/kept")
    h = await sbx.commands.run(COUNTER, background=True, timeout=0)

    async def started() -> bool:
        return await count_async(sbx) > 0

    await until_async(started)
    out["paused"] = await (sbx.pause() if hasattr(sbx, "pause") else sbx.beta_pause())
    out["state"] = str((await AsyncSandbox.get_info(sbx.sandbox_id)).state.value)
    out["paused_again"] = await AsyncSandbox.pause(sbx.sandbox_id) if hasattr(AsyncSandbox, "pause") else None
    back = await AsyncSandbox.connect(sbx.sandbox_id, timeout=120)
    out["state_after"] = str((await back.get_info()).state.value)
    out["kept"] = (await back.commands.run("cat /tmp/kept")).stdout
    first = await count_async(back)

    async def counting() -> bool:
        return await count_async(back) > first

    out["counting"] = await until_async(counting)
    out["process_kept"] = h.pid in [p.pid for p in await back.commands.list()]
    out["same_handle"] = [(await sbx.commands.run("echo one")).stdout]
    await (sbx.pause() if hasattr(sbx, "pause") else sbx.beta_pause())
    await sbx.connect(timeout=120)
    out["same_handle"].append((await sbx.commands.run("echo two")).stdout)
    await back.kill()


# --- one box, two clients; templates; keys -----------------------------------------------------------

def create_sync() -> None:
    """A box from template ARG (default base) that the test then drives with hutch's SDK."""
    sbx = Sandbox.create(ARG or "base", timeout=300, metadata={"from": "e2b"})
    out["id"] = sbx.sandbox_id
    out["marker"] = sbx.commands.run("cat /marker 2>/dev/null || true").stdout
    sbx.commands.run("echo from-e2b > /tmp/shared")


def reconnect_sync() -> None:
    sbx = Sandbox.connect(ARG)
    out["shared"] = sbx.commands.run("cat /tmp/from-hutch").stdout
    out["killed"] = sbx.kill()


def lifecycle_sync() -> None:
    """At the timeout: E2B's default kills the box, on_timeout "pause" pauses it."""
    killed = Sandbox.create(timeout=2)
    paused = Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause"})
    out["lifecycle"] = Sandbox.get_info(paused.sandbox_id).lifecycle
    until(lambda: Sandbox.get_info(paused.sandbox_id).state.value == "paused" and caught(killed.get_info) != "none",
          seconds=30)
    out["killed"] = caught(killed.get_info)
    out["paused"] = Sandbox.get_info(paused.sandbox_id).state.value
    # the same handle: its next call resumes the box, and the calls after it still get in
    out["auto_resumed"] = [paused.commands.run(f"echo {i}").stdout for i in range(3)]
    paused.kill()


def network_sync() -> None:
    """update_network replaces the running box's egress rules whole: a host denied mid-session,
    then every rule cleared."""
    sbx = Sandbox.create(timeout=120)
    curl = "curl -sS -o /dev/null -w '%{http_code}' --max-time 10 http://example.test/ || true"
    out["before"] = sbx.commands.run(curl).stdout
    sbx.update_network({"allow_out": ["other.test"], "deny_out": ["0.0.0.0/0"]})
    out["info_denied"] = Sandbox.get_info(sbx.sandbox_id).network
    out["domain_deny"] = caught(lambda: sbx.update_network({"deny_out": ["example.test"]}))
    out["denied"] = sbx.commands.run(curl).stdout
    Sandbox.update_network(sbx.sandbox_id, {})
    out["cleared"] = sbx.commands.run(curl).stdout
    out["proxy"] = caught(lambda: sbx.update_network({"egress_proxy": {"address": "socks5://10.0.0.1:1080"}}))
    out["gone"] = caught(lambda: Sandbox.update_network("no-such-box", {}))
    sbx.kill()


def secrets_sync() -> None:
    """E2B's Secret, and a box whose network rules set a secret in a header on its HTTPS requests
    to one host (the box never holds it). ARG: the tag that names this run's secret."""
    from e2b import Secret
    name = f"key-{ARG}"
    made = Secret.create(name, "first-value", metadata={"tag": ARG})
    out["created"] = {"id_set": bool(made.secret_id), "name": made.name, "version": made.version,
                      "metadata": made.metadata}
    out["exists"] = [Secret.exists(name), Secret.exists(made.secret_id), Secret.exists(f"nope-{ARG}")]
    out["duplicate"] = caught(lambda: Secret.create(name, "again"))
    updated = Secret.update(name, "the-secret-value", metadata={"tag": ARG, "v": "2"})
    out["updated"] = {"version": updated.version, "metadata": updated.metadata}
    out["info"] = Secret.get_info(made.secret_id).name
    paginator = Secret.list(limit=1)
    names: list[str] = []
    while paginator.has_next:
        names += [i.name for i in paginator.next_items()]
    out["listed"] = name in names
    rules = {"example.test": [{"transform": {"headers": {"Authorization": f"Bearer {Secret.fill(name)}",
                                                         "X-Plain": "literal"}}}]}
    sbx = Sandbox.create(timeout=120, network={"rules": rules})
    out["rules_info"] = Sandbox.get_info(sbx.sandbox_id).network
    out["env_has_value"] = "the-secret-value" in sbx.commands.run("env").stdout
    out["https"] = sbx.commands.run("curl -sS -o /dev/null -w '%{http_code}' -H 'Authorization: mine' "
                                    f"https://example.test/rule-{ARG}").stdout
    out["other_host"] = sbx.commands.run(f"curl -sS -o /dev/null -w '%{{http_code}}' https://other.test/other-{ARG}").stdout
    sbx.update_network({"rules": {}})
    out["after_clear"] = sbx.commands.run(f"curl -sS -o /dev/null -w '%{{http_code}}' https://example.test/clear-{ARG}").stdout
    sbx.kill()
    out["iam"] = caught(lambda: Sandbox.create(network={"rules": {"example.test": [{"transform": {
        "headers": {"Authorization": "${e2b.identity.tokens.aws}"}}}]}}))
    out["destroyed"] = [Secret.destroy(name), Secret.destroy(name)]
    out["gone"] = caught(lambda: Secret.get_info(name))


def metrics_sync() -> None:
    """A box that burns a CPU and holds 96 MiB: its samples show it (the node samples every 5 s)."""
    import datetime
    sbx = Sandbox.create(timeout=120)
    out["id"] = sbx.sandbox_id
    sbx.commands.run("timeout 40 sh -c 'while :; do :; done' >/dev/null 2>&1 &")
    sbx.commands.run("python3 -c 'import time; x = bytearray(96 << 20); time.sleep(40)' >/dev/null 2>&1 &")
    def busy() -> list[Any]:
        return [m for m in sbx.get_metrics() if m.cpu_used_pct > 50 and m.mem_used > 96 << 20]

    out["busy_seen"] = until(lambda: bool(busy()), 60)
    sample = busy()[-1]
    out["sample"] = {"cpu_count": sample.cpu_count, "mem_total": sample.mem_total, "disk_total": sample.disk_total,
                     "disk_used": sample.disk_used, "age": time.time() - sample.timestamp.timestamp()}
    out["before_it_ran"] = len(sbx.get_metrics(end=datetime.datetime.fromtimestamp(1_000_000, datetime.UTC)))
    out["after_now"] = len(sbx.get_metrics(start=datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)))
    sbx.kill()


def signed_urls_sync() -> None:
    """A secure box's signed links, made by the SDK (the box is left running: the test fetches
    them with a plain HTTP client and kills it)."""
    sbx = Sandbox.create(timeout=300, secure=True)
    out["id"] = sbx.sandbox_id
    sbx.files.write("signed/a.txt", "signed bytes")
    path = "signed/a.txt"
    out["download"] = sbx.download_url(path, "user")
    out["download_default_user"] = sbx.download_url(path)
    out["download_expiring"] = sbx.download_url(path, "user", use_signature_expiration=120)
    out["download_expired"] = sbx.download_url(path, "user", use_signature_expiration=-120)
    out["download_root"] = sbx.download_url("/etc/hostname", "root")
    out["upload"] = sbx.upload_url("signed/up.txt", "user", use_signature_expiration=120)
    out["upload_expired"] = sbx.upload_url("signed/late.txt", "user", use_signature_expiration=-120)


def bad_template_sync() -> None:
    out["error"] = caught(lambda: Sandbox.create("no-such-template"))


def wrong_key_sync() -> None:
    out["error"] = caught(lambda: Sandbox.create())


async def wrong_key_async() -> None:
    out["error"] = await acaught(AsyncSandbox.create())


def main() -> None:
    flows = {name[:-5] if name.endswith("_sync") else name[:-6]: None for name in globals()
             if name.endswith(("_sync", "_async"))}
    assert SCENARIO in flows, f"unknown scenario {SCENARIO}"
    fn = globals()[f"{SCENARIO}_{MODE}"]
    if MODE == "async":
        asyncio.run(fn())
    else:
        fn()
    print(json.dumps(out), flush=True)
    os._exit(0)  # not the interpreter's shutdown: the SDK's HTTP client (Rust) may crash in it


if __name__ == "__main__":
    main()
