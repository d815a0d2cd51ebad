"""The gVisor driver (hutch.node.driver): every `runsc` call the node makes, each one bounded by a
timeout."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hutch.node.driver import DriverError


class RunscError(DriverError):
    """runsc failed or hung; the message carries what it printed."""


@dataclass(frozen=True)
class RunscConfig:
    state_dir: Path  # runsc's --root: where it keeps container state
    binary: str = "runsc"
    platform: str | None = None  # None: runsc's default (systrap)
    timeout_seconds: float = 60.0
    # "none": an idle box's image is ~20 MB instead of ~5 MB, and pause and resume are each
    # ~60 ms faster; "flate-best-speed" when disk matters more than latency.
    checkpoint_compression: str = "none"

    def global_flags(self, overlay: str = "root:memory", cgroups: bool = True) -> list[str]:
        flags = [
            f"--root={self.state_dir}",
            "--network=none",  # no network card: egress goes through the agent's relay
            # The agent listens on its channel socket and dials the egress socket beside it: the
            # channel directory is the only host directory with sockets the box can see.
            "--host-uds=all",
            # root:memory: the template root is never written. A build box has "none": its root is
            # a host overlay mount whose upper directory is the layer being built.
            f"--overlay2={overlay}",
        ]
        if self.platform:
            flags.append(f"--platform={self.platform}")
        if not cgroups:  # no memory, pid or CPU limit at all: only with the operator's --allow-unlimited-boxes
            flags.append("--ignore-cgroups")
        return flags


def _gone(e: RunscError) -> bool:
    text = str(e).lower()
    return "does not exist" in text or "not found" in text or "no such file" in text


def tail_of(path: Path, limit: int) -> str:
    """The last `limit` bytes of a file a box's PID 1 writes its stderr to until its agent listens
    (runsc's own diagnostics are there too): never read whole, never through a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, limit, max(0, size - limit)).decode(errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def find_runsc() -> str | None:
    return shutil.which("runsc") or next(
        (p for p in ("/usr/bin/runsc", "/usr/sbin/runsc", "/usr/local/bin/runsc") if os.path.exists(p)), None
    )


class Runsc:
    def __init__(self, config: RunscConfig) -> None:
        self.config = config
        config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.running: set[int] = set()  # pids of runsc calls in flight: asyncio reaps those, not the node
        # Boots, restores, checkpoints and deletes are CPU-heavy: a few at a time finish sooner
        # than all at once on a small host (where 20 at once made deletes time out).
        self._heavy = asyncio.Semaphore(max(2, 2 * (os.cpu_count() or 1)))

    async def _heavy_call(self, *args: str, stderr_path: Path | None = None, timeout: float | None = None,
                          overlay: str = "root:memory", cgroups: bool = True) -> str:
        async with self._heavy:
            return await self._call(*args, stderr_path=stderr_path, timeout=timeout, overlay=overlay, cgroups=cgroups)

    async def _call(self, *args: str, stderr_path: Path | None = None, timeout: float | None = None,
                    overlay: str = "root:memory", cgroups: bool = True) -> str:
        argv = [self.config.binary, *self.config.global_flags(overlay, cgroups), *args]
        # stdio: /dev/null or a file for anything that may outlive the call (a detached box keeps
        # inherited pipes open forever); a pipe only for short-lived queries.
        err_file = open(stderr_path, "wb") if stderr_path else None  # noqa: SIM115
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL if err_file else asyncio.subprocess.PIPE,
                stderr=err_file or asyncio.subprocess.PIPE,
                start_new_session=True,  # a Ctrl-C on the server must not reach the boxes
            )
            self.running.add(proc.pid)
            try:
                out, err = await asyncio.wait_for(proc.communicate(), timeout or self.config.timeout_seconds)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):  # it may have ended just now
                    proc.kill()
                await proc.wait()
                raise RunscError(f"runsc {args[0]} timed out") from None
            finally:
                self.running.discard(proc.pid)
        finally:
            if err_file:
                err_file.close()
        if proc.returncode != 0:
            text = (err or b"").decode(errors="replace")
            if stderr_path:
                text = tail_of(stderr_path, 2000)
            raise RunscError(f"runsc {args[0]} failed ({proc.returncode}): {text.strip()[-2000:]}")
        return (out or b"").decode(errors="replace")

    async def run_detached(self, container_id: str, bundle: Path, stderr_path: Path, pid_file: Path,
                           overlay: str = "root:memory", cgroups: bool = True) -> None:
        """Start a box and return once it runs; its sandbox process' pid is left in `pid_file`.
        `overlay`: where its writes go: its memory, a host directory's file ("root:dir=D"), or its
        root directory itself ("none"). Later calls on the box need not repeat it; a restore does.
        Without `cgroups`, the box gets no cgroup, so none of its limits is held."""
        await self._heavy_call("run", "--detach", f"--bundle={bundle}", f"--pid-file={pid_file}", container_id,
                               stderr_path=stderr_path, overlay=overlay, cgroups=cgroups)

    async def state(self, container_id: str) -> dict[str, Any] | None:
        """runsc's view of a container, or None when it does not know it. Any other failure (a
        timeout under load) raises: it says nothing about whether the box is alive."""
        try:
            out = await self._call("state", container_id, timeout=15)
        except RunscError as e:
            if _gone(e):
                return None
            raise
        result: dict[str, Any] = json.loads(out)
        return result

    async def list_ids(self) -> list[str]:
        out = await self._call("list", "--quiet", timeout=15)
        return [line.strip() for line in out.splitlines() if line.strip()]

    async def restore_detached(self, container_id: str, bundle: Path, image_dir: Path, stderr_path: Path,
                               pid_file: Path, overlay: str = "root:memory", cgroups: bool = True) -> None:
        """`overlay` must be of the kind the box was checkpointed with (memory, or a directory)."""
        await self._heavy_call("restore", "--detach", f"--bundle={bundle}", f"--image-path={image_dir}",
                               f"--pid-file={pid_file}", container_id, stderr_path=stderr_path, timeout=120,
                               overlay=overlay, cgroups=cgroups)

    async def checkpoint(self, container_id: str, image_dir: Path, leave_running: bool = False,
                         overlay: str = "root:memory", cgroups: bool = True) -> None:
        """Save a container to `image_dir`; the container stops once saved, unless `leave_running`
        (a snapshot: it runs on from there; runsc then needs the flags of its run: `overlay`, `cgroups`)."""
        await self._heavy_call("checkpoint", f"--image-path={image_dir}", "--exclude-committed-zero-pages",
                               f"--compression={self.config.checkpoint_compression}",
                               *(["--leave-running"] if leave_running else []), container_id, timeout=300,
                               overlay=overlay, cgroups=cgroups)

    async def kill(self, container_id: str, signal: str = "KILL") -> None:
        """Signal the container's init (the agent), not every process in it."""
        await self._call("kill", container_id, signal, timeout=15)

    async def delete(self, container_id: str) -> None:
        """Stop and remove a container; quiet when it is already gone."""
        try:
            await self._heavy_call("delete", "--force", container_id, timeout=60)
        except RunscError as e:
            if not _gone(e):
                raise
