"""files: stat, list, make_dir, rename, remove, exists and watch_dir; each user's rights, links the
box user planted, typed errors, and the raw HTTP routes (never a 500)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from hutch import ConflictError, EntryInfo, FilesystemEvent, NotFoundError, SandboxError, ValidationError
from hutch.sdk.sandbox import AsyncWatchHandle
from tests.integration.support import Env, wait_for


def sh(box: Any, command: str, user: str = "root") -> str:
    r = box.commands.run(command, user=user)
    assert r.exit_code == 0, r.stderr
    return str(r.stdout)


def test_get_info_describes_files_dirs_and_links(box: Any) -> None:
    box.files.write("/home/user/a.txt", "hello")
    sh(box, "ln -s a.txt /home/user/link && chmod 640 /home/user/a.txt", user="user")
    info = box.files.get_info("/home/user/a.txt")
    assert isinstance(info, EntryInfo)
    assert (info.name, info.path, info.type, info.size) == ("a.txt", "/home/user/a.txt", "file", 5)
    assert (info.mode, info.permissions, info.owner, info.group) == (0o640, "-rw-r-----", "user", "user")
    assert abs(info.modified_time.timestamp() - time.time()) < 120 and info.symlink_target is None
    link = box.files.get_info("/home/user/link")
    assert (link.type, link.symlink_target, link.permissions[0]) == ("symlink", "a.txt", "l")
    home = box.files.get_info("/home/user/")
    assert (home.type, home.name, home.path) == ("dir", "user", "/home/user")
    root = box.files.get_info("/")
    assert (root.type, root.path, root.owner) == ("dir", "/", "root")
    assert box.files.exists("/home/user/a.txt") and not box.files.exists("/home/user/nope")
    with pytest.raises(NotFoundError) as nf:
        box.files.get_info("/home/user/nope")
    assert nf.value.code == "file_not_found" and nf.value.status_code == 404


def test_get_info_and_list_show_e2b_metadata(box: Any) -> None:
    """E2B's file metadata is the file's user.e2b.* xattrs, however they were set."""
    box.files.write("/home/user/meta.txt", "x")
    assert box.files.get_info("/home/user/meta.txt").metadata is None
    sh(box, "python3 -c \"import os; os.setxattr('/home/user/meta.txt', 'user.e2b.author', b'mish'); "
            "os.setxattr('/home/user/meta.txt', 'user.other', b'not e2b')\"", user="user")
    assert box.files.get_info("/home/user/meta.txt").metadata == {"author": "mish"}
    assert [e.metadata for e in box.files.list("/home/user") if e.name == "meta.txt"] == [{"author": "mish"}]
    box.files.write("/home/user/meta.txt", "y")  # a write replaces the file: its metadata goes with it
    assert box.files.get_info("/home/user/meta.txt").metadata is None


def test_list_is_sorted_goes_depth_levels_down_and_never_follows_links(box: Any) -> None:
    sh(box, "mkdir -p /home/user/t/b/c/d && touch /home/user/t/z.txt /home/user/t/a.txt /home/user/t/b/c/f "
            "&& ln -s /etc /home/user/t/etc", user="user")
    one = box.files.list("/home/user/t")
    assert [(e.name, e.type) for e in one] == [("a.txt", "file"), ("b", "dir"), ("etc", "symlink"), ("z.txt", "file")]
    assert [e.path for e in box.files.list("/home/user/t", depth=3)] == [
        "/home/user/t/a.txt", "/home/user/t/b", "/home/user/t/b/c", "/home/user/t/b/c/d", "/home/user/t/b/c/f",
        "/home/user/t/etc", "/home/user/t/z.txt"]
    assert box.files.list("/home/user/t/etc") != []  # the user's own link, followed as the user
    assert [e.name for e in box.files.list("/home/user/t/b/c/d")] == []
    assert "passwd" in [e.name for e in box.files.list("/etc", user="root")]
    for depth in (0, 17):
        with pytest.raises(ValidationError):
            box.files.list("/home/user/t", depth=depth)


def test_list_past_ten_thousand_entries_is_a_clear_error(box: Any) -> None:
    sh(box, "mkdir /home/user/many && cd /home/user/many && seq 1 10001 | xargs touch", user="user")
    with pytest.raises(ValidationError) as err:
        box.files.list("/home/user/many")
    assert err.value.code == "too_many_entries" and "10000" in err.value.message


def test_make_dir_makes_parents_owned_by_the_acting_user(box: Any) -> None:
    assert box.files.make_dir("/home/user/new/deep/er") is True
    assert sh(box, "stat -c '%U %a' /home/user/new /home/user/new/deep/er").split("\n")[:2] == ["user 755", "user 755"]
    assert box.files.make_dir("/home/user/new/deep/er") is False
    assert box.files.make_dir("/home/user/new/deep") is False
    assert box.files.make_dir("/srv/rooted/deep", user="root") is True  # /srv is root's: only root may
    assert sh(box, "stat -c %U /srv/rooted /srv/rooted/deep").split() == ["root", "root"]
    assert box.files.make_dir("/", user="root") is False
    box.files.write("/home/user/new/file", "x")
    with pytest.raises(ConflictError) as err:
        box.files.make_dir("/home/user/new/file")
    assert err.value.code == "already_exists" and err.value.status_code == 409
    with pytest.raises(ValidationError) as notdir:
        box.files.make_dir("/home/user/new/file/below")
    assert notdir.value.code == "not_a_directory"


def test_rename_moves_files_and_directories(box: Any) -> None:
    box.files.write("/home/user/src/f.txt", "x")
    moved = box.files.rename("/home/user/src/f.txt", "/home/user/g.txt")
    assert (moved.path, moved.name, moved.type, moved.size) == ("/home/user/g.txt", "g.txt", "file", 1)
    assert box.files.read_text("/home/user/g.txt") == "x" and not box.files.exists("/home/user/src/f.txt")
    assert box.files.rename("/home/user/src", "/home/user/dst").type == "dir"
    with pytest.raises(NotFoundError):
        box.files.rename("/home/user/missing", "/home/user/x")
    with pytest.raises(NotFoundError):
        box.files.rename("/home/user/g.txt", "/home/user/no/such/parent")
    with pytest.raises(SandboxError) as err:  # the user may not write in /etc
        box.files.rename("/home/user/g.txt", "/etc/g.txt")
    assert err.value.code == "permission_denied" and err.value.status_code == 403
    assert box.files.rename("/home/user/g.txt", "/etc/g.txt", user="root").owner == "user"


def test_remove_files_trees_and_links_but_never_a_links_target(box: Any) -> None:
    sh(box, "mkdir -p /home/user/tree/a/b && touch /home/user/tree/a/b/f /home/user/keep "
            "&& ln -s /home/user/keep /home/user/tree/to-keep && ln -s /home/user/keep /home/user/alias", user="user")
    box.files.remove("/home/user/tree")
    assert not box.files.exists("/home/user/tree") and box.files.exists("/home/user/keep")
    box.files.remove("/home/user/alias")
    assert not box.files.exists("/home/user/alias") and box.files.exists("/home/user/keep")
    with pytest.raises(NotFoundError) as nf:
        box.files.remove("/home/user/tree")
    assert nf.value.code == "file_not_found"


def test_the_box_user_has_only_its_own_rights_and_root_has_roots(box: Any) -> None:
    sh(box, "mkdir -p /srv/locked/sub && echo s > /srv/locked/secret && chmod 700 /srv/locked")
    calls: list[Callable[[], object]] = [
        lambda: box.files.list("/srv/locked"), lambda: box.files.get_info("/srv/locked/secret"),
        lambda: box.files.remove("/srv/locked/secret"), lambda: box.files.remove("/srv/locked"),
        lambda: box.files.make_dir("/root/mine"), lambda: box.files.make_dir("/srv/locked/mine"),
        lambda: box.files.rename("/srv/locked/secret", "/home/user/stolen")]
    for call in calls:
        with pytest.raises(SandboxError) as err:
            call()
        assert (err.value.code, err.value.status_code) == ("permission_denied", 403)
    assert sh(box, "ls /srv/locked").split() == ["secret", "sub"] and not box.files.exists("/root/mine", user="root")
    assert [e.name for e in box.files.list("/srv/locked", user="root")] == ["secret", "sub"]
    assert box.files.get_info("/srv/locked/secret", user="root").mode == 0o644
    assert box.files.make_dir("/root/mine", user="root") is True
    box.files.remove("/srv/locked", user="root")
    assert not box.files.exists("/srv/locked", user="root")


def test_links_the_box_user_planted_do_not_steer_root(box: Any) -> None:
    sh(box, "mkdir -p /root/private && touch /root/private/key && chmod 700 /root", user="root")
    sh(box, "ln -s /root /home/user/evil && ln -s /etc /home/user/etc-link && mkdir -p /home/user/real "
            "&& ln -s real /home/user/alias", user="user")
    calls: list[Callable[[], object]] = [
        lambda: box.files.list("/home/user/evil", user="root"),
        lambda: box.files.list("/home/user/evil/private", user="root"),
        lambda: box.files.get_info("/home/user/evil/private/key", user="root"),
        lambda: box.files.remove("/home/user/evil/private", user="root"),
        lambda: box.files.remove("/home/user/etc-link/hostname", user="root"),
        lambda: box.files.make_dir("/home/user/etc-link/planted", user="root"),
        lambda: box.files.rename("/home/user/evil/private/key", "/home/user/key", user="root"),
        lambda: box.files.rename("/home/user/real", "/home/user/etc-link/real", user="root"),
        lambda: box.files.list("/home/user/alias", user="root"),  # even a harmless one
    ]
    for call in calls:
        with pytest.raises(ValidationError) as err:
            call()
        assert err.value.code == "unsafe_path"
    assert sh(box, "ls /root/private && ls /etc/hostname && ls -d /home/user/real").split() == [
        "key", "/etc/hostname", "/home/user/real"]
    assert not box.files.exists("/etc/planted", user="root")
    # a link as the last name is acted on itself, never followed: removing it leaves its target
    box.files.remove("/home/user/evil", user="root")
    assert box.files.exists("/root/private/key", user="root")
    assert box.files.get_info("/home/user/etc-link", user="root").type == "symlink"
    # the user's own rights are not widened by its links: as the user, /root stays closed
    sh(box, "ln -s /root /home/user/evil2", user="user")
    with pytest.raises(SandboxError) as denied:
        box.files.list("/home/user/evil2")
    assert denied.value.code == "permission_denied"
    assert box.files.list("/lib", user="root")  # the template's own links are followed: /lib -> usr/lib


def test_a_link_swapped_in_mid_walk_never_leads_root_out(box: Any) -> None:
    """A user flipping a directory and a link under the same name as fast as it can: root's calls
    either act inside the real directory or fail, and never touch /root."""
    sh(box, "mkdir -p /root/target && touch /root/target/victim && mkdir -p /home/user/flip/d", user="root")
    sh(box, "chown -R user:user /home/user/flip")
    flipper = box.commands.spawn("cd /home/user/flip && while true; do mv d d.real && ln -s /root/target d; "
                                 "rm d && mv d.real d; done", user="user")
    calls: list[Callable[[], object]] = [  # none makes a directory: a root-owned d would jam the flipping
        lambda: box.files.remove("/home/user/flip/d/victim", user="root"),
        lambda: box.files.rename("/home/user/flip/d/victim", "/home/user/stolen", user="root"),
        lambda: box.files.get_info("/home/user/flip/d/victim", user="root"),
        lambda: box.files.list("/home/user/flip/d", user="root")]
    seen: set[str] = set()
    for _ in range(30):
        for call in calls:
            try:
                call()
                seen.add("ok")
            except SandboxError as e:
                assert e.code in ("unsafe_path", "file_not_found", "not_a_directory", "io_error",
                                  "already_exists"), e
                seen.add(e.code)
    assert "unsafe_path" in seen, seen  # the race was run: some walks met the link
    flipper.kill(9)
    flipper.close()
    assert sh(box, "ls /root/target").split() == ["victim"] and not box.files.exists("/home/user/stolen")


def _watch(box: Any, path: str, recursive: bool = False) -> tuple[list[FilesystemEvent], threading.Event]:
    """Watch, reading the events into a list on a thread (or the async SDK's loop) until the watch ends."""
    handle = box.files.watch_dir(path, recursive=recursive)
    events: list[FilesystemEvent] = []
    done = threading.Event()
    if isinstance(handle, AsyncWatchHandle):
        async def read() -> None:
            try:
                async for ev in handle:
                    events.append(ev)
            finally:
                done.set()
        asyncio.run_coroutine_threadsafe(read(), box.files._loop.loop)
    else:
        def run() -> None:
            try:
                for ev in handle:
                    events.append(ev)
            finally:
                done.set()
        threading.Thread(target=run, daemon=True).start()
    return events, done


def _seen(events: list[FilesystemEvent], name: str, kind: str) -> Callable[[], bool]:
    return lambda: any(e.name == name and e.type == kind for e in events)


def test_watch_dir_sees_create_write_remove_rename_and_chmod(box: Any) -> None:
    box.files.make_dir("/home/user/w")
    events, done = _watch(box, "/home/user/w")
    sh(box, "cd /home/user/w && echo a > f && echo more >> f && chmod 600 f && mv f g && rm g && mkdir sub",
       user="user")
    for name, kind in (("f", "create"), ("f", "write"), ("f", "chmod"), ("f", "rename"), ("g", "create"),
                       ("g", "remove"), ("sub", "create")):
        wait_for(_seen(events, name, kind), what=f"{kind} {name} in {events}")
    sh(box, "touch /home/user/w/sub/inner", user="user")  # not recursive: not seen
    box.files.remove("/home/user/w")  # the watched directory goes: the watch ends
    assert done.wait(20), "the watch did not end with its directory"
    assert not any(e.name.startswith("sub/") for e in events)


def test_a_write_is_watched_as_the_files_own(box: Any) -> None:
    """files.write lands whole (a temp file renamed over the target), and a watch sees what E2B's
    envd shows: create (if new), chmod, write of the file itself, nothing of the temp file."""
    box.files.make_dir("/home/user/ww")
    box.files.write("/home/user/ww/old.txt", "before")
    events, _done = _watch(box, "/home/user/ww")
    box.files.write("/home/user/ww/old.txt", "after")
    box.files.write("/home/user/ww/new.txt", "fresh")
    wait_for(_seen(events, "new.txt", "write"), what=f"write new.txt in {events}")
    assert [(e.name, e.type) for e in events] == [("old.txt", "chmod"), ("old.txt", "write"), ("new.txt", "create"),
                                                  ("new.txt", "chmod"), ("new.txt", "write")]
    assert box.files.read("/home/user/ww/old.txt") == b"after"


def test_watch_dir_recursive_follows_new_subdirectories(box: Any) -> None:
    sh(box, "mkdir -p /home/user/r/old", user="user")
    events, done = _watch(box, "/home/user/r", recursive=True)
    sh(box, "touch /home/user/r/old/a && mkdir /home/user/r/new", user="user")
    wait_for(_seen(events, "new", "create"), what="the new subdirectory")  # watched before it is sent
    sh(box, "mkdir -p /home/user/r/new/deeper/still && echo x > /home/user/r/new/deeper/f", user="user")
    # what a new directory held before its watch was added is reported as created
    for name, kind in (("old/a", "create"), ("new/deeper", "create"), ("new/deeper/f", "create"),
                       ("new/deeper/still", "create")):
        wait_for(_seen(events, name, kind), what=f"{kind} {name} in {events}")
    sh(box, "echo y >> /home/user/r/new/deeper/f && touch /home/user/r/new/deeper/still/g", user="user")
    for name, kind in (("new/deeper/f", "write"), ("new/deeper/still/g", "create")):
        wait_for(_seen(events, name, kind), what=f"{kind} {name} in {events}")
    box.files.remove("/home/user/r")
    assert done.wait(20)


def test_watch_errors_and_links(box: Any) -> None:
    with pytest.raises(NotFoundError):
        box.files.watch_dir("/home/user/none")
    box.files.write("/home/user/plain", "x")
    with pytest.raises(ValidationError) as notdir:
        box.files.watch_dir("/home/user/plain")
    assert notdir.value.code == "not_a_directory"
    sh(box, "ln -s /root /home/user/evil", user="user")
    with pytest.raises(ValidationError) as unsafe:
        box.files.watch_dir("/home/user/evil")
    assert unsafe.value.code == "unsafe_path"


# --- the raw routes: error codes, audit rows, never a 500 -------------------------------------------

@pytest.fixture
def raw(env: Env) -> Iterator[tuple[httpx.Client, str]]:
    """A sandbox's data plane through plain HTTP, and the sandbox's id."""
    auth = {"Authorization": f"Bearer {env.key_a}"}
    r = httpx.post(f"{env.url}/v1/sandboxes", json={"name": "fs-raw"}, headers=auth, timeout=120)
    assert r.status_code in (200, 201), r.text
    d = r.json()
    with httpx.Client(base_url=d["data_plane_url"], headers={"X-Access-Token": d["access_token"]}, timeout=60) as c:
        yield c, d["id"]
    httpx.delete(f"{env.url}/v1/sandboxes/{d['id']}", headers=auth, timeout=60)


def test_routes_answer_stable_codes_and_never_500(raw: tuple[httpx.Client, str], env: Env) -> None:
    client, sandbox_id = raw
    ok = client.post("/files/mkdir", json={"path": "/home/user/d"})
    assert ok.status_code == 200 and ok.json()["created"] is True and ok.json()["entry"]["owner"] == "user"
    assert client.put("/files", params={"path": "/home/user/f"}, content=b"x").status_code == 200
    cases: list[tuple[str, str, dict[str, Any], int, str]] = [
        ("GET", "/files/stat", {"params": {"path": "/nope"}}, 404, "file_not_found"),
        ("GET", "/files/list", {"params": {"path": "/home/user/f"}}, 400, "not_a_directory"),
        ("GET", "/files/list", {"params": {"path": "/home/user", "depth": 0}}, 400, "invalid_request"),
        ("GET", "/files/list", {"params": {"path": "relative"}}, 400, "invalid_path"),
        ("GET", "/files/stat", {"params": {"path": "/a/../b"}}, 400, "invalid_path"),
        ("GET", "/files/stat", {"params": {"path": "/home/user", "user": "nobody"}}, 400, "invalid_request"),
        ("POST", "/files/mkdir", {"json": {"path": "/home/user/f"}}, 409, "already_exists"),
        ("POST", "/files/mkdir", {"json": {"path": "/root/x"}}, 403, "permission_denied"),
        ("POST", "/files/mkdir", {"json": {"path": 5}}, 400, "invalid_request"),
        ("POST", "/files/move", {"json": {"source": "/nope", "destination": "/home/user/x"}}, 404, "file_not_found"),
        ("POST", "/files/move", {"json": {"source": "/home/user/d", "destination": "/home/user/f"}}, 400,
         "not_a_directory"),
        ("POST", "/files/move", {"json": {"source": "/", "destination": "/x", "user": "root"}}, 400, "is_a_directory"),
        ("DELETE", "/files", {"params": {"path": "/nope"}}, 404, "file_not_found"),
        ("DELETE", "/files", {"params": {"path": "/", "user": "root"}}, 400, "is_a_directory"),
        ("GET", "/files/watch", {"params": {"path": "/nope"}}, 404, "file_not_found"),
    ]
    for method, route, kwargs, status, code in cases:
        r = client.request(method, route, **kwargs)
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), (method, route, kwargs, r.text)
    entries = client.get("/files/list", params={"path": "/home/user"}).json()["entries"]
    mine = [e for e in entries if not e["name"].startswith(".")]  # the template's dotfiles are there too
    assert [e["name"] for e in mine] == ["d", "f"] and mine[1]["permissions"] == "-rw-r--r--"
    assert client.post("/files/move", json={"source": "/home/user/f", "destination": "/home/user/g"}).json()["name"] == "g"
    assert client.delete("/files", params={"path": "/home/user/g"}).status_code == 204
    audit = httpx.get(f"{env.url}/v1/sandboxes/{sandbox_id}/audit", headers={"Authorization": f"Bearer {env.key_a}"})
    rows = [(e["op"], e["detail"], e["outcome"]) for e in audit.json()["entries"]]
    assert ("file_remove", "/home/user/g", "ok") in rows
    assert ("file_move", "/home/user/f -> /home/user/g", "ok") in rows
    assert ("dir_make", "/home/user/d", "ok") in rows and ("dir_make", "/root/x", "permission_denied") in rows
    assert ("file_remove", "/nope", "file_not_found") in rows


def test_the_watch_route_is_server_sent_events(raw: tuple[httpx.Client, str]) -> None:
    client = raw[0]
    client.post("/files/mkdir", json={"path": "/home/user/sse"})
    with client.stream("GET", "/files/watch", params={"path": "/home/user/sse"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = r.iter_lines()
        assert next(lines) == ": watching"
        assert client.put("/files", params={"path": "/home/user/sse/x"}, content=b"1").status_code == 200
        data = next(line for line in lines if line.startswith("data:"))
        assert data.startswith("data: {") and '"name":"' in data
