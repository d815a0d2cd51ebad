"""Builds the base template's root (Debian bookworm, minbase, python3 and the usual tools) once.

The root is cached by a hash of its recipe, so every data dir on a host shares one copy and a
changed recipe builds a new one beside the old.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from hutch.guest import protocol

SUITE = "bookworm"
PACKAGES = [
    "python3", "ca-certificates", "procps", "curl", "git", "less", "nano", "unzip", "xz-utils",
    "bzip2", "file", "jq", "iproute2", "iputils-ping", "python3-pip", "python3-venv",
]
CUSTOMIZE = [
    # the unprivileged user commands run as
    f'chroot "$1" useradd --create-home --uid {protocol.BOX_UID} --user-group --shell /bin/bash {protocol.BOX_USER}',
    # mount points for the host's directories, so no box has to create them
    f'mkdir -p "$1{protocol.CHANNEL_DIR}" "$1{protocol.AGENT_DIR}" "$1{protocol.RUNTIME_DIR}"',
    'rm -rf "$1/var/cache/apt/archives/"*.deb "$1/var/lib/apt/lists/"*',
]
RECIPE_VERSION = "1"


def debian_mirror() -> str | None:
    """HUTCH_DEBIAN_MIRROR, else the host's own Debian mirror from its apt sources, else None
    (mmdebstrap then picks its default)."""
    if os.environ.get("HUTCH_DEBIAN_MIRROR"):
        return os.environ["HUTCH_DEBIAN_MIRROR"]
    apt = Path("/etc/apt")
    files = [apt / "sources.list", *sorted(apt.glob("sources.list.d/*.list")), *sorted(apt.glob("sources.list.d/*.sources"))]
    candidates = [
        word
        for f in files if f.exists()
        for line in f.read_text().splitlines() if line.startswith(("deb ", "URIs:"))
        for word in line.split() if word.startswith(("http://", "https://"))
    ]
    good = [u for u in candidates if "debian" in u.lower() and "security" not in u.lower()]
    return good[0].rstrip("/") if good else None


def recipe_key() -> str:
    text = "\n".join([RECIPE_VERSION, SUITE, *PACKAGES, *CUSTOMIZE])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def base_root_path(cache_dir: Path) -> Path:
    return cache_dir / f"base-{SUITE}-{recipe_key()}" / "rootfs"


def is_built(cache_dir: Path) -> bool:
    return (base_root_path(cache_dir) / "usr/bin/python3").exists()


def build(cache_dir: Path, progress: Callable[[str], None] = print) -> Path:
    """Build the base root unless it is cached; return its path. Needs root and mmdebstrap."""
    root = base_root_path(cache_dir)
    if is_built(cache_dir):
        return root
    if shutil.which("mmdebstrap") is None:
        raise RuntimeError("mmdebstrap is not installed (apt-get install mmdebstrap)")
    work = root.parent.with_name(root.parent.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    argv = [
        "mmdebstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
        "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*", "--dpkgopt=path-include=/usr/share/locale/locale.alias",
        *[f"--customize-hook={hook}" for hook in CUSTOMIZE],
        SUITE, str(work / "rootfs"), *([mirror] if (mirror := debian_mirror()) else []),
    ]
    progress(f"building the base template ({SUITE}, about 30 s) into {root.parent}")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        line = line.rstrip()
        tail = [*tail[-29:], line]
        if line.startswith("I: "):
            progress("  " + line[3:])
    if proc.wait() != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise RuntimeError("mmdebstrap failed:\n" + "\n".join(tail))
    shutil.rmtree(root.parent, ignore_errors=True)
    work.rename(root.parent)
    progress(f"base template ready: {root}")
    return root
