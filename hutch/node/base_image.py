"""Builds the system templates' roots once: the base (Debian bookworm, minbase, python3 and the
usual tools) and the code interpreter's (the base's packages plus Debian's IPython kernel, numpy,
pandas and matplotlib, and bash and Deno kernels from wheels fetched here at build time; its
in-box server is hutch/guest/interpreter.py, mounted with the agent).

A root is cached by a hash of its recipe, so every data dir on a host shares one copy and a
changed recipe builds a new one beside the old.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
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
class Wheel:
    """A pinned wheel (a pip requirement line, `name==version` and its hashes) fetched by the host's
    pip at build time and installed in the root without its dependencies (Debian's, in the recipe's
    packages), with the Jupyter kernelspec it brings written by the recipe (nothing fetched runs as
    the host's root). Never fetched when a box starts."""

    requirement: str
    kernel: str  # the kernelspec's name, under /usr/local/share/jupyter/kernels
    kernelspec: tuple[tuple[str, object], ...]  # its kernel.json's items (a tuple: a Recipe is hashable)

    def spec_json(self) -> str:
        text = json.dumps(dict(self.kernelspec), sort_keys=True)
        assert "'" not in text, "written in single quotes by a hook"
        return text


@dataclass(frozen=True)
class Recipe:
    name: str  # the cache directory's prefix
    packages: tuple[str, ...]
    customize: tuple[str, ...]
    version: str
    excluded: tuple[str, ...] = ()  # paths dpkg leaves out (beside the docs every root leaves out)
    wheels: tuple[Wheel, ...] = ()  # what Debian does not package

    def key(self) -> str:
        text = "\n".join([self.version, SUITE, *self.packages, *self.customize, *self.excluded,
                          *[line for w in self.wheels for line in (w.requirement, w.kernel, w.spec_json())]])
        return hashlib.sha256(text.encode()).hexdigest()[:12]


BASE = Recipe("base", tuple(PACKAGES), tuple(CUSTOMIZE), RECIPE_VERSION)
# Debian's own builds (R's kernel, IRkernel, among them), and two wheels of what bookworm does not
# package: bash_kernel (pure Python over Debian's pexpect and filetype) and Deno (one binary, whose
# own Jupyter kernel runs JavaScript and TypeScript; Node's kernels, ijavascript and tslab, need the
# zeromq add-on built or fetched from GitHub). Deno's hashes are its x86_64 and aarch64 wheels'.
# matplotlib's fonttools depends on scipy and sympy, scipy on pythran and so on Boost's headers:
# 130 MB and 15,000 files nothing here compiles against, left out.
# As in E2B's image, code can `pip install` (LLM-written code often does): Debian's PEP 668 marker
# goes, and the box user's site directory is made, so a kernel that was running sees what it
# installs there (Python adds it to sys.path at start only if it exists).
PIP_FOR_THE_BOX_USER = (
    'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
    f'chroot "$1" runuser -u {protocol.BOX_USER} -- env HOME=/home/{protocol.BOX_USER} '
    """sh -c 'mkdir -p "$(python3 -m site --user-site)"'""",
)
BASH_KERNEL = Wheel("bash_kernel==0.10.0 --hash=sha256:da28513230f5307c7a49e87352366304dc52b66faa207d6caed1b2bdec03c1fa",
                    "bash", tuple({"argv": ["/usr/bin/python3", "-m", "bash_kernel", "-f", "{connection_file}"],
                                   "display_name": "Bash", "language": "bash", "env": {"PS1": "$"}}.items()))
DENO = Wheel("deno==2.9.8 --hash=sha256:b1d1318e7deda8efd593aefa8b565a827fe71cf83aeff09d3a5ceb047444ca18 "
             "--hash=sha256:3e286918a36f436134336c5c6ef37dfe3a27f16ea22cd6af452ab7daa4ef1da4",
             "deno", tuple({"argv": ["/usr/local/bin/deno", "jupyter", "--kernel", "--conn", "{connection_file}"],
                            "display_name": "Deno", "language": "typescript",
                            "env": {"NO_COLOR": "1"}}.items()))  # as E2B's Deno kernelspec: plain errors and values
CODE_INTERPRETER = Recipe("code-interpreter", (*PACKAGES, "python3-ipykernel", "python3-jupyter-client",
                                               "python3-numpy", "python3-pandas", "python3-matplotlib",
                                               "python3-pexpect", "python3-filetype", "r-base-core", "r-cran-irkernel"),
                          (*CUSTOMIZE, *PIP_FOR_THE_BOX_USER), "1", excluded=("/usr/include/boost/*",),
                          wheels=(BASH_KERNEL, DENO))


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
    try:
        wheels = _fetch_wheels(recipe, work / "wheels")
    except RuntimeError:
        shutil.rmtree(work, ignore_errors=True)
        raise
    argv = [
        "mmdebstrap", "--variant=minbase", f"--include={','.join(recipe.packages)}",
        "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*", "--dpkgopt=path-include=/usr/share/locale/locale.alias",
        *[f"--dpkgopt=path-exclude={path}" for path in recipe.excluded],
        *[f"--customize-hook={hook}" for hook in (*recipe.customize, *_wheel_hooks(recipe.wheels, wheels))],
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
    shutil.rmtree(work / "wheels", ignore_errors=True)
    shutil.rmtree(root.parent, ignore_errors=True)
    work.rename(root.parent)
    progress(f"{recipe.name} template ready: {root}")
    return root


def _fetch_wheels(recipe: Recipe, into: Path) -> list[Path]:
    """The recipe's wheels, by the host's pip (its proxy and certificates) in one call, checked
    against their hashes. One pip cannot fetch fails the build, as a failed mmdebstrap does (a
    root built without it would be cached for good under the recipe's key)."""
    if not recipe.wheels:
        return []
    into.mkdir(parents=True)
    requirements = into / "requirements.txt"  # hashes can only be given in a file
    requirements.write_text("".join(w.requirement + "\n" for w in recipe.wheels))
    got = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                          "--require-hashes", "-r", str(requirements), "-d", str(into)], capture_output=True, text=True)
    files = sorted(into.glob("*.whl"))
    if got.returncode != 0 or len(files) != len(recipe.wheels):
        raise RuntimeError(f"pip could not fetch the wheels {', '.join(w.requirement.split()[0] for w in recipe.wheels)}: "
                           f"{(got.stderr.strip().splitlines() or ['?'])[-1][:300]}")
    return files


def _wheel_hooks(wheels: tuple[Wheel, ...], files: list[Path]) -> list[str]:
    """mmdebstrap hooks that install the fetched wheel files in the root ($1) and write the wheels'
    kernelspecs."""
    if not files:
        return []
    clean = 'env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root chroot "$1"'  # not the host's pip settings
    specs = [(f'"$1/usr/local/share/jupyter/kernels/{wheel.kernel}"', wheel.spec_json()) for wheel in wheels]
    return ['mkdir "$1/tmp/wheels"',
            *[f'cp {shlex.quote(str(path))} "$1/tmp/wheels/"' for path in files],
            f'{clean} python3 -m pip install --quiet --no-index --no-deps --no-cache-dir --break-system-packages '
            + " ".join(shlex.quote(f"/tmp/wheels/{path.name}") for path in files),
            *[f"mkdir -p {where} && printf '%s' '{text}' > {where}/kernel.json" for where, text in specs],
            'rm -rf "$1/tmp/wheels"']
