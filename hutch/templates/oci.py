"""Imports an OCI image (a local OCI layout, an OCI or `docker save` archive, or a registry's image) as a root.

skopeo copies the image into an OCI layout of our own (converting formats, picking the host's
platform from a multi-platform index); umoci unpacks that layout's layers in order, applying
whiteouts, and keeps the files' owners. It runs in a user namespace of its own (host ids mapped
to themselves), where the kernel refuses mknod of a device: umoci then writes an empty file in
place of an image's device node, so the host never holds one (as root, umoci would mknod it). A
tar layer cannot hold a socket; the FIFOs it can hold are dropped (hutch.node.roots). We then make
the directories hutch mounts onto, without following any link the image planted. The text naming
an image comes from an API user: it is parsed into an `ImageSource` that can only ever be a skopeo
image name, never an option.

An image's key for caching its root is its config's digest (what `docker images` calls its ID): the
same for the same image in every format, and known from `image_digest` before any layer is read.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import queue
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from hutch.errors import BuildFailure
from hutch.node import box, roots

# ImageError codes
NOT_FOUND = BuildFailure.IMAGE_NOT_FOUND
PULL_FAILED = BuildFailure.IMAGE_PULL_FAILED
INVALID = BuildFailure.INVALID_IMAGE
CANCELLED = BuildFailure.CANCELLED

TOOL_TIMEOUT = 600.0  # seconds, for each run of skopeo or umoci
ROOT_RECIPE = "3"  # bump when what import_image does to a root changes: it is part of cache_key

# Where hutch mounts into every box, with the mode each is made with if the image lacks it. The
# ones under /.hutch are hutch's own and are always made afresh as root's, 0755.
MOUNT_POINTS: list[tuple[str, int]] = [
    (box.CHANNEL_DIR, 0o755), (box.AGENT_DIR, 0o755), (box.RUNTIME_DIR, 0o755), (box.AGENT_BIN_DIR, 0o755),
    (box.TRUST_DIR, 0o755), ("/tmp", 0o1777), ("/proc", 0o755), ("/dev", 0o755), ("/sys", 0o755),
]

LOCAL_TRANSPORTS = ("oci-archive", "docker-archive", "oci")
# Every host id but the last as itself: owners are kept, and it is not the init namespace's map
# (umoci writes an empty file for a device node only when it sees it is in a user namespace).
_USERNS_MAP = "0 0 4294967294\n"
_TAG = "image"  # the tag of the image in our own layout
_MAX_SOURCE = 4096
_REFERENCE = re.compile(r"[A-Za-z0-9_@][A-Za-z0-9._/@:+-]{0,255}")  # a tag, name:tag or @index after a path
_DOCKER_REF = re.compile(  # registry[:port]/repo/...[:tag][@digest]
    r"[A-Za-z0-9][A-Za-z0-9._-]*(:[0-9]+)?(/[A-Za-z0-9._-]+)*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[0-9a-f]{64})?")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_LOGRUS = re.compile(r'^time="[^"]*" level=(\w+) msg="((?:[^"\\]|\\.)*)"')
_MISSING = ("manifest unknown", "name unknown", "not found", "requested access to the resource is denied",
            "unauthorized", "invalid reference format", "repository name must")  # registries' "no such image"
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


class ImageError(Exception):
    """The image could not be imported; `code` is one of NOT_FOUND, PULL_FAILED, INVALID, CANCELLED."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ImageSource:
    """Where an image is: a transport skopeo knows and what follows its colon, already validated."""

    transport: str  # "oci-archive" | "docker-archive" | "oci" | "docker"
    location: str  # an absolute path, or for "docker" a registry reference (registry/repo:tag)
    reference: str | None = None  # local only: a tag (oci, oci-archive), or name:tag or @N (docker-archive)

    @property
    def remote(self) -> bool:
        return self.transport == "docker"

    @property
    def path(self) -> Path | None:
        return None if self.remote else Path(self.location)

    def skopeo_name(self) -> str:
        if self.remote:
            return f"docker://{self.location}"
        return f"{self.transport}:{self.location}" + (f":{self.reference}" if self.reference else "")

    def __str__(self) -> str:
        return self.skopeo_name()


