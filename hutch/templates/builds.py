"""Running one template build: its steps in build boxes, layer by layer, then the finished root.

Each run step boots a gVisor build box whose root is a host overlay mount: the parent root and the
layers so far below, the step's new layer above (hutch.templates.layers). The box writes straight
into that layer (runsc with no overlay of its own), as root unless a user step said otherwise, in
the workdir and with the env of the steps before it, its network through the egress proxy like
any box's. A step already built on the same parent with the same env, workdir and user is taken
from the cache. A workdir step makes its directory (a small layer of its own), as Docker does,
unless it is the first layer and the parent has the directory as the step would leave it.
The finished root is the stack flattened into one directory; a template whose steps wrote nothing
shares its parent's root. No root or layer holds a socket, FIFO or device node (hutch.node.roots):
what a step's box bound or made (with runsc's --host-uds a socket it binds is a real host socket)
is dropped from its layer once the box has ended, and from the flattened root, each with a line in
the build log. If the template has a start command or readiness probe, a box is booted
from the new root and must become ready, or the build fails.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
import stat
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hutch.errors import ApiError, BuildFailure, build_error
from hutch.node import boxcmd, mounts, roots
from hutch.node.api import BoxAgent, BoxStartError, ChannelError, NodeRuntime
from hutch.node.box import USER
from hutch.node.spec import Limits
from hutch.templates.buildlog import BuildLog
from hutch.templates.layers import LayerCache, chain_key, flatten, stack_key

STEP_TIMEOUT = 3600.0  # one run step


@dataclass
class Parent:
    """What a build starts from: a root, a key naming it for the layer cache, and the defaults
    its boxes had (an image's env and workdir, a parent template's)."""

    root: Path
    key: str
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    user: str | None = None


@dataclass
class Built:
    rootfs: Path
    env: dict[str, str]
    workdir: str | None
    user: str | None
    steps_cached: int


class BuildFailed(Exception):
    def __init__(self, code: str, message: str, step: int | None = None, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.step, self.exit_code = code, message, step, exit_code

    def info(self) -> dict[str, Any]:
        return build_error(self.code, self.message, step=self.step, exit_code=self.exit_code)


def describe(step: dict[str, Any]) -> str:
    """A step as the log shows it."""
    if "run" in step:
        return f"RUN {step['run']}"
    if "env" in step:
        return f"ENV {step['env']['key']}"  # not its value: it may be a token
    if "workdir" in step:
        return f"WORKDIR {step['workdir']}"
    if "copy" in step:
        return f"COPY {step['copy']['src']} {step['copy']['dest']}"
    return f"USER {step['user']['name']}"


# A copy step, in its build box as root: the upload (at UPLOAD, on the box's /tmp, never in the
# layer) unpacked in a directory of its own, the matches of SRC (a glob: ** and dot files match)
# copied to DEST as Docker copies (a directory's contents into DEST, a single file to DEST unless
# DEST ends with "/" or is a directory), then owned by OWNER and given MODE. SRC and DEST come in
# the environment, never in the script: nothing in them is run.
UPLOAD = "/tmp/.hutch-copy-upload"
COPY_SCRIPT = r"""set -eu
ctx=$(mktemp -d /tmp/.hutch-copy.XXXXXX)
tar -xf "$UPLOAD" -C "$ctx" --no-same-owner
rm -f "$UPLOAD"
cd "$ctx"
shopt -s nullglob dotglob globstar
IFS=
matches=( $SRC )
[ ${#matches[@]} -gt 0 ] || { echo "COPY: nothing in the upload matches $SRC" >&2; exit 1; }
case "$DEST" in */) into=1 ;; *) into=0 ;; esac
if [ ${#matches[@]} -gt 1 ] || [ -d "$DEST" ] || [ -d "${matches[0]}" ]; then into=1; fi
copied=()
if [ $into = 1 ]; then
  mkdir -p -- "$DEST"
  for m in "${matches[@]}"; do
    if [ -d "$m" ] && [ ! -L "$m" ]; then
      cp -a -- "$m/." "$DEST/"; for f in "$m"/* "$m"/.[!.]* ; do [ -e "$f" ] || [ -L "$f" ] && copied+=("$DEST/${f#"$m"/}"); done
    else
      cp -a -- "$m" "$DEST/"; copied+=("$DEST/$(basename -- "$m")")
    fi
  done
else
  mkdir -p -- "$(dirname -- "$DEST")"
  cp -a -- "${matches[0]}" "$DEST"; copied+=("$DEST")
fi
for c in "${copied[@]}"; do
  [ -z "$OWNER" ] || chown -hR "$OWNER:$OWNER" -- "$c"
  [ -z "$MODE" ] || chmod -R "$MODE" -- "$c"
done
cd /
rm -rf -- "$ctx"
"""


def copy_command(spec: dict[str, Any], workdir: str | None, user: str | None) -> tuple[str, dict[str, str]]:
    """A copy step's script and its environment (the destination made absolute from `workdir`;
    the owner the step's user, else the build's user then)."""
    dest = spec["dest"]
    if not dest.startswith("/"):
        dest = (workdir or "/").rstrip("/") + "/" + dest
    owner = spec.get("user") or user or "root"
    return f"bash -c {shlex.quote(COPY_SCRIPT)}", {"UPLOAD": UPLOAD, "SRC": spec["src"], "DEST": dest,
                                                   "OWNER": owner, "MODE": spec.get("mode") or ""}


class Builder:
    def __init__(self, node: NodeRuntime, layers: LayerCache, roots_dir: Path, work_dir: Path, pids: int) -> None:
        self.node, self.layers, self.roots_dir, self.work_dir, self.pids = node, layers, roots_dir, work_dir, pids
        self.claimed: dict[str, str] = {}  # build id -> the root directory it made or reuses (kept from removal)
        # told of the root a build will make or reuse before it looks for it (a fleet's: in the store,
        # so that another host's collector keeps it)
        self.on_root: Callable[[str, Path], None] | None = None

    async def build(self, build_id: str, spec: dict[str, Any], parent: Parent, log: BuildLog,
                    no_cache: bool = False, files: Path | None = None) -> Built:
        """`files`: where the team's uploads for copy steps are, each named by its hash."""
        env, workdir, user = dict(parent.env), parent.workdir, parent.user
        lowers = [parent.root]
        key = parent.key
        cached = 0
        steps = spec["steps"]
        limits = Limits.of_shape(spec["vcpu"], spec["memory_mib"], self.pids, spec["disk_mib"])
        work = self.work_dir / build_id
        work.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            for i, step in enumerate(steps):
                head = f"step {i + 1}/{len(steps)}: {describe(step)}"
                if "env" in step:
                    env[step["env"]["key"]] = step["env"]["value"]
                    log.system(head, i)
                    continue
                if "user" in step:
                    user = step["user"]["name"]
                    log.system(head, i)
                    continue
                upload: Path | None = None
                step_env = env
                if "workdir" in step and len(lowers) == 1 and _ready_dir(parent.root, step["workdir"], user):
                    workdir = step["workdir"]  # the parent has it as the step would leave it: no layer
                    log.system(f"{head} (in the parent already)", i)
                    continue
                if "workdir" in step:
                    workdir = step["workdir"]
                    owner = "" if user == "root" else f" && chown {shlex.quote('user:user')} {shlex.quote(workdir)}"
                    command, as_user = f"mkdir -p -- {shlex.quote(workdir)}{owner}", "root"
                elif "copy" in step:
                    upload = _upload(files, step["copy"]["files"], i)
                    command, copy_env = copy_command(step["copy"], workdir, user)
                    step_env, as_user = {**env, **copy_env}, "root"
                    command += f"  # files {step['copy']['files']}"  # the cache key names the upload
                else:
                    command, as_user = step["run"], user or "root"
                cwd = workdir if "run" in step else None
                key = chain_key(key, {"env": step_env, "workdir": cwd, "user": as_user}, command)
                if not no_cache and self.layers.has(key):
                    cached += 1
                    log.system(f"{head} (cached: layer {key[:12]})", i)
                    lowers.insert(0, self.layers.path(key))
                    continue
                log.system(head, i)
                defaults = boxcmd.Defaults(env=dict(step_env), cwd=cwd, user=as_user)
                layer = await self._run_step(build_id, i, command, defaults, lowers, key, limits, log, work, no_cache,
                                             upload)
                lowers.insert(0, layer)
            rootfs = await self._root(build_id, parent, lowers, stack_key(key, lowers[:-1]), log, work)
            built = Built(rootfs, env, workdir, user, cached)
            if spec.get("start_cmd") or spec.get("ready_cmd"):
                await self._check_start(build_id, spec, built, limits, log)
            return built
        finally:
            shutil.rmtree(work, ignore_errors=True)

    async def _root(self, build_id: str, parent: Parent, lowers: list[Path], key: str, log: BuildLog,
                    work: Path) -> Path:
        """The finished root: the stack flattened, once per stack (named by its layers, so a
        rebuild from the cache, or another template of the team with the same steps, shares it)."""
        if len(lowers) == 1:
            return parent.root  # nothing written: the parent's root serves as it is
        self.claimed[build_id] = key
        final = self.roots_dir / key
        if self.on_root is not None:
            self.on_root(build_id, final / "rootfs")
        if (final / "rootfs").is_dir():
            log.system(f"root cached ({key[:12]})")
            return final / "rootfs"
        log.system(f"flattening {len(lowers) - 1} layer(s) into the template's root")
        partial = self.roots_dir / f"{key}.partial-{build_id}"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            await asyncio.to_thread(flatten, lowers, partial / "rootfs", work / "flat")
            # the parent's root may hold some (hutch/base has mmdebstrap's /dev nodes), and so may
            # layers cached before layers were scrubbed
            for line in (await _scrub(partial / "rootfs", "the template's root")).lines("the template's root"):
                log.system(line)
            try:
                partial.rename(final)
            except OSError:
                if not (final / "rootfs").is_dir():
                    raise  # not another build of the same stack that finished first
        finally:
            await asyncio.to_thread(shutil.rmtree, partial, True)
        return final / "rootfs"

    async def _run_step(self, build_id: str, index: int, command: str, defaults: boxcmd.Defaults,
                        lowers: list[Path], key: str, limits: Limits, log: BuildLog, work: Path,
                        no_cache: bool, upload: Path | None = None) -> Path:
        pending = await asyncio.to_thread(self.layers.begin, key, build_id, limits.disk_mib)
        merged = work / f"step-{index}"
        committed = False
        try:
            await asyncio.to_thread(mounts.mount_overlay, merged, lowers, pending.upper, pending.work)
            try:
                code = await self._in_box(f"build-{build_id[:12]}-{index}", merged, limits, command, defaults, log, index,
                                          upload)
            finally:
                await asyncio.to_thread(mounts.unmount, merged)
            if code != 0:
                why = "timed out" if code is None else f"exited with code {code}"
                raise BuildFailed(BuildFailure.STEP_FAILED, f"step {index + 1} ({describe({'run': command})[:200]}) {why}",
                                  step=index, exit_code=code)
            # the box has ended: what it bound or made stays out of the cache (its whiteouts stay)
            where = f"step {index + 1}'s layer"
            for line in (await _scrub(pending.upper, where, keep_whiteouts=True, step=index)).lines(where):
                log.system(line, index)
            layer = await asyncio.to_thread(self.layers.commit, pending, no_cache)
            committed = True
            return layer
        finally:
            if not committed:
                await asyncio.to_thread(self.layers.discard, pending)

    async def _in_box(self, key: str, root: Path, limits: Limits, command: str, defaults: boxcmd.Defaults,
                      log: BuildLog, index: int, upload: Path | None = None) -> int | None:
        """Run a step's command in a build box; `upload` (a copy step's files) is written to the
        box's /tmp (memory, never the layer) first."""
        try:
            box = await self.node.boot(key, root, limits, writable_root=True)
        except BoxStartError as e:
            raise BuildFailed(BuildFailure.BUILD_FAILED, f"the build box did not start: {e}", step=index) from e
        try:
            if upload is not None:
                size = upload.stat().st_size
                await self._agent(box.runtime_id).write_file(UPLOAD, _chunks_of(upload), True, length=size)
            # the agent ends the command at STEP_TIMEOUT; root in the box could stop it doing so
            return await asyncio.wait_for(boxcmd.run(self._agent(box.runtime_id), command, defaults, STEP_TIMEOUT,
                                                     lambda stream, text: log.output(stream, text, index)),
                                          STEP_TIMEOUT + 60)
        except TimeoutError:
            return None
        except boxcmd.CommandError as e:
            raise BuildFailed(BuildFailure.STEP_FAILED, f"step {index + 1} could not start: {e}", step=index) from e
        except (ApiError, ChannelError) as e:
            raise BuildFailed(BuildFailure.STEP_FAILED, f"the build box stopped during step {index + 1} (out of memory?): {e}",
                              step=index) from e
        finally:
            log.flush()
            await asyncio.shield(self.node.stop(box.runtime_id, key))

    def _agent(self, runtime_id: str) -> BoxAgent:
        """A build's box, just booted; one that ended since is a channel gone."""
        agent = self.node.agent(runtime_id)
        if agent is None:
            raise ChannelError("the box ended as it started")
        return agent

    async def _check_start(self, build_id: str, spec: dict[str, Any], built: Built, limits: Limits,
                           log: BuildLog) -> None:
        """Boot a box from the new root as a sandbox would boot, and see it become ready."""
        log.system("checking the start command and readiness probe in a box of the new template")
        key = f"build-{build_id[:12]}-check"
        try:
            box = await self.node.boot(key, built.rootfs, limits)
        except BoxStartError as e:
            raise BuildFailed(BuildFailure.BUILD_FAILED, f"a box of the new template did not start: {e}") from e
        try:
            defaults = boxcmd.Defaults(env=built.env, cwd=built.workdir, user=built.user)
            await boxcmd.start_and_wait_ready(self._agent(box.runtime_id), spec.get("start_cmd"), spec.get("ready_cmd"),
                                              defaults, spec["ready_timeout_seconds"], lambda text: log.system(text))
        except ChannelError as e:
            raise BuildFailed(BuildFailure.START_FAILED, f"a box of the new template stopped: {e}") from e
        except boxcmd.StartError as e:
            raise BuildFailed(e.code, str(e)) from e
        finally:
            await asyncio.shield(self.node.stop(box.runtime_id, key))


def _ready_dir(root: Path, path: str, user: str | None) -> bool:
    """Whether `root` has `path` as a directory (no link on the way) that a workdir step run as
    `user` would leave as it is: the box user's own unless the step runs as root (it chowns it)."""
    st = roots.lstat_in(root, path)
    return (st is not None and stat.S_ISDIR(st.st_mode)
            and (user == "root" or (st.st_uid, st.st_gid) == (USER.uid, USER.gid)))


def _upload(files: Path | None, digest: str, index: int) -> Path:
    """A copy step's upload, which must have come before its build."""
    found = files / digest if files is not None else None
    if found is None or not found.is_file():
        raise BuildFailed(BuildFailure.INVALID_SPEC, f"step {index + 1}: no files were uploaded for {digest[:16]}...",
                          step=index)
    return found


async def _chunks_of(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as f:
        while chunk := await asyncio.to_thread(f.read, 1 << 20):
            yield chunk


async def _scrub(root: Path, where: str, *, keep_whiteouts: bool = False, step: int | None = None) -> roots.Dropped:
    """roots.scrub off the event loop; a root it cannot check fails the build."""
    try:
        return await asyncio.to_thread(roots.scrub, root, keep_whiteouts=keep_whiteouts)
    except roots.RootError as e:
        raise BuildFailed(BuildFailure.STEP_FAILED if step is not None else BuildFailure.BUILD_FAILED,
                          f"{where} could not be checked: {e}", step=step) from None
