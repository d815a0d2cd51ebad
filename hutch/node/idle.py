"""Tiered idleness: a box nothing has used for a while is frozen, and thawed by its next call.

An idle gVisor sandbox still wakes its sentry hundreds of times a second (runsc 20240729's systrap
platform polls on a timer; see bench/idle.py), about 2% of a core per box on a small host. A
frozen box costs none: its cgroup's freezer (what `runsc pause` uses) stops every process of it,
the sentry, its stubs and its gofer, with everything kept in memory.

A box is frozen once, for `after` seconds: no call of the host's reached its agent, no answer of
its agent is still open (a command's stream, a process' events, a watch, a download), no tunnel
to it is open, it holds no egress connection, and it used under `IDLE_CPU_SHARE` of a core (a box
at work is never stopped mid-work). Every request through its pinned channel thaws it first (see
`Meter`: a data-plane call, the pool's claim, a pause's quiesce), and so does every driver call on
its container (`Thawing`: a checkpoint, a kill, a delete, a state): a frozen box's signals and
SIGKILL, and runsc's questions to it, would otherwise wait for a thaw that never comes. A server
that stops thaws the boxes it froze.

A frozen box is woken every `WAKE_SECONDS` for `WAKE_WINDOW`, so its timers fire (a `sleep`, a
cron-like loop, a timeout) at most that late: a woken box that used more than `WAKE_BUSY_SHARE` of
a core in its window (a timer fired and its work began), or opened a call or an egress connection,
stays awake and is judged idle again from then; one that did not is frozen again. An idle sentry
thawed for 20 ms uses ~1.3 ms of CPU, so the wakes cost ~0.07% of a core a box. The warm pool's
waiting boxes, which the pool froze, are never woken: nothing runs in them.

Inside a frozen box, time goes on as it does for a paused VM whose clock follows the host's: the
realtime and monotonic clocks jump by the time frozen, a sleep or timer that came due meanwhile
ends (or fires) at the next wake or thaw, once, and a process carries on from where it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from hutch.node import metrics
from hutch.node.driver import Driver
from hutch.node.uds_transport import UnixTransport

log = logging.getLogger("hutch.idle")

CHECK_SECONDS = 0.5  # a frozen box wakes within WAKE_SECONDS plus this
UNHELD_SECONDS = 120.0  # a pinned channel whose box the node never held (a failed boot) is forgotten then
IDLE_CPU_SHARE = 0.10  # of one core, over the idle window: the sentry's own floor is ~0.02
WAKE_SECONDS = 2.0  # a frozen box's timers fire at most this late
WAKE_WINDOW = 0.02  # how long a wake lets the box run
WAKE_BUSY_SHARE = 0.25  # of one core over a wake: an idle sentry's catch-up uses ~0.06, a fired timer ~0.9

Dial = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


def freezer_file(runtime_id: str) -> tuple[Path, str, str]:
    """The box's freezer file and what freezes and thaws it (cgroup v2, else v1)."""
    if metrics.cgroup_v2():
        return metrics.CGROUP_ROOT / "hutch" / runtime_id / "cgroup.freeze", "1", "0"
    return metrics.CGROUP_ROOT / "freezer" / "hutch" / runtime_id / "freezer.state", "FROZEN", "THAWED"


def freeze(runtime_id: str) -> bool:
    path, frozen, _ = freezer_file(runtime_id)
    try:
        path.write_text(frozen)
    except OSError as e:  # no freezer for it (a host without the controller, a box already gone)
        log.warning("could not freeze box %s: %s", runtime_id, e)
        return False
    return True


def is_frozen(runtime_id: str) -> bool:
    """Whether the box's cgroup is frozen or on its way (cgroup v1's FREEZING)."""
    path, _, thawed = freezer_file(runtime_id)
    try:
        return path.read_text().strip() != thawed
    except OSError:
        return False


def thaw(runtime_id: str) -> None:
    """Thaw a box's cgroup (quiet when it has none, or is not frozen)."""
    path, _, thawed = freezer_file(runtime_id)
    with contextlib.suppress(OSError):
        path.write_text(thawed)


class _Counted(httpx.AsyncByteStream):
    """An answer's body that tells its meter once it is closed."""

    def __init__(self, inner: httpx.AsyncByteStream, done: Callable[[], None]) -> None:
        self.inner, self._done = inner, done

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            yield chunk

    async def aclose(self) -> None:
        done, self._done = self._done, lambda: None
        try:
            await self.inner.aclose()
        finally:
            done()


