"""Volumes: storage that outlives boxes, mounted by many boxes at once, with files calls that need
no box; its size cap, its use by pauses and forks, its quotas, and a box's root planting links,
FIFOs and devices against the host's side of it."""

from __future__ import annotations

import asyncio
import os
import secrets as random
import stat
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from hutch import (
    AsyncVolume,
    ConflictError,
    NotFoundError,
    RateLimitError,
    ServerError,
    Snapshot,
    ValidationError,
    Volume,
)
from hutch.node import base_image
from hutch.sdk.codes import ServerCode
from hutch.services.config import DEFAULT_CACHE_DIR
from tests.integration.support import Env, make_server, retire, wait_for


def _name(prefix: str = "vol") -> str:
    return f"{prefix}-{random.token_hex(4)}"


@pytest.fixture
def make_volume() -> Iterator[Callable[..., Volume]]:
    made: list[Volume] = []

    def make(**kwargs: Any) -> Volume:
        vol = Volume.create(kwargs.pop("name", None) or _name(), **kwargs)
        made.append(vol)
        return vol

    yield make
    for vol in made:
        try:
            vol.delete()
        except NotFoundError:
            pass


def test_two_boxes_and_the_files_api_see_each_others_closed_files(make_volume: Any, make_box: Any) -> None:
    vol = make_volume(size_mib=64, metadata={"kind": "shared"})
    assert vol.size_mib == 64 and vol.metadata == {"kind": "shared"}
    a = make_box(volumes={"/mnt/data": vol})
    b = make_box(volumes={"/srv/shared": vol.name})
    assert [(m.path, m.volume_id, m.read_only) for m in a.get_info().volumes] == [("/mnt/data", vol.id, False)]
    assert set(Volume.get(vol.name).info.mounted_by) == {a.id, b.id}

    # a box writes a 3 MiB file and closes it; the other opens it whole
    assert a.commands.run("head -c 3145728 /dev/urandom > /mnt/data/blob && sha256sum /mnt/data/blob | cut -c1-64 "
                          "> /mnt/data/blob.sum").exit_code == 0
    seen = b.commands.run("sha256sum /srv/shared/blob | cut -c1-64; cat /srv/shared/blob.sum").stdout.split()
    assert len(seen) == 2 and seen[0] == seen[1]
    # files written in a box belong to its user, and the API reads them without any box
    assert len(vol.files.read("/blob")) == 3 * 2**20
    assert vol.files.read_text("/blob.sum").strip() == seen[0]
    # the API writes, both boxes read; the file is the box user's
    vol.files.write("/from-api/note.txt", "written with no box")
    assert a.commands.run("cat /mnt/data/from-api/note.txt").stdout == "written with no box"
    assert b.commands.run("stat -c %U /srv/shared/from-api/note.txt").stdout.strip() == "user"
    assert b.commands.run("echo more >> /srv/shared/from-api/note.txt").exit_code == 0, "the box user may change it"
    # files calls in the shapes of a sandbox's
    names = [(e.path, e.type) for e in vol.files.list("/", depth=2)]
    assert ("/blob", "file") in names and ("/from-api", "dir") in names and ("/from-api/note.txt", "file") in names
    assert vol.files.exists("/blob") and not vol.files.exists("/nothing")
    assert vol.files.make_dir("/d/e") is True and vol.files.make_dir("/d/e") is False
    assert vol.files.rename("/blob.sum", "/d/e/sum").path == "/d/e/sum"
    assert a.commands.run("test -f /mnt/data/d/e/sum").exit_code == 0
    vol.files.remove("/d")
    assert not vol.files.exists("/d/e/sum")
    assert b.commands.run("test -e /srv/shared/d").exit_code == 1
    with pytest.raises(NotFoundError) as e:
        vol.files.read("/d/e/sum")
    assert e.value.code == ServerCode.FILE_NOT_FOUND
    used = Volume.get(vol.id).info.used_bytes
    assert used is not None and used >= 3 * 2**20


def test_async_volume_calls_mirror_the_blocking_ones() -> None:
    async def go() -> None:
        vol = await AsyncVolume.create(_name("async"), size_mib=32)
        try:
            await vol.files.write("/a/b.txt", b"bytes")
            assert await vol.files.read("/a/b.txt") == b"bytes"
            assert [e.name for e in await vol.files.list("/a")] == ["b.txt"]
            assert (await vol.files.get_info("/a")).type == "dir"
            assert [v.id for v in await AsyncVolume.list() if v.id == vol.id] == [vol.id]
            info = await vol.update_metadata({"k": "v"})
            assert info.metadata == {"k": "v"}
        finally:
            await vol.delete()
        with pytest.raises(NotFoundError):
            await AsyncVolume.get(vol.id)

    asyncio.run(go())


