"""A box's files without its memory (a files-only snapshot): what it changed of its template root,
saved from the running box and laid over a fresh box of the same root.

What changed is found by comparing: the box lists every path of its root filesystem with its
ctime (which no process can set back), and the host walks the template root (its own files,
never a box's) with lstat. A path the template lacks or whose ctime moved is saved, by `tar` in
the box; a template path the box lacks was removed. The host never opens a path the box names:
it compares strings, writes the list back into the box, and streams the box's tar to disk within
a bound. What is not the box's root filesystem is not saved: /tmp (a tmpfs, as after a reboot),
/proc, /sys, /dev and hutch's own mounts.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import secrets
import shlex
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

from hutch.errors import ApiError, Code
from hutch.guest import protocol
from hutch.node import boxcmd
from hutch.node.api import BoxAgent

MARKER = "hutch-files-only"  # in a checkpoint's directory: a files-only pause (its resume boots afresh)
FILES = "files.tar"  # in a files-only snapshot's directory: the changed paths, as tar made them in the box
REMOVED = "removed"  # the template's paths the box had removed, NUL-separated
WORK = "/var/tmp/.hutch-snapshot"  # the box's scratch directory while it is saved or restored (on its root)
PRUNED = ("/proc", "/sys", "/dev", "/tmp", protocol.GUEST_ROOT, protocol.SYSTEM_BUNDLE, WORK)
MAX_LISTING = 32 * 2**20  # of the box's list of paths (about 300,000 of them)
# A save's whole budget (its listing, the host's comparison, its tar and their downloads): the box
# runs `find` and `tar` itself, and one that drips them is cut off here, never held to other boxes
SAVE_SECONDS = 900.0
CLEAR_SECONDS = 30.0  # removing a save's scratch directory, at best
ROOT = boxcmd.Defaults(env={}, cwd="/", user="root")
OWN_SLACK = 2**20  # past what a box holds of its own, what a tar of it may still take (its end blocks)
log = logging.getLogger("hutch.boxfiles")
# Saves' comparisons at once: each holds a template's paths (and may walk one), bounded together
_comparing = asyncio.Semaphore(4)
_clearing: set[asyncio.Future[None]] = set()  # scratch directories cleared after a save cut short, at best


class TooLarge(Exception):
    """The box's files take more than the caller may keep; nothing of them is kept."""

    def __init__(self, limit: int, what: str = "files") -> None:
        super().__init__(f"the box's {what} take more than the {limit / 2**20:.0f} MiB they may")
        self.limit, self.what = limit, what


async def _run(agent: BoxAgent, script: str, what: str, ok: tuple[int, ...] = (0,),
               seconds: float = SAVE_SECONDS) -> None:
    code = await boxcmd.run(agent, script, ROOT, timeout=seconds)
    if code not in ok:
        raise ApiError(Code.SNAPSHOT_FAILED, f"the box could not {what} (exit {code})")


async def _clear(agent: BoxAgent, work: str) -> None:
    """Remove a save's scratch directory from the box, at best: what stays is on the box's own disk,
    a box's root can keep writing into it as it goes, and the save's own answer (or its error) is
    the one that counts."""
    try:
        async with asyncio.timeout(CLEAR_SECONDS):
            await _run(agent, f"rm -rf {work}", "clear its scratch directory", seconds=CLEAR_SECONDS)
    except Exception as e:  # never the save's answer
        log.info("a save's scratch directory stays in the box: %s", e)


async def _download(agent: BoxAgent, path: str, limit: int, target: Path | None = None,
                    what: str = "files") -> bytes:
    """A file of the box, at most `limit` bytes (else TooLarge): into `target`, or returned."""
    got, kept = 0, bytearray()
    download = await agent.read_file(path, root=True)
    out = open(target, "wb") if target else None  # noqa: SIM115 (closed below, on every way out)
    try:
        async for chunk in download:
            got += len(chunk)
            if got > limit:
                raise TooLarge(limit, what)
            if out:
                await asyncio.to_thread(out.write, chunk)
            else:
                kept += chunk
    finally:
        await download.aclose()
        if out:
            out.close()
    return bytes(kept)


