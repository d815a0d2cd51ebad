"""The seam between the control plane and the node: all the server may ask of the boxes on a host.

`NodeRuntime` is the node (boot, adopt, pause, resume, stop, watch, capacity); `BoxAgent` is one
box's guest agent (commands, processes, files, tunnels). `hutch.node.node.Node` and
`hutch.node.agent.AgentClient` implement them in the server's process today; a node behind a
network implements the same. So everything that crosses is what a wire could carry: plain data in,
plain data or streams out, boxes named by runtime id, failures as `hutch.errors.ApiError`s.

What an agent sends is checked before it crosses (root in a box can replace the agent): events,
entries and process descriptions arrive here with every field of the type these types say.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NotRequired, Protocol, TypedDict, TypeVar

from hutch.errors import ApiError, Code
from hutch.guest import protocol
from hutch.node.spec import Limits

T_co = TypeVar("T_co", covariant=True)


# --- failures -------------------------------------------------------------------------------------

class BoxStartError(RuntimeError):
    """The box did not come up; nothing of it is left behind."""


class LimitsUnavailable(BoxStartError):
    """runsc could not give the box a cgroup, so its memory and pid limits could not be held: it
    was not started (a node may allow such boxes: `hutch serve --allow-unlimited-boxes`)."""


class NoSpaceError(OSError):
    """Not enough disk for a box's checkpoint; the box was not touched."""


class ChannelError(RuntimeError):
    """The box's channel is not open (the box is being paused: find it again and call again), or
    holds something other than the agent's socket."""


class AgentUnreachable(ApiError):
    """The agent did not take the call: no answer, or the connection dropped. Whether the box
    died is the caller's to find out."""

    def __init__(self, message: str) -> None:
        super().__init__(Code.SANDBOX_UNREACHABLE, message)


class AgentProtocolError(ApiError):
    """The agent answered with something that is not the protocol: a 502."""

    def __init__(self, message: str) -> None:
        super().__init__(Code.AGENT_ERROR, message)


# --- what crosses ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class BoxRef:
    """A box the node runs: this run of it (`runtime_id`, new at each resume) and its key (its
    host directory, the same for its whole life)."""

    runtime_id: str
    key: str
    node: str | None = None  # the fleet node it runs on (None: this host's own)


@dataclass(frozen=True)
class VolumeMount:
    """A volume a box mounts (hutch.node.volumes): at `path` in the box, read-only or not."""

    volume_id: str
    path: str
    read_only: bool = False


CHECKPOINT_SLACK = 32 * 2**20  # a checkpoint's disk beyond the sandbox's resident memory, which bounds its image


@dataclass(frozen=True)
class Capacity:
    """What the node can say of its room: the boxes it holds and the host they share."""

    boxes: int
    cpus: int
    memory_bytes: int
    memory_available_bytes: int
    cpu_caps: bool  # whether boxes get CPU caps (a host without the cgroup CPU controller: no)
    disk_caps: bool  # whether boxes get disks of their own (no loop devices: no)
    # whether boxes are held to their memory and pid limits: no only on a host that refuses runsc a
    # cgroup and whose operator allowed unlimited boxes (--allow-unlimited-boxes)
    limits: bool = True


@dataclass(frozen=True, slots=True)
class UsageSample:
    """One sample of what a box used (hutch.node.metrics): CPU over the interval before it, as a
    percentage of the box's own CPUs; the memory charged to it, what its limit holds (gVisor keeps
    a box's memory in a memory file, so most of it is counted as the cgroup's cache too); bytes on
    its own disk."""

    timestamp: float  # Unix seconds
    cpu_used_pct: float
    mem_used: int
    mem_cache: int
    disk_used: int


@dataclass(frozen=True)
class Command:
    """A shell command for the agent; None: the agent's default (the box user, their home)."""

    cmd: str
    cwd: str | None = None
    env: dict[str, str] | None = None
    user: str | None = None  # "root", or the box user


# --- events: what a command, a process or a watch says as it runs --------------------------------
# Built only where the agent's lines are parsed (hutch.node.agent), every field checked; the layers
# above match on these types and never see the agent's own names for them.

@dataclass(frozen=True, slots=True)
class Started:
    """The command started, as process `pid` of the box."""

    pid: int


@dataclass(frozen=True, slots=True)
class StartFailed:
    """The command could not start: `code` is the agent's own word for why (not necessarily one
    of the catalogue's), `message` says it to a person."""

    code: str
    message: str

    @property
    def bad_cwd(self) -> bool:
        """Its working directory is missing, or not a directory."""
        return self.code == protocol.ERR_BAD_CWD


@dataclass(frozen=True, slots=True)
class Output:
    """Text the process wrote to one of its streams (a terminal's is all "stdout")."""

    stream: Literal["stdout", "stderr"]
    data: str
    seq: int | None = None  # a spawned process' place in its buffer (a command's output has none)