class _Transport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, meter: Meter) -> None:
        self.inner, self.meter = inner, meter

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.meter.used()
        self.meter.answers += 1
        try:
            response = await self.inner.handle_async_request(request)
        except BaseException:
            self.meter.answers -= 1
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _Counted(response.stream, self.meter.answered)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Meter:
    """What of one box's channel is in use, for its freezer; each request through it thaws the box."""

    runtime_id: str
    on_use: Callable[[str], None]
    answers: int = 0  # requests sent whose answers are not closed yet
    tunnels: weakref.WeakSet[asyncio.StreamWriter] = field(default_factory=weakref.WeakSet)

    def used(self) -> None:
        self.on_use(self.runtime_id)

    def answered(self) -> None:
        self.answers -= 1
        self.used()  # an answer that just ended starts the idle time again

    def busy(self) -> bool:
        return self.answers > 0 or any(not w.is_closing() for w in self.tunnels)

    def channel(self, uds: str) -> tuple[httpx.AsyncBaseTransport, Dial]:
        """The transport and the tunnel dialer for an agent client of the socket at `uds`."""
        transport = _Transport(UnixTransport(uds), self)

        async def dial() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            self.used()
            reader, writer = await asyncio.open_unix_connection(uds)
            self.tunnels.add(writer)
            return reader, writer

        return transport, dial


@dataclass
class _Box:
    meter: Meter
    since: float  # monotonic time of its last use
    cpu_since: int | None = None  # its cgroup's CPU ns then (None: not read yet)
    frozen: bool = False
    held: bool = False  # seen among the node's boxes (a boot pins its channel before the node holds it)
    parked: bool = False  # frozen by another (the warm pool): never woken here
    wake_at: float = 0.0  # monotonic time of its next wake, while frozen
    waking: tuple[int, float] | None = None  # its cgroup's CPU ns and the time at the wake under way