async def _upload(agent: BoxAgent, path: str, data: bytes | Path) -> None:
    async def body() -> AsyncIterator[bytes]:
        if isinstance(data, bytes):
            yield data
            return
        with open(data, "rb") as f:
            while chunk := await asyncio.to_thread(f.read, 1 << 20):
                yield chunk

    await agent.write_file(path, body(), root=True)


@functools.lru_cache(maxsize=4)  # a template root never changes once built
def template_paths(rootfs: Path) -> dict[str, float]:
    """Every path of a template root, as the box sees it, with its ctime (lstat: links never followed)."""
    found: dict[str, float] = {"/": os.lstat(rootfs).st_ctime}
    base = len(str(rootfs))
    for top, dirs, files in os.walk(rootfs, followlinks=False):
        for name in (*dirs, *files):
            full = os.path.join(top, name)
            try:
                found[full[base:]] = os.lstat(full).st_ctime
            except OSError:
                continue
    return found


def _pruned(path: str, skip: tuple[str, ...] = ()) -> bool:
    return any(path == p or path.startswith(p + "/") for p in (*PRUNED, *skip))


async def save(agent: BoxAgent, rootfs: Path, image: Path, limit: int, own: int, skip: tuple[str, ...] = ()) -> int:
    """Save what the running box changed of `rootfs` into `image`; the bytes saved. The tar is
    made on the box's own root first (it counts against the box's disk, or its memory), then
    streamed out. Raises TooLarge past `limit` (or a list of paths past MAX_LISTING), or past what
    the box itself can hold (`own`: where its writes are stored, disk or memory): a box's root
    controls the tar, and a sparse file is no way to make the host write more. `skip`: where
    volumes are mounted (their files are the volume's, never the box's). Saves run at once, each in
    a scratch directory of its own; the host's comparisons a few at a time, each bounded (the list
    streams through a file, and only the template's paths are kept). All of it within SAVE_SECONDS,
    else snapshot_failed: the box's own programs pace it."""
    try:
        async with asyncio.timeout(SAVE_SECONDS):
            return await _save(agent, rootfs, image, limit, own, skip)
    except TimeoutError:
        raise ApiError(Code.SNAPSHOT_FAILED, f"the box's files were not saved within {SAVE_SECONDS:.0f} s") from None


async def _save(agent: BoxAgent, rootfs: Path, image: Path, limit: int, own: int, skip: tuple[str, ...]) -> int:
    work = f"{WORK}/{secrets.token_hex(8)}"  # this save's own: two saves of one box never share one
    prune = " -o ".join(f"-path {shlex.quote(p)}" for p in (*PRUNED, *skip))
    await _run(agent, f"mkdir -p -m 700 {WORK} && mkdir -m 700 {work} && "
                      f"find / -xdev \\( {prune} \\) -prune -o -printf '%C@ %p\\0' > {work}/list", "list its files")
    image.mkdir(parents=True, mode=0o700, exist_ok=True)
    listing, changed_file = image / ".listing", image / ".changed"
    try:
        try:
            await _download(agent, f"{work}/list", MAX_LISTING, listing, what="list of paths")
            async with _comparing:  # the host's work, bounded; never while the box's own programs run
                template = await asyncio.to_thread(template_paths, rootfs)
                await asyncio.to_thread(_compare, listing, template, skip, image / REMOVED, changed_file)
            await _upload(agent, f"{work}/changed", changed_file)
        finally:
            listing.unlink(missing_ok=True)
            changed_file.unlink(missing_ok=True)
        # The box runs on: a path gone since it was listed is skipped, and one that changed as it
        # was read is tar's exit 1 (its content as it was read then)
        await _run(agent, f"tar --null --no-recursion --numeric-owner --ignore-failed-read -C / "
                          f"-cf {work}/files.tar -T {work}/changed", "save its files", ok=(0, 1))
        # a tar made in the box is stored on its own disk (or in its memory), headers and all: one
        # larger is a sparse file the box's root made, and the host does not write it out
        own_bound = own + OWN_SLACK
        await _download(agent, f"{work}/files.tar", min(own_bound, limit), image / FILES,
                        what="files, more than its own disk holds," if own_bound < limit else "files")
    except asyncio.CancelledError:  # cut short (a kill, the deadline): the box's own rm is not waited for
        clearing = asyncio.ensure_future(_clear(agent, work))
        _clearing.add(clearing)
        clearing.add_done_callback(_clearing.discard)
        raise
    except BaseException:
        await _clear(agent, work)
        raise
    await _clear(agent, work)
    return (image / FILES).stat().st_size + (image / REMOVED).stat().st_size