@dataclass(frozen=True, slots=True)
class Exited:
    """The process ended: its exit code, None if the agent ended it at its timeout."""

    code: int | None
    timed_out: bool
    seq: int | None = None  # as Output's


@dataclass(frozen=True, slots=True)
class Dropped:
    """A spawned process' buffer lost this many characters of output before what follows."""

    chars: int


@dataclass(frozen=True, slots=True)
class Ping:
    """Still running, and so is the box (every 10 s of quiet)."""


# A command's or a spawned process' events: Started (or StartFailed) first for a command, then
# Output, Dropped (a process' replay only) and Pings, until Exited.
Event = Started | StartFailed | Output | Exited | Dropped | Ping


# What an entry is and what a watch saw happen to it: the agent's words, which the API keeps
# (hutch.services.models uses these same types).
EntryType = Literal["file", "dir", "symlink", "other"]
ChangeType = Literal["create", "write", "remove", "rename", "chmod"]


class LinkEnd(TypedDict):
    """Where a link leads: the path with no link left in it, and what is there."""

    path: str
    type: EntryType
    mode: int


class Entry(TypedDict):
    """A file, directory or link in the box as lstat sees it, each field checked."""

    name: str
    path: str
    type: EntryType
    size: int
    mode: int
    permissions: str
    owner: str
    group: str
    mtime: float  # a time datetime can hold
    target: NotRequired[str | None]
    link: NotRequired[LinkEnd | None]  # a link's end, every link on the way resolved
    metadata: NotRequired[dict[str, str]]  # E2B's user.e2b.* xattrs, prefix stripped
    # what a volume's entries (hutch.node.volfiles) add, as E2B's volume API shows them
    uid: NotRequired[int]
    gid: NotRequired[int]
    atime: NotRequired[float]
    ctime: NotRequired[float]


class ProcessDesc(TypedDict):
    """A spawned process, as the agent describes it, each field checked."""

    pid: int
    command: str
    user: Literal["user", "root"]
    pty: bool
    started_at: float  # a time datetime can hold
    exit_code: int | None


@dataclass(frozen=True, slots=True)
class FsChange:
    """One change a watch saw, relative to the watched directory; with it, if asked for, the entry
    as it was then (a create, write or chmod of what still is)."""

    name: str
    type: ChangeType
    entry: Entry | None = None


class Stream(Protocol[T_co]):
    """Items as they come from the box, until it ends; `aclose` lets it go, read or not."""

    def __aiter__(self) -> AsyncIterator[T_co]: ...

    async def aclose(self) -> None: ...


class Download(Stream[bytes], Protocol):
    """A file's (or a zip's) bytes out of the box; `size` when the agent said it beforehand."""

    @property
    def size(self) -> int | None: ...


Tunnel = tuple[asyncio.StreamReader, asyncio.StreamWriter]  # bytes to and from a port in the box


# --- the box's agent ------------------------------------------------------------------------------

class BoxAgent(Protocol):
    """One box's agent. Every call raises ChannelError if the box is being paused (nothing was
    sent), AgentUnreachable if the agent did not take it, and an ApiError with the catalogue's
    code for what the agent refused or answered wrongly."""

    async def health(self, timeout: float) -> bool:
        """Whether the agent answers, within `timeout` seconds. Never raises."""
        ...

    async def quiesce(self) -> None:
        """Close every host socket (before a checkpoint)."""
        ...

    async def exec(self, command: Command, timeout: float | None) -> Stream[Event]:
        """Run a command; its events from Started (or StartFailed) to Exited, with Pings meanwhile.
        `timeout`: the agent ends it after that many seconds."""
        ...

    async def spawn(self, command: Command, pty: tuple[int, int] | None) -> ProcessDesc:
        """Start a long-lived process (on a terminal of (rows, cols), if given)."""
        ...

    async def processes(self) -> list[ProcessDesc]:
        """The spawned processes that still run."""
        ...

    async def process(self, pid: int) -> ProcessDesc:
        """One spawned process, ended or not."""
        ...

    async def signal(self, pid: int, signal: int) -> bool:
        """Signal a process' group; False if it had already ended."""
        ...

    async def write_stdin(self, pid: int, data: bytes) -> None: ...

    async def close_stdin(self, pid: int) -> None: ...

    async def resize(self, pid: int, rows: int, cols: int) -> None: ...

    async def follow(self, pid: int, after: int | None) -> Stream[Event]:
        """A process' buffered output (past sequence number `after`), then its live output."""
        ...

    async def write_file(self, path: str, body: AsyncIterator[bytes], root: bool,
                         metadata: dict[str, str] | None = None, length: int | None = None) -> int:
        """Write `body` to `path` (as root, or the box user), with E2B's metadata (`user.e2b.*`
        xattrs, replacing any the file had); the size written. `length`: the body's, if known."""
        ...

    async def read_file(self, path: str, root: bool) -> Download: ...

    async def zip_dir(self, path: str, root: bool) -> Download: ...

    async def stat(self, path: str, root: bool) -> Entry: ...

    async def list_dir(self, path: str, depth: int, root: bool) -> list[Entry]: ...

    async def make_dir(self, path: str, root: bool) -> tuple[Entry, bool]:
        """mkdir -p; False if it was a directory already."""
        ...

    async def move(self, source: str, destination: str, root: bool) -> Entry:
        """Rename; the destination's entry."""
        ...

    async def remove(self, path: str, root: bool) -> None: ...

    async def watch(self, path: str, recursive: bool, entries: bool = False) -> Stream[FsChange | Ping]:
        """A directory's changes (Ping: the agent's keep-alive, every 10 s of quiet); with
        `entries`, a create, write or chmod carries the entry as it is then (if it still is)."""
        ...

    async def open_tunnel(self, port: int) -> Tunnel:
        """A byte stream to 127.0.0.1:`port` inside the box (preview URLs)."""
        ...


