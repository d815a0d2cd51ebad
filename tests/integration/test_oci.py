"""OCI image import alone (hutch.templates.oci), as root with umoci and skopeo: no server, no boxes, no
traffic off this machine. How a source string parses is a unit test (tests/unit/test_oci_source.py)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from hutch.guest import protocol
from hutch.templates import oci
from tests.integration.oci_image import (
    DEVICES,
    FIFO,
    IMAGE_ENV,
    IMAGE_WORKDIR,
    OWNED,
    REMOVED,
    Format,
    make_busybox_image,
    needs_image_tools,
)


@pytest.fixture(autouse=True)
def _client_config() -> None:
    """Overrides conftest's fixture of the same name, which starts a server these tests do not need."""


@pytest.fixture(autouse=True)
def _image_tools() -> None:
    if os.geteuid() != 0:
        pytest.skip("an import keeps the image's owners, which needs root")
    needs_image_tools()


def _import(tmp_path: Path, source: str, **kw: object) -> tuple[Path, oci.ImageConfig, list[str]]:
    parsed = oci.parse_source(source)
    assert parsed is not None
    lines: list[str] = []
    root = tmp_path / "roots" / "r"
    config = oci.import_image(parsed, root, tmp_path / "work", lines.append, **kw)  # type: ignore[arg-type]
    return root, config, lines


@pytest.mark.parametrize("fmt", ["docker-archive", "oci-archive", "oci"])
def test_each_local_format_unpacks_with_its_whiteouts_and_config(tmp_path: Path, fmt: Format) -> None:
    source = make_busybox_image(tmp_path / "image", fmt)
    root, config, lines = _import(tmp_path, source)

    assert (root / "etc/hello").read_text() == "hello from the image\n"
    assert not (root / REMOVED.lstrip("/")).exists()  # the second layer's whiteout was applied
    assert not any(p.name.startswith(".wh.") for p in (root / "etc").iterdir())
    assert os.readlink(root / "bin/sh") == "/bin/busybox"
    assert (root / "home/user").stat().st_uid == 1000  # owners kept from the image
    assert config.env == IMAGE_ENV and config.workdir == IMAGE_WORKDIR and config.user is None
    assert config.digest == oci.image_digest(oci.parse_source(source), tmp_path / "work")  # type: ignore[arg-type]
    for path, mode in oci.MOUNT_POINTS:
        st = (root / path.lstrip("/")).lstat()
        assert (st.st_mode & 0o7777, st.st_uid) == (mode, 0), path
    assert any("Copying blob" in line for line in lines)
    assert list((tmp_path / "work").iterdir()) == []  # the layout and temporary files are gone
    assert list((tmp_path / "roots").iterdir()) == [root]  # no .partial left beside it


def test_the_same_image_in_every_format_has_one_digest(tmp_path: Path) -> None:
    layout = make_busybox_image(tmp_path, "oci")
    sources = [layout, f"docker-archive:{tmp_path}/d.tar", f"oci-archive:{tmp_path}/o.tar"]
    for dest in sources[1:]:
        subprocess.run(["skopeo", "copy", "--quiet", layout, dest], check=True)
    digests = {oci.image_digest(oci.parse_source(s), tmp_path / "work") for s in sources}  # type: ignore[arg-type]
    assert len(digests) == 1
    assert oci.cache_key(digests.pop()).startswith("oci-")


def test_zstd_layers_are_recompressed_for_umoci(tmp_path: Path) -> None:
    layout = make_busybox_image(tmp_path, "oci")
    subprocess.run(["skopeo", "copy", "--quiet", "--dest-compress-format", "zstd", layout, f"oci:{tmp_path}/zstd:z"], check=True)
    root, config, lines = _import(tmp_path, f"oci:{tmp_path}/zstd:z")
    assert (root / "etc/hello").exists() and not (root / REMOVED.lstrip("/")).exists()
    assert any("zstd" in line for line in lines) and config.env == IMAGE_ENV


@pytest.mark.parametrize("source", ["docker-archive:{d}/none.tar", "oci-archive:{d}/none.tar", "oci:{d}/none",
                                    "oci:{d}/image/layout:no-such-tag", "docker-archive:{d}/not-an-image.tar"])
def test_a_missing_or_unreadable_image_is_image_not_found(tmp_path: Path, source: str) -> None:
    make_busybox_image(tmp_path / "image", "oci")
    (tmp_path / "not-an-image.tar").write_text("hello\n")
    with pytest.raises(oci.ImageError) as e:
        _import(tmp_path, source.format(d=tmp_path))
    assert e.value.code == oci.NOT_FOUND
    assert not (tmp_path / "roots").exists() or list((tmp_path / "roots").iterdir()) == []