@dataclass
class ImageConfig:
    """What the image's config says about running it, and its digest (the key to cache its root by)."""

    digest: str  # "sha256:..." of the config, the image's ID
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    user: str | None = None
    cmd: list[str] = field(default_factory=list)
    entrypoint: list[str] = field(default_factory=list)


def parse_source(text: str, *, allowed_dirs: Sequence[Path] | None = None) -> ImageSource | None:
    """The image `text` names, or None if it names none (it is then a template's name).

    Accepted: "oci-archive:/abs/file.tar[:tag]", "docker-archive:/abs/file.tar[:name:tag]",
    "oci:/abs/layout-dir[:tag]" and "docker://registry/repo[:tag][@sha256:...]". A local path must be
    absolute and, if `allowed_dirs` is given, lie inside one of them once its links are resolved.
    Raises ValueError, with a message for the API's user, if `text` looks like an image but is not a
    valid one.
    """
    if text.startswith("docker://"):
        ref = text.removeprefix("docker://")
        _check_text(text)
        if not _DOCKER_REF.fullmatch(ref):
            raise ValueError(f"{text!r} is not a valid registry reference (docker://registry/repository:tag)")
        return ImageSource("docker", ref)
    transport, colon, rest = text.partition(":")
    if not colon:
        return None
    if transport == "docker":
        raise ValueError(f"{text!r}: a registry image is written docker://registry/repository:tag")
    if transport not in LOCAL_TRANSPORTS:
        return None
    _check_text(text)
    path, _, reference = rest.partition(":")  # as skopeo splits it: a path cannot hold a colon
    if not path.startswith("/"):
        raise ValueError(f"{text!r}: the path after {transport}: must be absolute (start with /)")
    if reference and not _REFERENCE.fullmatch(reference):
        raise ValueError(f"{text!r}: {reference!r} is not a valid tag or reference")
    if rest.endswith(":"):
        raise ValueError(f"{text!r}: an empty tag after the path")
    if allowed_dirs is not None:
        real = Path(os.path.realpath(path))
        if not any(real.is_relative_to(os.path.realpath(d)) for d in allowed_dirs):
            raise ValueError(f"{text!r}: images are only imported from {', '.join(map(str, allowed_dirs))}")
    return ImageSource(transport, os.path.normpath(path), reference or None)