# --- the node -------------------------------------------------------------------------------------

class NodeRuntime(Protocol):
    """The boxes on one host. A box's egress listener is the node's own business: opened when
    the box boots, resumes or is adopted, closed with every connection when it pauses or stops."""

    def start_reaping(self) -> None:
        """Start collecting the exits of the node's processes (once, in the running loop)."""
        ...

    def notify_exits(self, callback: Callable[[str], None]) -> None:
        """Call `callback(runtime_id)` when a box ends without being stopped (memory limit,
        crash, an outside kill)."""
        ...

    async def boot(self, key: str, rootfs: Path, limits: Limits, writable_root: bool = False,
                   volumes: tuple[VolumeMount, ...] = ()) -> BoxRef:
        """Boot a box from a template root, with `volumes` mounted; its agent answers when this
        returns. `key` names its host directory for its whole life. With `writable_root` (a
        template build) its writes land in `rootfs` itself, and it is never paused. Raises
        BoxStartError."""
        ...

    async def restore(self, key: str, rootfs: Path, limits: Limits, image_dir: Path,
                      volumes: tuple[VolumeMount, ...] = ()) -> BoxRef:
        """Resume a paused box from its checkpoint, under a new runtime id, with the volumes it
        had mounted mounted again."""
        ...

    async def pause(self, runtime_id: str, image_dir: Path) -> None:
        """Quiesce the box's agent, checkpoint the box to `image_dir` and free it; if that fails
        the box runs on. Raises NoSpaceError (before touching the box) when the disk is short."""
        ...

    async def snapshot(self, runtime_id: str, image_dir: Path) -> None:
        """Checkpoint the box to `image_dir` and let it run on (stopped only while it is saved);
        its agent listens again after, whether the checkpoint worked or not. Raises NoSpaceError
        (before touching the box) when the disk is short."""
        ...

    async def wake(self, runtime_id: str) -> None:
        """Tell a box's agent to listen again (after a quiesce that no checkpoint followed)."""
        ...

    async def stop(self, runtime_id: str, key: str | None = None) -> None:
        """Destroy a box and everything the host held for it. Idempotent."""
        ...

    def stop_later(self, runtime_id: str, key: str) -> None:
        """stop(), without waiting for it."""
        ...

    def holds(self, runtime_id: str) -> bool:
        """Whether the node has this box (booted, restored or adopted, and not stopped)."""
        ...

    def checkpoint_estimate(self, runtime_id: str) -> int | None:
        """About the disk a pause's checkpoint of this box takes (what pause() finds room for
        first: the sandbox's resident memory plus slack); None where it cannot be told from here
        (a box this runtime does not hold; a fleet's API server, which sees no node's /proc)."""
        ...

    def is_running(self, runtime_id: str) -> bool:
        """Whether the node holds this box and has not seen it end."""
        ...

    async def is_alive(self, runtime_id: str) -> bool:
        """False only when the driver says the box is gone or stopped; in doubt, alive."""
        ...

    def agent(self, runtime_id: str) -> BoxAgent | None:
        """The agent of a box the node holds (None: it holds none of that id). Raises
        ChannelError while the box is being paused."""
        ...

    async def adopt(self, running: dict[str, str]) -> set[str]:
        """After a restart: take back the boxes still running (runtime id -> key), remove every
        other box of the node's. Returns the runtime ids taken back."""
        ...

    def capacity(self) -> Capacity: ...

    async def usage(self, runtime_id: str) -> list[UsageSample]:
        """The box's samples, oldest first, over the last hour it ran (across its pauses); empty
        for a box the node does not hold."""
        ...

    async def close(self) -> None:
        """Let go of the boxes without stopping them: they outlive the server."""
        ...