def test_links_an_image_plants_on_mount_points_cannot_make_import_write_outside_the_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    source = make_busybox_image(tmp_path / "image", "oci-archive", symlinks={
        protocol.GUEST_ROOT: str(outside), "/tmp": "../../../../../../../../" + str(outside).lstrip("/"), "/proc": "/",
        "/dev": str(outside / "dev"),
    })
    root, _, lines = _import(tmp_path, source)

    assert list(outside.iterdir()) == []
    for path, _ in oci.MOUNT_POINTS:
        p = root / path.lstrip("/")
        assert p.is_dir() and not p.is_symlink() and not p.parent.is_symlink(), path
    assert (root / protocol.GUEST_ROOT.lstrip("/")).stat().st_uid == 0
    assert any("replaced the image's /.hutch" in line for line in lines)


def special_files(root: Path) -> list[str]:
    """Every socket, FIFO and device node under `root`, links not followed."""
    found = []
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                found.append(os.path.join(dirpath, name))
    return found


def test_an_image_with_device_nodes_and_a_fifo_imports_without_them_and_keeps_its_owners(tmp_path: Path) -> None:
    """As root, umoci would mknod the image's devices on the host; in its user namespace the kernel
    refuses that and umoci writes an empty file instead (it says so), and the FIFO is dropped."""
    source = make_busybox_image(tmp_path / "image", "oci-archive", specials=True)
    root, _, lines = _import(tmp_path, source)

    assert special_files(tmp_path / "roots") == []
    for path, (_, major, minor) in DEVICES.items():
        st = (root / path.lstrip("/")).lstat()
        assert stat.S_ISREG(st.st_mode) and st.st_size == 0, path
        assert any(f"{{{path.lstrip('/')}}} creating empty file in place of device {major}:{minor}" in line
                   for line in lines), path
    assert not os.path.lexists(root / FIFO.lstrip("/"))
    assert any(f"dropped FIFO {FIFO}" in line for line in lines)
    path, uid, gid, mode = OWNED
    st = (root / path.lstrip("/")).lstat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (uid, gid, mode)  # owners and setuid kept
    assert (root / "home/user").stat().st_uid == 1000


def test_the_unpacker_runs_where_the_kernel_refuses_mknod_of_a_device_but_not_chown(tmp_path: Path) -> None:
    """What umoci runs in: root of a user namespace of its own. A device node cannot be made on the
    host there at all, whatever the tool tries; owners of any id can."""
    script = f"chown 200000:300000 {tmp_path}/owned && mknod {tmp_path}/null c 1 3"
    (tmp_path / "owned").write_text("x")
    lines: list[str] = []
    with pytest.raises(oci.ImageError) as e:
        oci._run(["sh", "-c", script], log=lines.append, cancel=None, timeout=30, env={"PATH": "/usr/bin:/bin"},
                 timeout_code=oci.INVALID, failed=lambda tail: oci.ImageError(oci.INVALID, tail), userns=True)
    assert "Operation not permitted" in e.value.message, lines
    assert not os.path.lexists(tmp_path / "null")
    st = (tmp_path / "owned").stat()
    assert (st.st_uid, st.st_gid) == (200000, 300000)


def test_cancel_or_a_timeout_stops_the_import(tmp_path: Path) -> None:
    source = make_busybox_image(tmp_path / "image", "oci-archive")
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(oci.ImageError) as e:
        _import(tmp_path, source, cancel=cancel)
    assert e.value.code == oci.CANCELLED
    with pytest.raises(oci.ImageError) as e:
        _import(tmp_path, source, timeout=0)
    assert e.value.code == oci.INVALID and "took longer" in e.value.message
    assert list((tmp_path / "work").iterdir()) == []
    assert not (tmp_path / "roots").exists()


@pytest.mark.timeout(120)
def test_a_registry_pull_goes_through_the_given_proxy_and_fails_as_a_pull(tmp_path: Path) -> None:
    """The proxy is a socket on loopback that answers every CONNECT with 502: nothing leaves this machine."""
    seen: list[bytes] = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        def answer() -> None:
            server.settimeout(30)
            try:
                while True:
                    conn, _ = server.accept()
                    with conn:
                        seen.append(conn.recv(4096))
                        conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass
        threading.Thread(target=answer, daemon=True).start()
        proxy = f"http://127.0.0.1:{server.getsockname()[1]}"
        source = oci.parse_source("docker://registry.example.invalid/team/app:1")
        assert source is not None
        with pytest.raises(oci.ImageError) as e:
            oci.import_image(source, tmp_path / "root", tmp_path / "work", lambda line: None,
                             env={"HTTPS_PROXY": proxy, "HTTP_PROXY": proxy, "NO_PROXY": ""}, timeout=60)
    assert e.value.code == oci.PULL_FAILED, e.value.message
    assert seen and all(req.startswith(b"CONNECT registry.example.invalid:443 ") for req in seen)