def test_a_volume_outlives_its_boxes_and_is_mounted_read_only_where_asked(sdk: Any, make_volume: Any) -> None:
    vol = make_volume(size_mib=32)
    first = sdk.create(name="writer", volumes={"/work": vol})
    first.commands.run("echo kept > /work/state")
    first.kill()
    ro = sdk.create(name="reader", volumes={"/work": {"volume": vol, "read_only": True}})
    try:
        assert ro.commands.run("cat /work/state").stdout == "kept\n"
        r = ro.commands.run("echo x > /work/other", user="root")
        assert r.exit_code != 0 and "Read-only" in r.stderr
        assert ro.get_info().volumes[0].read_only is True
    finally:
        ro.kill()


def test_a_full_volume_is_enospc_in_the_box_and_insufficient_storage_through_the_api(make_volume: Any,
                                                                                     make_box: Any) -> None:
    vol = make_volume(size_mib=16)
    box = make_box(volumes={"/v": vol})
    r = box.commands.run("head -c 67108864 /dev/zero > /v/big; echo rc=$?", user="root")
    assert "No space left on device" in r.stderr and "rc=1" in r.stdout
    assert box.commands.run("echo still running").stdout == "still running\n", "the box runs on"
    used = Volume.get(vol.id).info.used_bytes
    assert used is not None and used <= 16 * 2**20
    with pytest.raises(ServerError) as e:
        vol.files.write("/more", b"x" * (20 * 2**20))
    assert e.value.code == ServerCode.INSUFFICIENT_STORAGE
    assert not vol.files.exists("/more"), "a failed write leaves nothing"
    box.commands.run("rm /v/big")
    vol.files.write("/more", b"x" * (4 * 2**20))  # room again once the box freed it


def test_a_mounted_volume_is_not_deleted_until_no_live_box_mounts_it(sdk: Any, make_volume: Any) -> None:
    vol = make_volume(size_mib=16)
    box = sdk.create(name="holder", volumes={"/v": vol})
    try:
        box.pause()
        with pytest.raises(ConflictError) as e:
            vol.delete()
        assert e.value.code == ServerCode.VOLUME_IN_USE
        box.resume()
        with pytest.raises(ConflictError):
            Volume.delete_by_id(vol.name)
    finally:
        box.kill()
    vol.delete()
    with pytest.raises(NotFoundError) as nf:
        Volume.get(vol.name)
    assert nf.value.code == ServerCode.VOLUME_NOT_FOUND
    with pytest.raises(NotFoundError):
        sdk.create(name="late", volumes={"/v": vol.id})


def test_a_process_holding_a_volume_file_goes_on_across_a_pause_and_forks_share_the_live_volume(
        sdk: Any, make_volume: Any) -> None:
    vol = make_volume(size_mib=32)
    box = sdk.create(name="paused", volumes={"/data": vol})
    forks: list[Any] = []
    try:
        box.commands.run("sh -c 'exec 3>>/data/log; while :; do echo tick >&3; sleep 0.1; done' "
                         ">/dev/null 2>&1 &")

        def lines() -> int:
            return vol.files.read_text("/log").count("tick") if vol.files.exists("/log") else 0

        wait_for(lambda: lines() > 3, what="the writer to start")
        box.pause()
        paused_at = lines()
        box.resume()
        wait_for(lambda: lines() > paused_at + 3, what="the writer to go on after the resume, through its open file")
        assert [m.path for m in box.get_info().volumes] == ["/data"]

        forks = box.fork(1)
        forks[0].commands.run("echo from-fork > /data/fork.txt")
        assert vol.files.read_text("/fork.txt") == "from-fork\n"
        assert box.commands.run("cat /data/fork.txt").stdout == "from-fork\n", "a fork shares the live volume"
        with pytest.raises(ValidationError):
            box.fork(1, volumes={"/elsewhere": vol})  # a restore needs a volume where the box had one
    finally:
        for f in forks:
            f.kill()
        box.kill()