class Freezer:
    """The node's frozen boxes. `after` seconds idle freezes a box; `egress_open` says how many
    egress connections a box (by key) holds."""

    def __init__(self, after: float, egress_open: Callable[[str], int] = lambda _key: 0) -> None:
        self.after, self.egress_open = after, egress_open
        self._boxes: dict[str, _Box] = {}
        self._task: asyncio.Task[None] | None = None

    def meter(self, runtime_id: str) -> Meter:
        """A new pin of a box's channel (a boot, a restore, an adopt): thawed, in case a server that
        was killed left it frozen, and idle from now."""
        thaw(runtime_id)
        box = self._boxes[runtime_id] = _Box(Meter(runtime_id, self.used), time.monotonic())
        return box.meter

    def channel(self, runtime_id: str) -> Callable[[str], tuple[httpx.AsyncBaseTransport, Dial]]:
        """How a pin of the box's socket talks through it (hutch.node.agent.pin): metered."""
        return lambda uds: self.meter(runtime_id).channel(uds)

    def used(self, runtime_id: str) -> None:
        box = self._boxes.get(runtime_id)
        if box is None:
            return
        box.since, box.cpu_since = time.monotonic(), None
        if box.frozen or box.parked:
            thaw(runtime_id)
            box.frozen = box.parked = False
            box.waking = None

    def start(self, held: Callable[[], dict[str, str]]) -> None:
        if self.after > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch(held))

    async def close(self) -> None:
        """Stop freezing, and thaw every box frozen here: none outlives its server frozen."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for runtime_id in list(self._boxes):
            self.used(runtime_id)

    async def _watch(self, held: Callable[[], dict[str, str]]) -> None:
        while True:
            await asyncio.sleep(CHECK_SECONDS)
            boxes, now = held(), time.monotonic()
            for runtime_id, box in list(self._boxes.items()):
                if runtime_id in boxes:
                    box.held = True
                elif box.held or now - box.since > UNHELD_SECONDS:  # stopped, paused, or its boot failed
                    del self._boxes[runtime_id]
            for runtime_id, key in boxes.items():
                self._consider(runtime_id, key)

    def _consider(self, runtime_id: str, key: str) -> None:
        box = self._boxes.get(runtime_id)
        if box is None or box.parked:
            return
        now = time.monotonic()
        if box.frozen:
            if box.waking is None and now >= box.wake_at:
                self._wake(runtime_id, key, box)
            return
        if box.meter.busy() or self.egress_open(key):
            box.since, box.cpu_since = now, None
            return
        if box.cpu_since is not None and now - box.since < self.after:
            return  # its cgroup is read twice a window, at its first look and at its end
        cpu = metrics.read_cpu_ns(runtime_id)
        if cpu is None:
            return
        if box.cpu_since is None:  # the idle window's CPU is counted from its first look
            box.since, box.cpu_since = now, cpu
            return
        if (cpu - box.cpu_since) / 1e9 > IDLE_CPU_SHARE * (now - box.since):  # at work: not idle
            box.since, box.cpu_since = now, cpu
            return
        if is_frozen(runtime_id):  # the warm pool's, waiting for its claim
            box.parked = True
            return
        box.frozen = freeze(runtime_id)
        box.wake_at = now + WAKE_SECONDS

    def _wake(self, runtime_id: str, key: str, box: _Box) -> None:
        """Let a frozen box run for WAKE_WINDOW, so what came due in it fires; then judge it."""
        cpu = metrics.read_cpu_ns(runtime_id)
        if cpu is None:
            return
        box.waking = cpu, time.monotonic()
        thaw(runtime_id)
        asyncio.get_running_loop().call_later(WAKE_WINDOW, self._woken, runtime_id, key, box)

    def _woken(self, runtime_id: str, key: str, box: _Box) -> None:
        if self._boxes.get(runtime_id) is not box or box.waking is None:
            return  # gone, or used meanwhile (which thawed it for good)
        (cpu, started), box.waking = box.waking, None
        now = time.monotonic()
        used = metrics.read_cpu_ns(runtime_id)
        # over the time it was awake, not WAKE_WINDOW: a loop running late must not find every box busy
        busy = used is None or (used - cpu) / 1e9 > WAKE_BUSY_SHARE * (now - started)
        if busy or box.meter.busy() or self.egress_open(key):  # something in it woke up: awake, idle from now
            box.frozen = False
            box.since, box.cpu_since = now, None
            return
        box.frozen = freeze(runtime_id)
        box.wake_at = now + WAKE_SECONDS


class Thawing:
    """A driver whose calls on a running container thaw it first (a hutch.node.driver.Driver);
    `freezer`, if idle boxes are frozen, learns of each call as a use of the box."""

    def __init__(self, driver: Driver, freezer: Freezer | None) -> None:
        self.driver, self.freezer = driver, freezer
        self.running = driver.running  # the same set, which the driver keeps

    def _thaw(self, container_id: str) -> None:
        if self.freezer is not None:
            self.freezer.used(container_id)
        thaw(container_id)  # one frozen by the warm pool, or by a killed server, too

    async def run_detached(self, container_id: str, bundle: Path, stderr_path: Path, pid_file: Path,
                           overlay: str = "root:memory", cgroups: bool = True) -> None:
        await self.driver.run_detached(container_id, bundle, stderr_path, pid_file, overlay=overlay, cgroups=cgroups)

    async def restore_detached(self, container_id: str, bundle: Path, image_dir: Path, stderr_path: Path,
                               pid_file: Path, overlay: str = "root:memory", cgroups: bool = True) -> None:
        await self.driver.restore_detached(container_id, bundle, image_dir, stderr_path, pid_file, overlay=overlay,
                                           cgroups=cgroups)

    async def checkpoint(self, container_id: str, image_dir: Path, leave_running: bool = False,
                         overlay: str = "root:memory", cgroups: bool = True) -> None:
        self._thaw(container_id)
        await self.driver.checkpoint(container_id, image_dir, leave_running=leave_running, overlay=overlay,
                                     cgroups=cgroups)

    async def kill(self, container_id: str, signal: str = "KILL") -> None:
        self._thaw(container_id)
        await self.driver.kill(container_id, signal)

    async def delete(self, container_id: str) -> None:
        self._thaw(container_id)
        await self.driver.delete(container_id)

    async def state(self, container_id: str) -> dict[str, Any] | None:
        self._thaw(container_id)  # runsc state asks the sandbox: a frozen one never answers
        return await self.driver.state(container_id)

    async def list_ids(self) -> list[str]:
        return await self.driver.list_ids()