def _check_text(text: str) -> None:
    if len(text) > _MAX_SOURCE:
        raise ValueError(f"an image source is at most {_MAX_SOURCE} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError("an image source cannot hold control characters (NUL, newline, ...)")


def cache_key(digest: str) -> str:
    """A directory name for the root of the image with config digest `digest`, as import_image makes it."""
    if not _DIGEST.fullmatch(digest):
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return f"oci-{digest.removeprefix('sha256:')}-r{ROOT_RECIPE}"


def image_digest(source: ImageSource, work_dir: Path, *, env: Mapping[str, str] | None = None,
                 cancel: threading.Event | None = None, timeout: float = TOOL_TIMEOUT) -> str:
    """The digest of the image's config for this host's platform, without reading its layers.

    For a registry this fetches the manifest and config only; import_image returns the same digest.
    """
    with _Scratch(work_dir) as scratch:
        raw = _inspect_config(source, scratch, _ignore, cancel, env, timeout)
    return _sha256(raw)


def import_image(source: ImageSource, dest_root: Path, work_dir: Path, log: Callable[[str], None],
                 cancel: threading.Event | None = None, *, env: Mapping[str, str] | None = None,
                 timeout: float = TOOL_TIMEOUT) -> ImageConfig:
    """Unpack the image into `dest_root` (which must not exist yet) and return its config.

    `work_dir` holds the layout while it is unpacked (about the size of the compressed image); what
    this puts there is removed when it returns. The root is unpacked beside `dest_root` and renamed
    into place once complete. `log` is called on this thread with each line of the tools' output;
    setting `cancel` kills the tool running and raises ImageError(CANCELLED). `env` is added to
    skopeo's environment for registry pulls only (HTTPS_PROXY, SSL_CERT_FILE, REGISTRY_AUTH_FILE...):
    otherwise no credentials of the host's are used. Needs root, skopeo and umoci.
    """
    if dest_root.exists() or dest_root.is_symlink():
        raise FileExistsError(f"{dest_root} already exists")
    for tool in ("skopeo", "umoci"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is not installed (apt-get install skopeo umoci)")
    partial = dest_root.with_name(dest_root.name + ".partial")
    with _Scratch(work_dir) as scratch:
        log(f"reading the image's config from {source}")
        raw_config = _inspect_config(source, scratch, log, cancel, env, timeout)
        config = _parse_config(raw_config)
        layout = _copy(source, scratch, log, cancel, env, timeout)
        if _config_of(layout).get("rootfs") != _json(raw_config).get("rootfs"):
            raise ImageError(PULL_FAILED, f"{source} changed while it was copied; try again")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        try:
            log("unpacking the layers")
            _run(["umoci", "--log=info", "raw", "unpack", "--image", f"{layout}:{_TAG}", str(partial)],
                 log=log, cancel=cancel, timeout=timeout, env=_tool_env(scratch, None), timeout_code=INVALID,
                 failed=lambda tail: ImageError(INVALID, f"its layers would not unpack: {tail}"), userns=True)
            try:
                dropped = roots.scrub(partial)
            except roots.RootError as e:
                raise ImageError(INVALID, f"its root could not be checked: {e}") from None
            for line in dropped.lines("the image"):
                log(line)
            for replaced in ensure_mount_points(partial):
                log(f"replaced the image's {replaced} (not a directory) with an empty directory")
            os.chmod(partial, 0o755)
            partial.rename(dest_root)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
    log(f"image {config.digest} unpacked into {dest_root}")
    return config


def ensure_mount_points(root: Path) -> list[str]:
    """Make each of MOUNT_POINTS a directory in `root`, never following a link; return what it replaced.

    A link, file or device where a mount point goes is removed (never followed) and a directory made
    in its place; /tmp, /proc, /dev and /sys that are already directories are left as the image has
    them.
    """
    replaced: list[str] = []
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for path, mode in MOUNT_POINTS:
            names = path.strip("/").split("/")
            fd = os.dup(root_fd)
            try:
                for i, name in enumerate(names):
                    last = i == len(names) - 1
                    ours = path.startswith(box.GUEST_ROOT)
                    child, was_replaced = _directory_at(fd, name, mode if last else 0o755, reset=ours)
                    if was_replaced:
                        replaced.append("/" + "/".join(names[: i + 1]))
                    os.close(fd)
                    fd = child
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)
    return replaced


def _directory_at(parent_fd: int, name: str, mode: int, *, reset: bool) -> tuple[int, bool]:
    """An open fd of directory `name` in `parent_fd`, made if missing or not a directory."""
    replaced = False
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent_fd)
        replaced, st = True, None
    if st is None:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    if st is None or reset:
        os.fchown(fd, 0, 0)
        os.fchmod(fd, mode)
    return fd, replaced


# --- the tools --------------------------------------------------------------------------------------