def test_mount_paths_and_other_teams_volumes_are_refused_with_nothing_made(env: Env, sdk: Any,
                                                                          make_volume: Any) -> None:
    vol = make_volume(size_mib=16)
    before = {b.id for b in sdk.list()}
    for path in ("/", "/proc", "/proc/x", "/dev/shm", "/sys/fs", "/.hutch/chan", "relative", "/a/../b", "/a/",
                 "/etc/ssl/certs/ca-certificates.crt", "/data[12]", "/x*"):
        with pytest.raises(ValidationError):
            sdk.create(name="bad", volumes={path: vol})
    with pytest.raises(ValidationError):
        sdk.create(name="nested", volumes={"/a": vol, "/a/b": vol})
    with pytest.raises(NotFoundError) as e:
        sdk.create(name="missing", volumes={"/a": "no-such-volume"})
    assert e.value.code == ServerCode.VOLUME_NOT_FOUND
    # another team's volume is a 404 by name and by id, for every call
    theirs = Volume.create(_name("theirs"), size_mib=16, api_key=env.key_b)
    try:
        for ref in (theirs.id, theirs.name):
            with pytest.raises(NotFoundError):
                Volume.get(ref)
            with pytest.raises(NotFoundError):
                sdk.create(name="steal", volumes={"/x": ref})
            with pytest.raises(NotFoundError):
                Volume.delete_by_id(ref)
        r = httpx.get(f"{env.url}/v1/volumes/{theirs.id}/files", params={"path": "/"},
                      headers={"Authorization": f"Bearer {env.key_a}"})
        assert r.status_code == 404
    finally:
        theirs.delete()
    with pytest.raises(ConflictError) as c:
        Volume.create(vol.name)
    assert c.value.code == ServerCode.VOLUME_EXISTS
    for bad in ("", "a/b", "x" * 200, "-lead"):
        with pytest.raises(ValidationError):
            Volume.create(bad)
    assert {b.id for b in sdk.list()} == before, "no refused create left a box"