def _compare(listing: Path, template: dict[str, float], skip: tuple[str, ...], removed_out: Path,
             changed_out: Path) -> int:
    """The box's list of paths (`%C@ %p\\0` each) against the template's, read as it streams (a
    thread's work: never the event loop's), writing the changed paths and the removed ones
    (NUL-separated); how many changed. What it holds is the template's paths, not the box's."""
    seen: set[str] = set()  # of the template's paths only
    changed = 0
    with open(listing, "rb") as f, open(changed_out, "wb") as out:
        rest = b""
        while chunk := f.read(1 << 20):
            items = (rest + chunk).split(b"\0")
            rest = items.pop()
            for item in items:
                changed += _one(item, template, skip, seen, out)
        if rest:
            changed += _one(rest, template, skip, seen, out)
    removed = [p for p in template if p not in seen and p != "/" and not _pruned(p, skip)]
    removed_out.write_bytes(b"\0".join(p.encode("utf-8", "surrogateescape") for p in removed))
    return changed


def _one(item: bytes, template: dict[str, float], skip: tuple[str, ...], seen: set[str], out: BinaryIO) -> int:
    """One listed path: written to `out` (1) if the template lacks it or its ctime moved."""
    stamp, _, raw = item.partition(b" ")
    path = raw.decode("utf-8", "surrogateescape")
    if not path.startswith("/") or _pruned(path, skip):
        return 0
    before = template.get(path)
    if before is not None:
        seen.add(path)
    try:
        ctime = float(stamp)
    except ValueError:
        ctime = float("inf")
    if path == "/" or (before is not None and abs(ctime - before) <= 1e-3):
        return 0
    out.write(raw + b"\0")
    return 1


async def restore(agent: BoxAgent, image: Path, skip: tuple[str, ...] = ()) -> None:
    """Lay a files-only snapshot over a fresh box of its template: removals, then the saved files;
    nothing of it at or under `skip`, where the new box mounts volumes (their files are live). All
    of it within SAVE_SECONDS: the files laid back are the old box's, its programs among them."""
    try:
        async with asyncio.timeout(SAVE_SECONDS):
            await _restore(agent, image, skip)
    except TimeoutError:
        raise ApiError(Code.RESUME_FAILED, f"the box's files were not laid back within {SAVE_SECONDS:.0f} s") from None


async def _restore(agent: BoxAgent, image: Path, skip: tuple[str, ...]) -> None:
    await _run(agent, f"rm -rf {WORK} && mkdir -m 700 {WORK}", "make its scratch directory")
    removed = await asyncio.to_thread((image / REMOVED).read_bytes)  # written by the host (save)
    kept = [p for p in removed.split(b"\0") if p and not _pruned(p.decode("utf-8", "surrogateescape"), skip)]
    await _upload(agent, f"{WORK}/removed", b"\0".join(kept))
    await _upload(agent, f"{WORK}/files.tar", image / FILES)
    # tar's member names are the paths without their leading "/"; an excluded directory's members go too
    excluded = " ".join(f"--exclude={shlex.quote(p.lstrip('/'))}" for p in skip)
    await _run(agent, f"xargs -0 -r rm -rf -- < {WORK}/removed && tar --numeric-owner --anchored --no-wildcards "
                      f"{excluded} -xpf {WORK}/files.tar -C / && rm -rf {WORK}",
               "take its files back")
