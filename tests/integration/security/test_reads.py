"""Reads act as the box user unless user="root", like writes: a link the user planted to a file
only root may read gives the user nothing, through `files.read` and the zip download alike."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hutch import AuthenticationError, Sandbox
from hutch.guest import protocol
from tests.integration.support import Env

SECRET = "root only\n"


@pytest.fixture
def planted() -> Iterator[Sandbox]:
    """A box whose root keeps a secret (0600 in 0700 /root, and 0600 in a directory the user
    reads) and whose user has planted links to both in their home."""
    box = Sandbox.create(name="reads")
    try:
        r = box.commands.run(f"printf '{SECRET}' > /root/secret && chmod 600 /root/secret && mkdir -p /srv/open"
                             f" && printf '{SECRET}' > /srv/open/secret && chmod 600 /srv/open/secret && echo ok",
                             user="root")
        assert r.stdout == "ok\n", r.stderr
        r = box.commands.run("mkdir -p ~/tree/sub && echo mine > ~/tree/mine.txt && echo deep > ~/tree/sub/deep.txt"
                             " && ln -s /root/secret ~/leak && ln -s /srv/open/secret ~/tree/leak2"
                             " && ln -s /root ~/tree/rootdir && ln -s /root ~/rootdir && echo ok")
        assert r.stdout == "ok\n", r.stderr
        yield box
    finally:
        box.kill()


def _denied(read: Any) -> None:
    with pytest.raises(AuthenticationError) as err:
        read()
    assert err.value.status_code == 403 and err.value.code == "permission_denied", err.value


def test_the_user_reads_what_the_user_may_and_nothing_else(planted: Sandbox) -> None:
    assert planted.files.read_text("/home/user/tree/mine.txt") == "mine\n"
    assert planted.files.read_text("/etc/hostname") is not None  # readable by all, root's own file
    for path in ("/home/user/leak", "/home/user/tree/leak2", "/root/secret", "/srv/open/secret",
                 "/home/user/rootdir/secret"):
        _denied(lambda path=path: planted.files.read(path))


def test_the_zip_download_is_the_users_view(planted: Sandbox) -> None:
    archive = zipfile.ZipFile(io.BytesIO(planted.files.download_dir("/home/user/tree")))
    names = set(archive.namelist())
    assert {"mine.txt", "sub/deep.txt"} <= names and archive.read("mine.txt") == b"mine\n"
    assert not names & {"leak2", "rootdir", "rootdir/secret"}
    assert SECRET.encode() not in b"".join(archive.read(n) for n in names)
    for path in ("/root", "/home/user/rootdir"):
        _denied(lambda path=path: planted.files.download_dir(path))


def _agent(env: Env, box: Sandbox) -> httpx.Client:
    """The box's agent itself, on its channel socket (as the node talks to it)."""
    sock = env.server.box_dir(box.id) / "chan" / protocol.SOCKET_NAME
    assert Path(sock).is_socket()
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://agent", timeout=30)


def test_the_agent_reads_as_the_user_by_default_and_as_root_when_asked(planted: Sandbox, env: Env) -> None:
    with _agent(env, planted) as agent:
        for route in (protocol.FILES, protocol.DIR_ZIP):
            path = "/home/user/leak" if route == protocol.FILES else "/root"
            for params in ({"path": path}, {"path": path, "user": "user"}):
                r = agent.get(route, params=params)
                assert r.status_code == 403 and r.json()["code"] == protocol.ERR_PERMISSION, (route, params, r.text)
        assert agent.get(protocol.FILES, params={"path": "/root/secret", "user": "root"}).text == SECRET
        zipped = agent.get(protocol.DIR_ZIP, params={"path": "/root", "user": "root"})
        assert zipfile.ZipFile(io.BytesIO(zipped.content)).read("secret") == SECRET.encode()
        # root walks only root's links: the user's link does not steer root's read
        r = agent.get(protocol.FILES, params={"path": "/home/user/leak", "user": "root"})
        assert r.status_code == 400 and r.json()["code"] == protocol.ERR_UNSAFE_PATH
        r = agent.get(protocol.DIR_ZIP, params={"path": "/home/user/rootdir", "user": "root"})
        assert r.status_code == 400 and r.json()["code"] == protocol.ERR_UNSAFE_PATH
        # root's own links are followed (/etc/os-release -> ../usr/lib/os-release)
        assert "Debian" in agent.get(protocol.FILES, params={"path": "/etc/os-release", "user": "root"}).text
        # anything but "root" is the box user, as for writes
        assert agent.get(protocol.FILES, params={"path": "/root/secret", "user": "ROOT"}).status_code == 403


def test_roots_reads_are_not_steered_by_links_swapped_in_meanwhile(planted: Sandbox, env: Env) -> None:
    """The user flips ~/flip between a directory (holding a decoy `secret`) and a link to /root
    while root reads ~/flip/secret and zips ~/flip's parent: root's walk never follows it."""
    # made before the flipping starts: a zip of ~/z asked before it exists is a 404, not the race
    planted.commands.run("mkdir -p ~/decoy ~/z && echo decoy > ~/decoy/secret")
    flip = "while true; do rm -rf ~/z/flip; ln -s /root ~/z/flip; rm -f ~/z/flip; cp -r ~/decoy ~/z/flip; done"
    proc = planted.commands.spawn(flip)
    try:
        with _agent(env, planted) as agent:
            for _ in range(30):
                read = agent.get(protocol.FILES, params={"path": "/home/user/z/flip/secret", "user": "root"})
                assert read.status_code in (200, 400, 404) and SECRET not in read.text
                zipped = agent.get(protocol.DIR_ZIP, params={"path": "/home/user/z", "user": "root"})
                archive = zipfile.ZipFile(io.BytesIO(zipped.content))
                assert all(SECRET.encode() not in archive.read(n) for n in archive.namelist())
    finally:
        proc.kill(9)
        proc.close()


def test_root_reads_through_the_api_when_the_host_passes_user_on(planted: Sandbox) -> None:
    files = planted.files
    assert files.read("/root/secret", user="root") == SECRET.encode()
    assert zipfile.ZipFile(io.BytesIO(files.download_dir("/root", user="root"))).read("secret") == SECRET.encode()
    _denied(lambda: files.read("/root/secret"))