class _Scratch:
    """A directory of our own under work_dir for the layout, the tools' temporary files and HOME."""

    def __init__(self, work_dir: Path) -> None:
        if ":" in str(work_dir):
            raise ValueError(f"work_dir {work_dir} must not hold a colon (skopeo and umoci split image names on it)")
        self.work_dir = work_dir

    def __enter__(self) -> Path:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix="import-", dir=self.work_dir))
        for sub in ("tmp", "home", "run"):
            (self.path / sub).mkdir(mode=0o700)
        (self.path / "auth.json").write_text('{"auths": {}}\n')
        return self.path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _tool_env(scratch: Path, extra: Mapping[str, str] | None) -> dict[str, str]:
    """A clean environment: HOME, XDG_RUNTIME_DIR and the auth file are ours, so no host login is used."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        "HOME": str(scratch / "home"), "TMPDIR": str(scratch / "tmp"), "XDG_RUNTIME_DIR": str(scratch / "run"),
        "REGISTRY_AUTH_FILE": str(scratch / "auth.json"), "LC_ALL": "C",
    }
    env.update(extra or {})
    return env


def _skopeo(scratch: Path, *args: str) -> list[str]:
    return ["skopeo", "--tmpdir", str(scratch / "tmp"), "--override-os", "linux", "--override-arch", _host_arch(), *args]


def _host_arch() -> str:
    return _ARCH.get(platform.machine(), platform.machine())


def _inspect_config(source: ImageSource, scratch: Path, log: Callable[[str], None],
                    cancel: threading.Event | None, env: Mapping[str, str] | None, timeout: float) -> bytes:
    if source.path is not None and not (source.path.exists() or source.path.is_symlink()):
        raise ImageError(NOT_FOUND, f"{source.path} does not exist")
    return _run(_skopeo(scratch, "inspect", "--config", "--raw", "--", source.skopeo_name()),
                log=log, cancel=cancel, timeout=timeout, env=_tool_env(scratch, env if source.remote else None),
                capture=True, timeout_code=PULL_FAILED if source.remote else INVALID,
                failed=lambda tail: _skopeo_error(source, tail, NOT_FOUND))


def _copy(source: ImageSource, scratch: Path, log: Callable[[str], None], cancel: threading.Event | None,
          env: Mapping[str, str] | None, timeout: float) -> Path:
    """Copy the image into an OCI layout under scratch whose layers umoci can read; return the layout."""
    layout = scratch / "layout"
    log(f"copying {source}")
    _run(_skopeo(scratch, "copy", "--", source.skopeo_name(), f"oci:{layout}:{_TAG}"),
         log=log, cancel=cancel, timeout=timeout, env=_tool_env(scratch, env if source.remote else None),
         timeout_code=PULL_FAILED if source.remote else INVALID,
         failed=lambda tail: _skopeo_error(source, tail, INVALID))
    if any("zstd" in str(layer.get("mediaType")) for layer in _manifest_of(layout).get("layers", [])):
        # umoci 0.4.7 (Debian 12 and 13) reads gzip and plain tar layers only
        log("recompressing its zstd layers with gzip")
        gzipped = scratch / "layout-gzip"
        _run(_skopeo(scratch, "copy", "--dest-compress-format", "gzip", "--", f"oci:{layout}:{_TAG}", f"oci:{gzipped}:{_TAG}"),
             log=log, cancel=cancel, timeout=timeout, env=_tool_env(scratch, None), timeout_code=INVALID,
             failed=lambda tail: ImageError(INVALID, f"its zstd layers could not be recompressed: {tail}"))
        shutil.rmtree(layout)
        layout = gzipped
    return layout


def _skopeo_error(source: ImageSource, tail: str, local_code: str) -> ImageError:
    lower = tail.lower()
    if "no image found in manifest list" in lower or "choosing image instance" in lower:
        return ImageError(INVALID, f"{source} has no linux/{_host_arch()} image: {tail}")
    if not source.remote:
        return ImageError(local_code, f"{source}: {tail}")
    if any(s in lower for s in _MISSING):
        return ImageError(NOT_FOUND, f"{source} was not found, or needs credentials: {tail}")
    return ImageError(PULL_FAILED, f"could not pull {source}: {tail}")


def _run(argv: list[str], *, log: Callable[[str], None], cancel: threading.Event | None, timeout: float,
         env: dict[str, str], timeout_code: str, failed: Callable[[str], ImageError], capture: bool = False,
         userns: bool = False) -> bytes:
    """Run a tool in its own process group, passing its output lines to `log` on this thread.

    Returns its stdout if `capture` (its stderr is logged), else b"". Raises failed(last lines) if it
    fails, and kills it if `cancel` is set or `timeout` passes. With `userns` it runs as root of a
    user namespace of its own (`_USERNS_MAP`): owners and modes work as for root, mknod of a device
    does not.
    """
    lines: queue.Queue[str | None] = queue.Queue()
    out = bytearray()
    tool = argv[0]
    if userns:  # unshare, then wait (on stdin) until we have written the namespace's id maps
        argv = ["unshare", "--user", "--", "sh", "-c", 'read -r _ && exec "$@"', "sh", *argv]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if userns else subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE if capture else subprocess.STDOUT, env=env, start_new_session=True)
    assert proc.stdout is not None
    if userns:
        try:
            _map_ids(proc, time.monotonic() + 10)
        except BaseException:
            roots.kill_group(proc)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            raise
    text_pipe = proc.stderr if capture else proc.stdout
    assert text_pipe is not None
    readers = [threading.Thread(target=_read_lines, args=(text_pipe, lines), daemon=True)]
    if capture:
        readers.append(threading.Thread(target=_read_all, args=(proc.stdout, out), daemon=True))
    for r in readers:
        r.start()
    tail: list[str] = []
    deadline = time.monotonic() + timeout
    eof = False
    try:
        while not eof or proc.poll() is None:
            try:
                line = lines.get(timeout=0.1)
            except queue.Empty:
                pass
            else:
                if line is None:
                    eof = True
                elif line := _tidy(line):
                    tail = [*tail[-9:], line]
                    log(line)
            if cancel is not None and cancel.is_set():
                raise ImageError(CANCELLED, "the import was cancelled")
            if time.monotonic() > deadline:
                raise ImageError(timeout_code, f"{tool} took longer than {timeout:.0f} s")
    finally:
        roots.kill_group(proc)
        for r in readers:
            r.join(timeout=5)
        proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()
    if proc.returncode != 0:
        raise failed(" / ".join(tail[-3:]) or f"{tool} exited with {proc.returncode}")
    return bytes(out)


def _map_ids(proc: subprocess.Popen[bytes], deadline: float) -> None:
    """Map `proc`'s new user namespace's ids once it has made it, then let it go on. Only a process
    outside the namespace with CAP_SETUID may write a map this wide (newuidmap would refuse it)."""
    ours = os.readlink("/proc/self/ns/user")
    while _user_ns(proc.pid) in (ours, None):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the image's unpacker could not make a user namespace (unshare --user failed)")
        time.sleep(0.001)
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{proc.pid}/{name}", "w") as f:
            f.write(_USERNS_MAP)
    assert proc.stdin is not None
    proc.stdin.write(b"\n")
    proc.stdin.close()


def _user_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/user")
    except OSError:  # it has ended
        return None


def _read_lines(pipe: IO[bytes], lines: queue.Queue[str | None]) -> None:
    try:
        for raw in pipe:
            lines.put(raw.decode(errors="replace").rstrip())
    finally:
        lines.put(None)


def _read_all(pipe: IO[bytes], out: bytearray) -> None:
    while chunk := pipe.read(65536):
        out.extend(chunk)


def _tidy(line: str) -> str:
    """A tool's line as a person reads it: logrus' `time=... level=fatal msg="..."` becomes `fatal: ...`."""
    line = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", line).strip()
    if m := _LOGRUS.match(line):
        msg = m.group(2).replace('\\"', '"').replace("\\\\", "\\")
        return msg if m.group(1) == "fatal" else f"{m.group(1)}: {msg}"
    return line.lstrip("\u2022\u2a2f ").strip()  # umoci's bullets


# --- the layout and the config ----------------------------------------------------------------------

def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError as e:
        raise ImageError(INVALID, f"its config or manifest is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise ImageError(INVALID, "its config or manifest is not a JSON object")
    return value


def _blob(layout: Path, digest: object) -> bytes:
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise ImageError(INVALID, f"unexpected digest in the image: {digest!r}")
    return (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()


def _manifest_of(layout: Path) -> dict[str, Any]:
    index = _json((layout / "index.json").read_bytes())
    for desc in index.get("manifests", []):
        if isinstance(desc, dict) and desc.get("annotations", {}).get("org.opencontainers.image.ref.name") == _TAG:
            return _json(_blob(layout, desc.get("digest")))
    raise ImageError(INVALID, "skopeo's layout holds no image")


def _config_of(layout: Path) -> dict[str, Any]:
    config = _manifest_of(layout).get("config")
    return _json(_blob(layout, config.get("digest") if isinstance(config, dict) else None))


def _sha256(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def _parse_config(raw: bytes) -> ImageConfig:
    doc = _json(raw)
    arch, os_name = doc.get("architecture"), doc.get("os")
    if os_name != "linux" or arch != _host_arch():
        raise ImageError(INVALID, f"the image is for {os_name}/{arch}; this host runs linux/{_host_arch()}")
    run = doc.get("config") or {}
    if not isinstance(run, dict):
        raise ImageError(INVALID, "its config's `config` is not an object")

    def strings(key: str) -> list[str]:
        value = run.get(key) or []
        if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
            raise ImageError(INVALID, f"its config's {key} is not a list of strings")
        return value

    def string(key: str) -> str | None:
        value = run.get(key)
        if value is not None and not isinstance(value, str):
            raise ImageError(INVALID, f"its config's {key} is not a string")
        return value or None

    env = dict(item.split("=", 1) for item in strings("Env") if "=" in item)
    return ImageConfig(_sha256(raw), env, string("WorkingDir"), string("User"), strings("Cmd"), strings("Entrypoint"))


def _ignore(line: str) -> None:
    pass
