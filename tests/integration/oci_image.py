"""Builds a small two-layer linux/amd64 busybox image with umoci, as a docker-archive, an oci-archive or
an OCI layout, for the tests of image templates. Needs root, umoci, skopeo and busybox-static."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Literal

from tests.integration.support import needs_installed

Format = Literal["docker-archive", "oci-archive", "oci"]
TOOLS = ("umoci", "skopeo")
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static
TAG = "hutch-test"
IMAGE_ENV = {"FOO": "from-image"}
IMAGE_WORKDIR = "/srv"
REMOVED = "/etc/remove-me"  # in the first layer, deleted by the second: only a whiteout hides it
PASSWD = "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n"
GROUP = "root:x:0:\nuser:x:1000:\n"
# with specials=True, in layer 1 (a tar layer cannot hold a socket: umoci and Docker refuse to write one)
DEVICES = {"/dev/null": ("c", 1, 3), "/etc/console": ("c", 5, 1), "/etc/disk": ("b", 7, 0)}
FIFO = "/srv/pipe"
OWNED = ("/etc/owned", 200000, 300000, 0o4755)  # a setuid file of ids beyond the usual 65536


def needs_image_tools() -> None:
    """Skip the test (fail it under CI) where make_busybox_image cannot run for want of a tool."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if not _static(BUSYBOX):
        missing.append("busybox-static")
    needs_installed(" and ".join(missing), not missing)


def make_busybox_image(dir: Path, fmt: Format, *, symlinks: dict[str, str] | None = None, specials: bool = False) -> str:
    """Build the image under `dir` and return the `from` string naming it, e.g. "oci-archive:/…/image.tar".

    Layer 1: busybox as /bin/busybox with a link for each applet, /etc/hello, /etc/remove-me, an
    /etc/passwd with root and "user" (uid 1000, home /home/user), and `symlinks` (path in the image →
    target) planted as they are; with `specials`, the DEVICES, the FIFO and the OWNED file too.
    Config: Env FOO=from-image, WorkingDir /srv. Layer 2 deletes /etc/remove-me.
    """
    dir.mkdir(parents=True, exist_ok=True)
    layout, bundle = dir / "layout", dir / "bundle"
    shutil.rmtree(layout, ignore_errors=True)
    shutil.rmtree(bundle, ignore_errors=True)
    image = f"{layout}:{TAG}"
    _run("umoci", "init", "--layout", str(layout))
    _run("umoci", "new", "--image", image)
    _run("umoci", "unpack", "--image", image, str(bundle))
    _fill(bundle / "rootfs", symlinks or {})
    if specials:
        _specials(bundle / "rootfs")
    _run("umoci", "repack", "--image", image, str(bundle))
    _run("umoci", "config", "--image", image, "--architecture", "amd64", "--os", "linux",
         "--config.workingdir", IMAGE_WORKDIR, *[f"--config.env={k}={v}" for k, v in IMAGE_ENV.items()])
    _run("umoci", "insert", "--image", image, "--whiteout", REMOVED)
    shutil.rmtree(bundle)
    if fmt == "oci":
        return f"oci:{image}"
    archive = dir / f"image.{fmt}.tar"
    archive.unlink(missing_ok=True)
    dest = f"docker-archive:{archive}:{TAG}:latest" if fmt == "docker-archive" else f"oci-archive:{archive}:{TAG}"
    _run("skopeo", "copy", "--quiet", f"oci:{image}", dest)
    shutil.rmtree(layout)
    return f"{fmt}:{archive}"


def _fill(root: Path, symlinks: dict[str, str]) -> None:
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "root", "srv", "tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "tmp", 0o1777)
    os.chmod(root / "root", 0o700)
    shutil.copy2(BUSYBOX, root / "bin/busybox")
    applets = subprocess.run([str(BUSYBOX), "--list-full"], check=True, capture_output=True, text=True).stdout.split()
    for applet in applets:
        link = root / applet
        if not link.exists() and not link.is_symlink():
            link.symlink_to("/bin/busybox")
    (root / "etc/hello").write_text("hello from the image\n")
    (root / REMOVED.lstrip("/")).write_text("a whiteout in the second layer removes this\n")
    (root / "etc/passwd").write_text(PASSWD)
    (root / "etc/group").write_text(GROUP)
    home = root / "home/user"
    home.mkdir(parents=True)
    os.chown(home, 1000, 1000)
    for path, target in symlinks.items():
        link = root / path.lstrip("/")
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)


def _specials(root: Path) -> None:
    for path, (kind, major, minor) in DEVICES.items():
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        mode = stat.S_IFCHR if kind == "c" else stat.S_IFBLK
        os.mknod(root / path.lstrip("/"), mode | 0o666, os.makedev(major, minor))
    os.mkfifo(root / FIFO.lstrip("/"), 0o644)
    path, uid, gid, mode = OWNED
    (root / path.lstrip("/")).write_text("owned\n")
    os.chown(root / path.lstrip("/"), uid, gid)
    os.chmod(root / path.lstrip("/"), mode)


def _static(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.startswith(b"\x7fELF") and b"/lib64/ld-linux" not in head and b"/lib/ld-linux" not in head


def _run(*argv: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
