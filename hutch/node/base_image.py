"""Builds the system templates' roots once: the base (Debian bookworm, minbase, python3 and the
usual tools) and the code interpreter's (the base's packages plus Debian's IPython kernel, numpy,
pandas and matplotlib; its in-box server is hutch/guest/interpreter.py, mounted with the agent).

A root is cached by a hash of its recipe, so every data dir on a host shares one copy and a
changed recipe builds a new one beside the old.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hutch.guest import protocol
from hutch.node import roots

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


@dataclass(frozen=True)
class Recipe:
    name: str  # the cache directory's prefix
    packages: tuple[str, ...]
    customize: tuple[str, ...]
    version: str
    excluded: tuple[str, ...] = ()  # paths dpkg leaves out (beside the docs every root leaves out)

    def key(self) -> str:
        text = "\n".join([self.version, SUITE, *self.packages, *self.customize, *self.excluded])
        return hashlib.sha256(text.encode()).hexdigest()[:12]


BASE = Recipe("base", tuple(PACKAGES), tuple(CUSTOMIZE), RECIPE_VERSION)
# Debian's own builds (no wheel is fetched, at install time or when a box starts); bookworm has no
# bash or JavaScript kernel, so Python is the one language. matplotlib's fonttools depends on scipy
# and sympy, scipy on pythran and so on Boost's headers: 130 MB and 15,000 files nothing here
# compiles against, left out.
CODE_INTERPRETER = Recipe("code-interpreter", (*PACKAGES, "python3-ipykernel", "python3-jupyter-client",
                                               "python3-numpy", "python3-pandas", "python3-matplotlib"),
                          tuple(CUSTOMIZE), "1", excluded=("/usr/include/boost/*",))


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


def base_root_path(cache_dir: Path, recipe: Recipe = BASE) -> Path:
    return cache_dir / f"{recipe.name}-{SUITE}-{recipe.key()}" / "rootfs"


def is_built(cache_dir: Path, recipe: Recipe = BASE) -> bool:
    return roots.lstat_in(base_root_path(cache_dir, recipe), "usr/bin/python3") is not None  # a link to python3.x


def build(cache_dir: Path, progress: Callable[[str], None] = print, recipe: Recipe = BASE) -> Path:
    """Build a root unless it is cached; return its path. Needs root and mmdebstrap."""
    root = base_root_path(cache_dir, recipe)
    if is_built(cache_dir, recipe):
        return root
    if shutil.which("mmdebstrap") is None:
        raise RuntimeError("mmdebstrap is not installed (apt-get install mmdebstrap)")
    work = root.parent.with_name(root.parent.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    argv = [
        "mmdebstrap", "--variant=minbase", f"--include={','.join(recipe.packages)}",
        "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*", "--dpkgopt=path-include=/usr/share/locale/locale.alias",
        *[f"--dpkgopt=path-exclude={path}" for path in recipe.excluded],
        *[f"--customize-hook={hook}" for hook in recipe.customize],
        SUITE, str(work / "rootfs"), *([mirror] if (mirror := debian_mirror()) else []),
    ]
    progress(f"building the {recipe.name} template ({SUITE}, {'about 30 s' if recipe is BASE else 'a minute or two'}) "
             f"into {root.parent}")
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
    roots.scrub(work / "rootfs")  # mmdebstrap's /dev nodes: a box's /dev is its own tmpfs
    shutil.rmtree(root.parent, ignore_errors=True)
    work.rename(root.parent)
    progress(f"{recipe.name} template ready: {root}")
    return root