def test_what_a_box_root_plants_in_a_volume_is_never_followed_or_opened_by_the_host(env: Env, make_volume: Any,
                                                                                   make_box: Any) -> None:
    vol = make_volume(size_mib=128)  # room for the 10,050 entries below
    box = make_box(volumes={"/v": vol})
    plant = ("cd /v && ln -s /etc/hostname hostlink && ln -s / rootlink && mkdir -p real && ln -s /etc linkdir "
             "&& python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.bind('/v/sock')\" && echo planted; "
             "mknod /v/null c 1 3 || echo refused")
    out = box.commands.run(plant, user="root").stdout
    assert "planted" in out and "refused" in out, "gVisor makes no device node on a volume"
    # gVisor keeps a box's FIFOs in the sandbox; any other writer of the filesystem could leave one,
    # and a device node: made here on the host, where the box's root cannot
    data = env.server.data_dir / "volumes" / vol.id / "data"
    os.mkfifo(data / "fifo")
    os.mknod(data / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    for path in ("/hostlink", "/rootlink/etc/hostname", "/linkdir/hostname"):
        with pytest.raises(ValidationError) as e:
            vol.files.read(path)
        assert e.value.code == ServerCode.UNSAFE_PATH
    for special in ("/fifo", "/null", "/sock"):
        with pytest.raises(ValidationError) as e:
            vol.files.read(special)
        assert e.value.code == ServerCode.NOT_A_REGULAR_FILE
    # a FIFO opened by the host would block for ever: the test's own timeout is the bound
    with pytest.raises(ValidationError):
        vol.files.write("/rootlink/tmp/escaped", "x")  # a write through a link: refused
    vol.files.write("/hostlink", "replaced")  # a write over a link replaces the link, never what it names
    assert box.commands.run("cat /etc/hostname").stdout.strip() != "replaced"
    assert vol.files.get_info("/hostlink").type == "file"
    box.commands.run("touch /v/$(printf 'bad\\377name')", user="root")  # a name that is not UTF-8
    entries = {e.name: e for e in vol.files.list("/")}
    assert "bad\ufffdname" in entries, "shown with U+FFFD, not a 500"
    assert entries["linkdir"].type == "symlink" and entries["linkdir"].symlink_target == "/etc"
    assert entries["fifo"].type == "other" and entries["sock"].type == "other"
    # removing a link to the root removes the link, never what it points at
    vol.files.remove("/rootlink")
    assert box.commands.run("test -f /etc/hostname").exit_code == 0
    with pytest.raises(ValidationError):
        vol.files.remove("/")
    # a deep tree is listed within bounds
    box.commands.run("cd /v && mkdir -p wide && cd wide && seq 1 10050 | xargs touch", user="root")
    with pytest.raises(ValidationError) as e:
        vol.files.list("/wide")
    assert e.value.code == ServerCode.TOO_MANY_ENTRIES
    vol.files.remove("/wide")
    assert not vol.files.exists("/wide")


def test_volume_quotas_are_typed_refusals(tmp_path_factory: pytest.TempPathFactory) -> None:
    server = make_server("--warm-pool", "0", "--team-max-volumes", "2", "--team-max-volume-size", "80M")
    server.start()
    try:
        key = server.admin_key()
        a = Volume.create("a", size_mib=32, api_key=key, base_url=server.url)
        Volume.create("b", size_mib=32, api_key=key, base_url=server.url)
        with pytest.raises(RateLimitError) as e:
            Volume.create("c", size_mib=16, api_key=key, base_url=server.url)
        assert e.value.code == ServerCode.TOO_MANY_VOLUMES
        a.delete()
        with pytest.raises(RateLimitError) as e:
            Volume.create("c", size_mib=64, api_key=key, base_url=server.url)  # 32 + 64 > 80
        assert e.value.code == ServerCode.TOO_MANY_VOLUMES
        c = Volume.create("c", size_mib=48, api_key=key, base_url=server.url)
        c.files.write("/kept", "across a restart")
        server.stop()
        server.start()
        assert Volume.get("c", api_key=key, base_url=server.url).files.read_text("/kept") == "across a restart"
    finally:
        retire(server)


def test_an_e2b_volume_token_opens_its_own_volume_only(env: Env, make_volume: Any) -> None:
    a, b = make_volume(size_mib=16), make_volume(size_mib=16)
    a.files.write("/secret", "a's")
    api = f"{env.url}/e2b"
    key = {"X-API-KEY": env.server.e2b_key()}
    token_a = httpx.get(f"{api}/volumes/{a.id}", headers=key).json()["token"]
    assert httpx.get(f"{api}/volumes/{b.id}", headers=key).json()["token"] != token_a
    bearer = {"Authorization": f"Bearer {token_a}"}
    assert httpx.get(f"{api}/volumecontent/{a.id}/file", params={"path": "/secret"}, headers=bearer).text == "a's"
    for headers in (bearer, {}, {"Authorization": "Bearer x"}, key):
        r = httpx.get(f"{api}/volumecontent/{b.id}/dir", params={"path": "/"}, headers=headers)
        assert r.status_code == 401 and r.json()["code"] == 401
    r = httpx.put(f"{api}/volumecontent/{a.id}/file", params={"path": "/../escape"}, headers=bearer, content=b"x")
    assert r.status_code == 400


def test_a_files_only_pause_and_snapshot_leave_a_mounted_volume_alone(sdk: Any, make_volume: Any) -> None:
    vol = make_volume(size_mib=32)
    # the template has files under /home/user: mounted over, they are not the box's to save or remove
    for name in (".bashrc", ".profile", "mine.txt"):
        vol.files.write(f"/{name}", f"the volume's {name}")
    box = sdk.create(name="files-only", volumes={"/home/user": vol})
    try:
        box.commands.run("echo own > /opt/own.txt", user="root")
        box.pause(memory=False)
        vol.files.write("/while-paused.txt", "written meanwhile")
        box.resume()
        assert box.commands.run("cat /opt/own.txt").stdout == "own\n", "the box's own files came back"
        for name in (".bashrc", ".profile", "mine.txt"):
            assert vol.files.read_text(f"/{name}") == f"the volume's {name}", f"{name} left alone"
        assert box.commands.run("cat /home/user/while-paused.txt").stdout == "written meanwhile"
        snap = box.snapshot(memory=False)
        try:
            [copy] = sdk.from_snapshot(snap.id, 1)
            try:
                assert copy.commands.run("cat /home/user/mine.txt /opt/own.txt").stdout == "the volume's mine.txtown\n"
            finally:
                copy.kill()
        finally:
            Snapshot.get(snap.id).delete()
    finally:
        box.kill()


def test_a_box_with_volumes_never_writes_the_template_root(make_volume: Any, make_box: Any) -> None:
    """runsc's gofer makes a bind mount's mount point in the root it is given: a box with volumes
    gets an overlay of the template's root, so the shared root never gains the mount point."""
    root = base_image.base_root_path(DEFAULT_CACHE_DIR)
    probe = f"probe-{random.token_hex(4)}"
    vol = make_volume(size_mib=16)
    box = make_box(volumes={f"/mnt/{probe}/deep": vol})
    assert box.commands.run(f"touch /mnt/{probe}/deep/x && ls /mnt/{probe}").stdout == "deep\n"
    assert not (root / "mnt" / probe).exists(), "the template's root was written"
